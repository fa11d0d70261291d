"""Multi-indices and truncated multivariate polynomials: jets without redundancy.

A jet of order ``L`` of a field ``U(x + delta)`` is stored as its Taylor coefficients
``u_alpha = D^alpha U(x) / alpha!`` for every multi-index ``alpha`` in ``N`` variables
with ``|alpha| <= L``: ``C(N + L, L)`` numbers instead of the ``N^L`` entries of the
full symmetric tensor. Multi-indices are in *graded* order (by degree, then
lexicographically decreasing, so that ``e_0, e_1, ...`` follow the constant), which
makes the coefficients of degree ``k`` a contiguous block.

Products and derivatives of truncated polynomials are index tables computed once per
``(N, L)`` and cached.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations_with_replacement
from math import comb, factorial

import numpy as np

from ..runtime.namespace import array_namespace, on_device
from ..runtime.ordered import SumPlan, scatter_sum, sum_plan


@lru_cache(maxsize=None)
def multi_indices(n: int, order: int) -> np.ndarray:
    """Exponent vectors of all monomials of degree <= ``order`` in ``n`` variables,
    graded order; shape (C(n + order, order), n)."""
    rows = []
    for k in range(order + 1):
        for combo in combinations_with_replacement(range(n), k):
            e = np.zeros(n, dtype=np.int64)
            for i in combo:
                e[i] += 1
            rows.append(e)
    out = np.array(rows, dtype=np.int64).reshape(-1, n)
    out.setflags(write=False)
    return out


def n_coefficients(n: int, order: int) -> int:
    """``C(n + order, order)``."""
    return comb(n + order, order)


@lru_cache(maxsize=None)
def index_lookup(n: int, order: int) -> dict[tuple[int, ...], int]:
    """The position of each multi-index of degree <= ``order`` in the graded order."""
    return {tuple(int(v) for v in e): i for i, e in enumerate(multi_indices(n, order))}


@lru_cache(maxsize=None)
def degree_slices(n: int, order: int) -> tuple[slice, ...]:
    """Slice of the coefficients of each degree ``0..order``."""
    out, start = [], 0
    for k in range(order + 1):
        size = comb(n + k - 1, k)
        out.append(slice(start, start + size))
        start += size
    return tuple(out)


@lru_cache(maxsize=None)
def tensor_positions(n: int, order: int) -> tuple[np.ndarray, ...]:
    """For each degree ``k``: the flat position, in a full ``n^k`` tensor, of the
    sorted index tuple of each multi-index of degree ``k`` (graded order)."""
    out = []
    for k in range(order + 1):
        pos = []
        for combo in combinations_with_replacement(range(n), k):
            flat = 0
            for i in combo:
                flat = flat * n + i
            pos.append(flat)
        out.append(np.array(pos, dtype=np.int64))
    return tuple(out)


@lru_cache(maxsize=None)
def factorials(n: int, order: int) -> np.ndarray:
    """``alpha!`` for every multi-index of degree <= ``order``."""
    e = multi_indices(n, order)
    return np.array([np.prod([factorial(int(v)) for v in row]) for row in e], dtype=float)


def tensors_to_taylor(tensors: list[np.ndarray], n: int) -> np.ndarray:
    """Full symmetric derivative tensors ``D^k g`` (axes (..., *[n]*k)), k = 0..L, to
    Taylor coefficients (..., C(n + L, L))."""
    order = len(tensors) - 1
    pos = tensor_positions(n, order)
    lead = tensors[0].shape
    xp = array_namespace(tensors[0])
    lead = tuple(lead)
    parts = [tensors[k].reshape(lead + (-1,))[..., on_device(pos[k], xp)]
             for k in range(order + 1)]
    return xp.concatenate(parts, axis=-1) / on_device(factorials(n, order), xp)


@lru_cache(maxsize=None)
def product_table(n: int, order_a: int, order_b: int, order_out: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index triples ``(ia, ib, io)`` with ``alpha_a + alpha_b = alpha_o`` and
    ``|alpha_o| <= order_out``: the truncated product ``c[io] += a[ia] * b[ib]``."""
    ea = multi_indices(n, order_a)
    eb = multi_indices(n, order_b)
    eo = multi_indices(n, order_out)
    # a multi-index of degree <= order_out as one integer (no carries: entries <= order_out)
    weights = (order_out + 1) ** np.arange(n, dtype=np.int64)
    ka, kb, ko = ea @ weights, eb @ weights, eo @ weights
    ia, ib = np.nonzero(ea.sum(1)[:, None] + eb.sum(1)[None, :] <= order_out)  # row-major
    keys = ka[ia] + kb[ib]
    sort = np.argsort(ko)
    io = sort[np.searchsorted(ko[sort], keys)]
    return ia.astype(np.int64), ib.astype(np.int64), io.astype(np.int64)


