"""Brute-force checks of the truncated-polynomial algebra that carries the jets.

`invimbed._core.derivatives.multiindex` stores a polynomial of total degree <= K in N
variables as its C(N + K, K) coefficients in graded order, and multiplies, differentiates,
composes and converts such polynomials through precomputed index tables. Every table is
checked here against sympy on random polynomials with small integer coefficients, so
that the reference is exact and the float results are exact too (integer arithmetic well
inside 2**53) or, where a Taylor series brings rational coefficients, within 1e-12.
`invimbed._core.runtime.ordered` (the fixed-order sums the tables are applied with) is checked
against plain numpy sums.

The hypothesis profile (``ci`` / ``dev``, see ``conftest.py``) decides randomisation;
the sympy-heavy tests cap ``max_examples`` to keep the file at a few seconds.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product
from math import comb, factorial

import numpy as np
import pytest
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from invimbed._core.runtime import ordered
from invimbed._core.derivatives import multiindex as mi

NS = st.integers(1, 3)        # number of variables
KS = st.integers(0, 4)        # truncation degree
COEF = st.integers(-4, 4)     # coefficients: exact in float64 and in sympy
FEW = settings(max_examples=40)
SERIES = settings(max_examples=25)


# -- helpers: vectors in the module's ordering <-> sympy -------------------------------------
#
# Exact references live in sympy's sparse polynomial rings over QQ (dicts exponent tuple ->
# rational). Truncating at total degree K after every product is exact (the monomials of
# degree > K form an ideal), and keeps the references fast; the series tests work on sympy
# expressions with `sympy.series` instead.

def _syms(prefix: str, n: int) -> tuple[sp.Symbol, ...]:
    return tuple(sp.Symbol(f"{prefix}{i}") for i in range(n))


@lru_cache(maxsize=None)
def ring(prefix: str, n: int):
    """``(R, generators)``: the polynomial ring over QQ in ``prefix0 .. prefix{n-1}``."""
    R, *gens = sp.ring([f"{prefix}{i}" for i in range(n)], sp.QQ)
    return R, tuple(gens)


def _exact(c) -> int:
    assert float(c).is_integer(), c
    return int(c)


def to_poly(coef, R, order: int):
    """The ring element with coefficients ``coef`` (module order, degree <= ``order``)."""
    E = mi.multi_indices(R.ngens, order)
    assert len(coef) == len(E)
    return R.from_dict({tuple(int(v) for v in e): sp.QQ(_exact(c)) for c, e in zip(coef, E)})


def from_poly(p, order: int) -> np.ndarray:
    """Coefficients of the ring element ``p`` up to degree ``order``, module order."""
    E = mi.multi_indices(p.ring.ngens, order)
    look = {tuple(int(v) for v in e): i for i, e in enumerate(E)}
    out = np.zeros(len(look))
    for mono, c in p.items():
        if sum(mono) <= order:
            out[look[mono]] = float(c)
    return out


def trunc(p, order: int):
    return p.ring.from_dict({m: c for m, c in p.items() if sum(m) <= order})


def tmul(p, q, order: int):
    return trunc(p * q, order)


def tpowers(p, order: int) -> list:
    """``[1, p, p^2, ..., p^order]``, truncated at ``order``."""
    out = [p.ring.one]
    for _ in range(order):
        out.append(tmul(out[-1], p, order))
    return out


def evaluate(g, values, order: int):
    """``g(values)`` truncated at ``order`` (``values``: one ring element per variable of
    ``g``, all in one ring)."""
    R = values[0].ring
    pw = [tpowers(v, order) for v in values]
    acc = R.zero
    for mono, c in g.items():
        term = R.one * c
        for j, e in enumerate(mono):
            term = tmul(term, pw[j][e], order)
        acc += term
    return trunc(acc, order)


def from_expr(expr: sp.Expr, xs, order: int) -> np.ndarray:
    """Coefficients of the polynomial expression ``expr`` in ``xs`` up to degree
    ``order``, module order."""
    R, _ = ring("w", len(xs))
    poly = sp.Poly(sp.expand(expr), *xs)
    return from_poly(R.from_dict({m: sp.QQ.from_sympy(c) for m, c in poly.terms()}), order)


def to_expr(coef, xs, order: int) -> sp.Expr:
    E = mi.multi_indices(len(xs), order)
    return sp.Add(*[sp.Integer(_exact(c)) * sp.Mul(*[x ** int(p) for x, p in zip(xs, e)])
                    for c, e in zip(coef, E)])


def assert_close(actual, expected) -> None:
    expected = np.asarray(expected, dtype=float)
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12 * scale)


def coefs(data, n: int, order: int, *, constant: bool = True) -> np.ndarray:
    """A random polynomial in ``n`` variables of degree <= ``order`` (module order)."""
    size = mi.n_coefficients(n, order)
    v = np.array(data.draw(st.lists(COEF, min_size=size, max_size=size)), dtype=float)
    if not constant:
        v[0] = 0.0
    return v


@lru_cache(maxsize=None)
def phi_taylor(name: str, order: int) -> tuple:
    """Exact Taylor coefficients ``phi_0 .. phi_order`` of ``PHI[name]`` at 0
    (`sympy.series` in one variable)."""
    x = sp.Symbol("x")
    ser = sp.series(PHI[name](x), x, 0, order + 1).removeO()
    return tuple(sp.QQ.from_sympy(ser.coeff(x, k)) for k in range(order + 1))


def apply_phi(name: str, q, order: int):
    """``phi(q)`` truncated at ``order``, ``q`` a ring element without constant term."""
    assert q.get((0,) * q.ring.ngens, 0) == 0
    pw = tpowers(q, order)
    return trunc(sum((c * p for c, p in zip(phi_taylor(name, order), pw)), q.ring.zero), order)


# outer functions u -> phi(u), analytic at 0, exact rational Taylor coefficients
PHI = {
    "exp": sp.exp,
    "sin": sp.sin,
    "cos": sp.cos,
    "log1p": lambda u: sp.log(1 + u),
    "geometric": lambda u: 1 / (1 - u),
    "sqrt1p": lambda u: sp.sqrt(1 + u),
    "atan": sp.atan,
}
PHI_NAMES = st.sampled_from(sorted(PHI))


# -- multi-indices and their bookkeeping (exhaustive) ------------------------------------------

CASES = [(n, k) for n in (1, 2, 3) for k in (0, 1, 2, 3, 4)]


@pytest.mark.parametrize("n, order", CASES)
def test_multi_indices_are_all_monomials_in_graded_decreasing_lex_order(n, order):
    E = mi.multi_indices(n, order)
    brute = [e for e in product(range(order + 1), repeat=n) if sum(e) <= order]
    brute.sort(key=lambda e: (sum(e), tuple(-v for v in e)))
    assert E.shape == (len(brute), n) and E.dtype.kind == "i"
    assert [tuple(int(v) for v in e) for e in E] == brute
    assert len(brute) == mi.n_coefficients(n, order) == comb(n + order, order)
    if order >= 1:  # the constant, then e_0, e_1, ...
        np.testing.assert_array_equal(E[1:n + 1], np.eye(n, dtype=int))
    assert not E.flags.writeable  # cached: must not be mutable by a caller
    # the truncation at a lower degree is a prefix
    for k in range(order + 1):
        np.testing.assert_array_equal(mi.multi_indices(n, k), E[:mi.n_coefficients(n, k)])


@pytest.mark.parametrize("n, order", CASES)
def test_degree_slices_factorials_and_tensor_positions(n, order):
    E = mi.multi_indices(n, order)
    sl = mi.degree_slices(n, order)
    assert len(sl) == order + 1
    covered = []
    for k, s in enumerate(sl):
        assert (E[s].sum(axis=1) == k).all()
        assert s.stop - s.start == comb(n + k - 1, k)
        covered.extend(range(s.start, s.stop))
    assert covered == list(range(len(E)))  # contiguous, in order, complete
    fact = mi.factorials(n, order)
    assert fact.tolist() == [float(np.prod([factorial(int(v)) for v in e])) for e in E]
    pos = mi.tensor_positions(n, order)
    for k, s in enumerate(sl):
        assert len(pos[k]) == s.stop - s.start
        for e, p in zip(E[s], pos[k]):
            idx = np.unravel_index(int(p), (n,) * k) if k else ()
            assert sorted(int(i) for i in idx) == list(idx)  # the sorted index tuple
            assert np.bincount(np.array(idx, dtype=int), minlength=n).tolist() == e.tolist()


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("ka, kb, kout", [(a, b, o) for a in range(4) for b in range(4)
                                           for o in range(5)])
def test_product_table_is_the_set_of_all_exponent_sums(n, ka, kb, kout):
    Ea, Eb, Eo = (mi.multi_indices(n, k) for k in (ka, kb, kout))
    ia, ib, io = mi.product_table(n, ka, kb, kout)
    got = sorted(zip(ia.tolist(), ib.tolist(), io.tolist()))
    look = {tuple(e): i for i, e in enumerate(Eo.tolist())}
    want = sorted((i, j, look[tuple(x + y for x, y in zip(a, b))])
                  for i, a in enumerate(Ea.tolist()) for j, b in enumerate(Eb.tolist())
                  if sum(a) + sum(b) <= kout)
    assert got == want


# -- products --------------------------------------------------------------------------------

@FEW
@given(n=NS, ka=KS, kb=KS, kout=KS, data=st.data())
def test_product_table_multiplies_like_sympy(n, ka, kb, kout, data):
    a, b = coefs(data, n, ka), coefs(data, n, kb)
    ia, ib, io = mi.product_table(n, ka, kb, kout)
    c = np.zeros(mi.n_coefficients(n, kout))
    np.add.at(c, io, a[ia] * b[ib])
    xs = _syms("x", n)
    want = from_expr(sp.expand(to_expr(a, xs, ka) * to_expr(b, xs, kb)), xs, kout)
    np.testing.assert_array_equal(c, want)


@FEW
@given(n=NS, order=KS, batch=st.integers(1, 3), data=st.data())
def test_poly_mul_is_the_truncated_product_and_broadcasts(n, order, batch, data):
    a = np.stack([coefs(data, n, order) for _ in range(batch)])   # (batch, c)
    b = coefs(data, n, order)                                     # broadcast over batch
    got = mi.poly_mul(a, b[None, :], n, order)
    assert got.shape == a.shape
    R, _ = ring("x", n)
    pb = to_poly(b, R, order)
    for r in range(batch):
        np.testing.assert_array_equal(got[r], from_poly(to_poly(a[r], R, order) * pb, order))
    # commutative, and 1 is the unit
    np.testing.assert_array_equal(mi.poly_mul(b[None, :], a, n, order), got)
    one = np.zeros_like(b)
    one[0] = 1.0
    np.testing.assert_array_equal(mi.poly_mul(a, one, n, order), a)


@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_monomials_are_the_truncated_powers(n, m, order, data):
    inner = np.stack([coefs(data, n, order) for _ in range(m)])[None]   # (1, m, c)
    U = mi.monomials(inner, n, order)
    assert U.shape == (1, mi.n_coefficients(m, order), mi.n_coefficients(n, order))
    R, _ = ring("x", n)
    pw = [tpowers(to_poly(inner[0, j], R, order), order) for j in range(m)]
    for i, beta in enumerate(mi.multi_indices(m, order)):
        want = R.one
        for j, p in enumerate(beta):
            want = want * pw[j][int(p)]
        np.testing.assert_array_equal(U[0, i], from_poly(want, order),
                                      err_msg=f"u^{beta.tolist()}")


# -- derivatives and derivative-tensor conversions ---------------------------------------------

@FEW
@given(n=NS, order=KS, data=st.data())
def test_poly_derivatives_are_sympy_diff(n, order, data):
    u = np.stack([coefs(data, n, order), coefs(data, n, order)])   # (2, c): leading axes
    got = mi.poly_derivatives(u, n, order)
    xs = _syms("x", n)
    if order == 0:
        assert got.shape[:-1] == (2, n) and not got.any()
        return
    assert got.shape == (2, n, mi.n_coefficients(n, order - 1))
    for r in range(2):
        p = to_expr(u[r], xs, order)
        for i, x in enumerate(xs):
            np.testing.assert_array_equal(got[r, i], from_expr(sp.diff(p, x), xs, order - 1),
                                          err_msg=f"d/dx{i}")
    src, tgt, fac = mi.derivative_table(n, order)
    np.testing.assert_array_equal(tgt, np.broadcast_to(np.arange(src.shape[1]), src.shape))


def _derivative_tensor(p: sp.Expr, xs, at: dict, k: int) -> np.ndarray:
    n = len(xs)
    T = np.empty((n,) * k)
    for idx in product(range(n), repeat=k):
        q = p
        for i in idx:
            q = sp.diff(q, xs[i])
        T[idx] = float(q.subs(at))
    return T


def taylor_to_tensor(coef: np.ndarray, n: int, k: int) -> np.ndarray:
    """The symmetric tensor ``D^k g`` (..., *[n]*k) from Taylor coefficients, entry by
    entry: ``D^k g[i_1..i_k] = alpha! c_alpha`` with ``alpha`` the exponent of the
    index tuple (the inverse of `tensors_to_taylor`, written independently of it)."""
    order = 0
    while mi.n_coefficients(n, order) < coef.shape[-1]:
        order += 1
    index = {tuple(int(v) for v in e): j for j, e in enumerate(mi.multi_indices(n, order))}
    out = np.empty(coef.shape[:-1] + (n,) * k)
    for idx in product(range(n), repeat=k):
        e = [0] * n
        for i in idx:
            e[i] += 1
        alpha_fact = float(np.prod([factorial(v) for v in e]))
        out[(...,) + idx] = coef[..., index[tuple(e)]] * alpha_fact
    return out


@FEW
@given(n=NS, order=KS, data=st.data())
def test_tensors_to_taylor_and_back_match_sympy(n, order, data):
    """Full derivative tensors ``D^k p(x0)`` (sympy ``diff``) <-> Taylor coefficients of
    ``p(x0 + d)`` (sympy ``expand``), over a leading axis of two polynomials."""
    xs, ds = _syms("x", n), _syms("d", n)
    x0 = data.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n))
    at = dict(zip(xs, x0))
    polys = [to_expr(coefs(data, n, order), xs, order) for _ in range(2)]
    tensors = [np.stack([_derivative_tensor(p, xs, at, k) for p in polys])
               for k in range(order + 1)]
    got = mi.tensors_to_taylor(tensors, n)
    shift = {x: x0i + d for x, x0i, d in zip(xs, x0, ds)}
    for r, p in enumerate(polys):
        assert_close(got[r], from_expr(p.subs(shift, simultaneous=True), ds, order))
    for k in range(order + 1):
        np.testing.assert_allclose(taylor_to_tensor(got, n, k), tensors[k],
                                   rtol=1e-12, atol=1e-12)


@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_joint_positions_read_joint_coefficients_off_derivative_tensors(n, m, order, data):
    """Row ``i``: ``c_i = T.flat[pos] / alpha!`` with ``T`` the mixed tensor
    ``D_z^dz D_theta^dth g`` laid out ``(n,)*dz + (m,)*dth`` (z axes first)."""
    R, gens = ring("v", n + m)
    zs, ths = gens[:n], gens[n:]
    coef = coefs(data, n + m, order)
    g = to_poly(coef, R, order)
    zero = (0,) * (n + m)
    rows = mi.joint_positions(n, m, order)
    E = mi.multi_indices(n + m, order)
    assert len(rows) == len(E)
    cache: dict = {}
    for i, ((dz, dth, pos, fact), e) in enumerate(zip(rows, E)):
        assert (dz, dth) == (int(e[:n].sum()), int(e[n:].sum()))
        if (dz, dth) not in cache:
            T = np.empty((n,) * dz + (m,) * dth)
            for zi in product(range(n), repeat=dz):
                for ti in product(range(m), repeat=dth):
                    q = g
                    for v in [zs[j] for j in zi] + [ths[j] for j in ti]:
                        q = q.diff(v)
                    T[zi + ti] = float(q.get(zero, 0))
            cache[(dz, dth)] = T.reshape(-1)
        assert cache[(dz, dth)][pos] / fact == coef[i], (e.tolist(), dz, dth, pos, fact)


# -- composition --------------------------------------------------------------------------------

def _linear(ws, gens):
    return sum((w * g for w, g in zip(ws, gens)), gens[0].ring.zero)


@SERIES
@given(n=NS, m=NS, order=KS, phi=PHI_NAMES, chi=PHI_NAMES, data=st.data())
def test_compose_split_taylor_series_of_a_function_with_a_polynomial(n, m, order, phi, chi,
                                                                      data):
    """``f(psi(d))`` for ``f(theta) = phi(w . theta) chi(theta_0)`` (no ``z``
    dependence): the module composes the joint Taylor coefficients of ``f`` with the
    monomials of ``psi`` (no constant term); the reference substitutes ``psi`` into the
    one-variable series of ``phi`` and ``chi`` (sympy) directly."""
    w = data.draw(st.lists(st.integers(-2, 2), min_size=m, max_size=m))
    Rv, v = ring("v", n + m)
    f = tmul(apply_phi(phi, _linear(w, v[n:]), order), apply_phi(chi, v[n], order), order)
    coef = from_poly(f, order)[None]                      # joint coefficients in (z, theta)
    psi = np.stack([coefs(data, n, order, constant=False) for _ in range(m)])[None]
    got = mi.compose_split(coef, mi.monomials(psi, n, order), n, m, order)
    R, _ = ring("d", n)
    th = [to_poly(psi[0, j], R, order) for j in range(m)]
    want = tmul(apply_phi(phi, _linear(w, th), order), apply_phi(chi, th[0], order), order)
    assert_close(got[0], from_poly(want, order))


@SERIES
@given(n=NS, m=NS, order=KS, phi=PHI_NAMES, data=st.data())
def test_compose_split_taylor_series_of_a_function_of_state_and_control(n, m, order, phi,
                                                                          data):
    """``f(x + d, theta_0 + psi(d))`` for ``f(z, theta) = phi(a . (z, theta)) + z_0
    theta_last``, as above."""
    a = data.draw(st.lists(st.integers(-2, 2), min_size=n + m, max_size=n + m))
    Rv, v = ring("v", n + m)
    f = apply_phi(phi, _linear(a, v), order) + trunc(v[0] * v[-1], order)
    coef = from_poly(f, order)[None]
    psi = np.stack([coefs(data, n, order, constant=False) for _ in range(m)])[None]
    got = mi.compose_split(coef, mi.monomials(psi, n, order), n, m, order)
    R, ds = ring("d", n)
    args = list(ds) + [to_poly(psi[0, j], R, order) for j in range(m)]
    want = apply_phi(phi, _linear(a, args), order) + trunc(args[0] * args[-1], order)
    assert_close(got[0], from_poly(want, order))


@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_compose_split_substitutes_a_feedback(n, m, order, data):
    """``g(x + d, theta_0 + psi(d))`` with ``g`` a polynomial in (z, theta), batched
    over B = 2 and an output axis of 2."""
    B, nout = 2, 2
    coef = np.stack([np.stack([coefs(data, n + m, order) for _ in range(nout)])
                     for _ in range(B)])                               # (B, out, c_{n+m})
    psi = np.stack([np.stack([coefs(data, n, order, constant=False) for _ in range(m)])
                    for _ in range(B)])                                # (B, m, c_n)
    got = mi.compose_split(coef, mi.monomials(psi, n, order), n, m, order)
    assert got.shape == (B, nout, mi.n_coefficients(n, order))
    R, ds = ring("d", n)
    Rg, _ = ring("v", n + m)
    for b in range(B):
        values = list(ds) + [to_poly(psi[b, j], R, order) for j in range(m)]
        for o in range(nout):
            want = evaluate(to_poly(coef[b, o], Rg, order), values, order)
            np.testing.assert_array_equal(got[b, o], from_poly(want, order))


# -- invimbed._core.runtime.ordered -------------------------------------------------------------------

FINITE = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@given(n_out=st.integers(1, 6), data=st.data())
def test_sum_table_lists_each_targets_positions_in_order(n_out, data):
    targets = np.array(data.draw(st.lists(st.integers(0, n_out - 1), max_size=30)),
                       dtype=np.int64)
    table = ordered.sum_table(targets, n_out)
    hits = [[j for j in range(targets.size) if targets[j] == k] for k in range(n_out)]
    width = max(1, max(len(h) for h in hits))
    want = [h + [targets.size] * (width - len(h)) for h in hits]
    assert table.tolist() == want


@given(n_out=st.integers(1, 6), lead=st.sampled_from([(), (3,), (2, 2)]), data=st.data())
def test_scatter_sum_adds_in_index_order_whatever_the_leading_shape(n_out, lead, data):
    targets = np.array(data.draw(st.lists(st.integers(0, n_out - 1), max_size=20)),
                       dtype=np.int64)
    values = data.draw(arrays(np.float64, lead + (targets.size,), elements=FINITE))
    got = ordered.scatter_sum(values, ordered.sum_table(targets, n_out))
    assert got.shape == lead + (n_out,)
    # the plan the package's callers keep gives the same sums, bit for bit
    np.testing.assert_array_equal(ordered.scatter_sum(values, ordered.sum_plan(targets, n_out)),
                                  got)
    rows = int(np.prod(lead, dtype=int))
    flat_v, flat_g = values.reshape(rows, targets.size), got.reshape(rows, n_out)
    for r in range(flat_v.shape[0]):
        for k in range(n_out):
            acc = 0.0                                 # left to right, as documented
            for j in np.flatnonzero(targets == k):
                acc = acc + flat_v[r, j]
            assert flat_g[r, k] == acc
            ref = flat_v[r, targets == k].sum()
            assert abs(flat_g[r, k] - ref) <= 1e-12 * max(1.0, np.abs(flat_v[r]).sum())
        # a row's sum does not depend on the rows computed with it
        alone = ordered.scatter_sum(flat_v[r], ordered.sum_table(targets, n_out))
        np.testing.assert_array_equal(alone, flat_g[r])


#: values whose sums test the bits: signed zeros, overflow to infinity, subnormals
SPECIAL = st.sampled_from([0.0, -0.0, 1.5, -2.25, 1e308, -1e308, np.inf, -np.inf, 5e-324]) | FINITE


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@given(n_out=st.integers(1, 6), lead=st.sampled_from([(), (1,), (3,), (1, 1), (2, 3)]),
       data=st.data())
def test_scatter_sum_is_the_running_sum_bit_for_bit(n_out, lead, data):
    """The one-reduction sum of numpy arrays (`ordered.sum_padded`) adds each output's
    terms as the running sum of `ordered.add_in_plan_order` does: the same bits, the
    sign of a zero, overflow and outputs without a term (+0.0) included; float32 too."""
    targets = np.array(data.draw(st.lists(st.integers(0, n_out - 1), max_size=20)),
                       dtype=np.int64)
    values = data.draw(arrays(np.float64, lead + (targets.size,), elements=SPECIAL))
    plan = ordered.sum_plan(targets, n_out)
    with np.errstate(invalid="ignore", over="ignore"):
        got = ordered.scatter_sum(values, plan)
        want = ordered.add_in_plan_order(values[..., plan.order], plan)
        assert got.shape == want.shape == lead + (n_out,) and _bits(got) == _bits(want)
        rows = int(np.prod(lead, dtype=int))
        flat_v, flat_g = values.reshape(rows, targets.size), got.reshape(rows, n_out)
        for r in range(rows):
            for k in range(n_out):
                terms = flat_v[r, targets == k]
                acc = terms[0] if terms.size else np.float64(0.0)   # left to right
                for v in terms[1:]:
                    acc = acc + v
                assert _bits(flat_g[r, k]) == _bits(acc), (r, k, terms, flat_g[r, k])
        single = values.astype(np.float32)
        got = ordered.scatter_sum(single, plan)
        want = ordered.add_in_plan_order(single[..., plan.order], plan)
    assert got.dtype == want.dtype and _bits(got) == _bits(want)


@settings(max_examples=30)
@given(n=st.integers(1, 3), order=st.integers(1, 3),
       shapes=st.sampled_from([((1,), (1,)), ((2, 3), (1, 3)), ((2, 1), (4,)), ((), ())]),
       data=st.data())
def test_poly_mul_sums_the_products_in_the_plan_order_bit_for_bit(n, order, shapes, data):
    """`poly_mul` on float64 numpy arrays (its products gathered in the padded order, the
    pads written over them) is `scatter_sum` of the products of `product_table`'s pairs:
    the same bits, the sign of a zero, infinities, NaN and broadcasting included; and
    `monomials` (a degree at a time) is the product of each monomial alone."""
    c = mi.n_coefficients(n, order)
    a = data.draw(arrays(np.float64, shapes[0] + (c,), elements=SPECIAL))
    b = data.draw(arrays(np.float64, shapes[1] + (c,), elements=SPECIAL))
    ia, ib, io = mi.product_table(n, order, order, order)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        got = mi.poly_mul(a, b, n, order)
        want = ordered.scatter_sum(a[..., ia] * b[..., ib], ordered.sum_plan(io, c))
        assert got.shape == want.shape and _bits(got) == _bits(want)
        m = data.draw(st.integers(1, 3))
        inner = data.draw(arrays(np.float64, (2, m, c), elements=FINITE))
        U = mi.monomials(inner, n, order)
        parent, var = mi._monomial_plan(m, order)
        for i in range(1, parent.size):
            one = mi.poly_mul(U[:, parent[i]], inner[:, var[i]], n, order)
            assert _bits(U[:, i]) == _bits(one), i


@settings(max_examples=30)
@given(n=st.integers(1, 4), degree=st.integers(1, 4), out=st.sampled_from([(), (1,), (3,)]),
       B=st.sampled_from([1, 2]), data=st.data())
def test_jet_transport_is_the_derivative_then_the_ordered_contraction(n, degree, out, B, data):
    """The jet closure's ``grad U . Phi`` (`transport`, `contract_product`: einsum's
    products summed by `ordered.scatter_sum`) gives the bits of the plain route:
    `mi.poly_derivatives`, einsum over the shared axis (on operands of the same memory
    layout: einsum's rounding follows it), then the running sums in the product
    table's order. Several ``(n, degree)`` in one process: the plans kept per
    ``(n, degree)`` must never serve another."""
    from invimbed._core.closures import jet

    nc = mi.n_coefficients
    # the numpy route (from `jet._COMPILED_FROM` pairs a compiled kernel may add in
    # another order where it is cached: tests/test_taylor_mode.py compares those)
    assume(mi.product_table(n, degree - 1, degree, degree)[0].size < jet._COMPILED_FROM)
    U = data.draw(arrays(np.float64, (B,) + out + (nc(n, degree),), elements=SPECIAL))
    Phi = data.draw(arrays(np.float64, (B, n, nc(n, degree + 1)), elements=FINITE))

    def plain(a, b, oa, ob, oo):       # a (B, P, I, ca), b (B, I, 1, cb)
        ia, ib, io = mi.product_table(n, oa, ob, oo)
        prod = np.einsum("bpin,biqn->bpqn", a[..., ia], b[..., ib]).reshape(-1, ia.size)
        plan = ordered.sum_plan(io, nc(n, oo))
        return ordered.add_in_plan_order(prod[..., plan.order], plan)

    with np.errstate(invalid="ignore", over="ignore"):
        got = jet.transport(U, Phi, n, degree)
        dU = mi.poly_derivatives(U, n, degree)
        want = plain(dU.reshape(B, -1, n, dU.shape[-1]), Phi[:, :, None, :nc(n, degree)],
                     degree - 1, degree, degree)
        assert got.shape == U.shape and _bits(got) == _bits(want)


@given(data=st.data(), size=st.integers(1, 8), lead=st.sampled_from([(), (4,), (2, 3)]))
def test_sum_products_is_a_dot_product_on_the_last_axis(data, size, lead):
    a = data.draw(arrays(np.float64, lead + (size,), elements=FINITE))
    b = data.draw(arrays(np.float64, (size,), elements=FINITE))      # broadcast
    got = ordered.sum_products(a, b)
    want = (a * b).sum(axis=-1)
    assert np.shape(got) == lead
    np.testing.assert_allclose(got, want, rtol=1e-12,
                               atol=1e-12 * max(1.0, float(np.abs(a * b).sum())))
    acc = a[..., 0] * b[0]
    for j in range(1, size):
        acc = acc + a[..., j] * b[j]
    np.testing.assert_array_equal(got, acc)


@given(data=st.data(), stages=st.integers(1, 7), size=st.integers(1, 5))
def test_combine_is_a_linear_combination_of_rows(data, stages, size):
    coef = data.draw(arrays(np.float64, (stages,), elements=FINITE))
    rows = data.draw(arrays(np.float64, (stages, size), elements=FINITE))
    got = ordered.combine(coef, rows)
    want = (coef[:, None] * rows).sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-12,
                               atol=1e-12 * max(1.0, float(np.abs(coef[:, None] * rows).sum())))
    np.testing.assert_array_equal(got, sum((coef[j] * rows[j] for j in range(1, stages)),
                                           coef[0] * rows[0]))
