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
def _lookup(n: int, order: int) -> dict[tuple[int, ...], int]:
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
    parts = [tensors[k].reshape(lead + (-1,))[..., pos[k]] for k in range(order + 1)]
    return np.concatenate(parts, axis=-1) / factorials(n, order)


def taylor_to_tensor(coef: np.ndarray, n: int, k: int) -> np.ndarray:
    """The full symmetric tensor ``D^k g`` (..., *[n]*k) from Taylor coefficients."""
    order = _order_of(coef.shape[-1], n)
    sl = degree_slices(n, order)[k]
    fact = factorials(n, order)[sl]
    vals = coef[..., sl] * fact
    out = np.empty(coef.shape[:-1] + (n,) * k)
    lookup = _lookup(n, order)
    from itertools import product

    flat = out.reshape(coef.shape[:-1] + (-1,))
    base = sl.start
    for j, idx in enumerate(product(range(n), repeat=k)):
        e = [0] * n
        for i in idx:
            e[i] += 1
        flat[..., j] = vals[..., lookup[tuple(e)] - base]
    return out


def _order_of(size: int, n: int) -> int:
    order = 0
    while n_coefficients(n, order) < size:
        order += 1
    if n_coefficients(n, order) != size:
        raise ValueError(f"{size} is not a number of Taylor coefficients in {n} variables")
    return order


@lru_cache(maxsize=None)
def product_table(n: int, order_a: int, order_b: int, order_out: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index triples ``(ia, ib, io)`` with ``alpha_a + alpha_b = alpha_o`` and
    ``|alpha_o| <= order_out``: the truncated product ``c[io] += a[ia] * b[ib]``."""
    ea = multi_indices(n, order_a)
    eb = multi_indices(n, order_b)
    look = _lookup(n, order_out)
    ia, ib, io = [], [], []
    da = ea.sum(1)
    db = eb.sum(1)
    for i, a in enumerate(ea):
        for j, b in enumerate(eb):
            if da[i] + db[j] > order_out:
                continue
            ia.append(i)
            ib.append(j)
            io.append(look[tuple(int(v) for v in a + b)])
    return (np.array(ia, dtype=np.int64), np.array(ib, dtype=np.int64),
            np.array(io, dtype=np.int64))


@lru_cache(maxsize=None)
def derivative_table(n: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``d/d delta_i`` of a polynomial of degree ``order``: for every variable ``i``
    (first axis) the source index, target index (degree ``order - 1``) and factor
    ``alpha_i``; arrays of shape (n, C(n + order - 1, order - 1)) with factor 0 where a
    target has no source."""
    if order == 0:
        return (np.zeros((n, 1), np.int64), np.zeros((n, 1), np.int64), np.zeros((n, 1)))
    tgt = multi_indices(n, order - 1)
    look = _lookup(n, order)
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
    return u[..., src] * fac