@lru_cache(maxsize=None)
def derivative_table(n: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``d/d delta_i`` of a polynomial of degree ``order``: for every variable ``i``
    (first axis) the source index, target index (degree ``order - 1``) and factor
    ``alpha_i``; arrays of shape (n, C(n + order - 1, order - 1)) with factor 0 where a
    target has no source."""
    if order == 0:
        return (np.zeros((n, 1), np.int64), np.zeros((n, 1), np.int64), np.zeros((n, 1)))
    tgt = multi_indices(n, order - 1)
    look = index_lookup(n, order)
    src = np.zeros((n, len(tgt)), dtype=np.int64)
    fac = np.zeros((n, len(tgt)))
    for i in range(n):
        for j, e in enumerate(tgt):
            s = list(int(v) for v in e)
            s[i] += 1
            src[i, j] = look[tuple(s)]
            fac[i, j] = s[i]
    return src, np.broadcast_to(np.arange(len(tgt)), (n, len(tgt))).copy(), fac


def poly_derivatives(u: np.ndarray, n: int, order: int) -> np.ndarray:
    """All first partials of the polynomials ``u`` (..., C(n+order, order)): returns
    (..., n, C(n + order - 1, order - 1)), truncated to degree ``order - 1``."""
    src, _, fac = derivative_table(n, order)
    xp = array_namespace(u)
    return u[..., on_device(src, xp)] * on_device(fac, xp)


@lru_cache(maxsize=None)
def _mul_plan(n: int, order: int) -> tuple[np.ndarray, np.ndarray, SumPlan]:
    ia, ib, io = product_table(n, order, order, order)
    return ia, ib, sum_plan(io, n_coefficients(n, order))


@lru_cache(maxsize=None)
def _padded_mul_plan(n: int, order: int) -> tuple | None:
    """`_mul_plan`'s factors taken straight in `SumPlan.padded`'s order, ``(ia, ib,
    minus, plus, rows)``: at a pad the product of the first coefficients (a term of
    every product, so its floating-point warnings are raised anyway), overwritten by
    the pad itself, -0.0 at the positions ``minus`` and +0.0 at ``plus``
    (`runtime.ordered.PADS`); ``rows`` of the padded rectangle. None where the rectangle
    holds more than twice as many entries as there are products (many variables, high
    degree: the products of the pads would cost more than the copy they save)."""
    ia, ib, plan = _mul_plan(n, order)
    n_terms = ia.size
    pos = plan.padded
    if pos.size > 2 * n_terms:
        return None
    real = pos < n_terms
    pa = np.where(real, np.concatenate([ia, [0, 0]])[pos], 0)
    pb = np.where(real, np.concatenate([ib, [0, 0]])[pos], 0)
    return (pa, pb, np.flatnonzero(pos == n_terms), np.flatnonzero(pos == n_terms + 1),
            pos.size // plan.n_out)


def poly_mul(a: np.ndarray, b: np.ndarray, n: int, order: int) -> np.ndarray:
    """Truncated product of polynomials with coefficients on the last axis (broadcast
    over the leading axes), both and the result of degree <= ``order``."""
    ia, ib, plan = _mul_plan(n, order)
    nc = plan.n_out
    padded = (_padded_mul_plan(n, order) if type(a) is np.ndarray and type(b) is np.ndarray
              and nc > 1 else None)
    if (padded is not None and a.dtype == np.float64 and b.dtype == np.float64
            and a.shape[-1] == b.shape[-1] == nc):
        # `scatter_sum`'s sums (`sum_padded`) with the products gathered in its order at
        # once: the same products, pads and additions, bit for bit, two copies less
        pa, pb, minus, plus, rows = padded
        terms = a[..., pa] * b[..., pb]
        terms[..., minus] = -0.0
        if plus.size:
            terms[..., plus] = 0.0
        return np.add.reduce(terms.reshape(terms.shape[:-1] + (rows, nc)), axis=-2,
                             initial=-0.0)
    xp = array_namespace(a, b)
    return scatter_sum(a[..., on_device(ia, xp)] * b[..., on_device(ib, xp)], plan, xp)


@lru_cache(maxsize=None)
def _monomial_plan(n_vars: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """For each multi-index of degree >= 1 (graded order): the index of
    ``alpha - e_j`` and ``j``, with ``j`` its first non-zero variable."""
    E = multi_indices(n_vars, order)
    look = index_lookup(n_vars, order)
    parent = np.zeros(len(E), dtype=np.int64)
    var = np.zeros(len(E), dtype=np.int64)
    for i, e in enumerate(E[1:], start=1):
        j = int(np.flatnonzero(e)[0])
        f = e.copy()
        f[j] -= 1
        parent[i] = look[tuple(int(v) for v in f)]
        var[i] = j
    return parent, var


def monomials(inner: np.ndarray, n: int, order: int) -> np.ndarray:
    """All products ``u^alpha`` (graded order, ``|alpha| <= order``) of the polynomials
    ``inner`` (B, m, C(n + order, order)) in ``n`` variables: (B, C(m + order, order), c)."""
    B, m, nc = inner.shape
    parent, var = _monomial_plan(m, order)
    U = np.zeros((B, parent.size, nc))
    U[:, 0, 0] = 1.0
    # degree by degree (graded order: a degree is a slice, its parents of the degree
    # before), each product the one `poly_mul` of the monomial alone gives
    for sl in degree_slices(m, order)[1:]:
        if sl.stop - sl.start == 1:      # one monomial (m = 1): views, not gathered copies
            i = sl.start
            U[:, i] = poly_mul(U[:, parent[i]], inner[:, var[i]], n, order)
        else:
            U[:, sl] = poly_mul(U[:, parent[sl]], inner[:, var[sl]], n, order)
    return U


@lru_cache(maxsize=None)
def _split_plan(n: int, m: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Joint multi-index (``n`` then ``m`` variables) -> (index of its ``theta`` part among
    ``multi_indices(m, order)``, index of its ``z`` part among ``multi_indices(n, order)``)."""
    E = multi_indices(n + m, order)
    lz, lt = index_lookup(n, order), index_lookup(m, order)
    it = np.array([lt[tuple(int(v) for v in e[n:])] for e in E], dtype=np.int64)
    iz = np.array([lz[tuple(int(v) for v in e[:n])] for e in E], dtype=np.int64)
    return it, iz


def compose_split(coef: np.ndarray, psi_monomials: np.ndarray, n: int, m: int,
                  order: int) -> np.ndarray:
    """``g(x + delta, theta_0 + psi(delta))`` truncated at ``order``.

    ``coef`` (B, *out, C(n + m + order, order)) are the joint Taylor coefficients of ``g``
    in ``(z, theta)`` around ``(x, theta_0)``; ``psi_monomials`` (B, C(m + order, order),
    C(n + order, order)) are the products ``psi^beta`` from `monomials` (``psi`` without
    constant term). The ``z`` part needs no multiplication: ``delta^alpha`` is a
    coefficient.
    """
    it, iz = _split_plan(n, m, order)
    B = coef.shape[0]
    lead = coef.shape[:-1]
    nt, nc = psi_monomials.shape[1], psi_monomials.shape[2]
    c2 = coef.reshape(B, -1, coef.shape[-1])
    P = np.zeros((B, c2.shape[1], nt, nc))
    P[:, :, it, iz] = c2
    out = poly_mul(P, psi_monomials[:, None], n, order).sum(axis=2)
    return out.reshape(lead + (nc,))


@lru_cache(maxsize=None)
def joint_positions(n: int, m: int, order: int) -> tuple:
    """For each multi-index in ``n + m`` variables (``z`` then ``theta``) of degree <=
    ``order``: ``(dz, dth, flat position in the (n^dz, m^dth) tensor, alpha!)``."""
    E = multi_indices(n + m, order)
    rows = []
    for e in E:
        ez, et = e[:n], e[n:]
        zi = [i for i in range(n) for _ in range(int(ez[i]))]
        ti = [i for i in range(m) for _ in range(int(et[i]))]
        shape = (n,) * len(zi) + (m,) * len(ti)
        pos = int(np.ravel_multi_index(tuple(zi + ti), shape)) if shape else 0
        fact = float(np.prod([factorial(int(v)) for v in e]))
        rows.append((len(zi), len(ti), pos, fact))
    return tuple(rows)
