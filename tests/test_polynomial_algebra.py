"""Brute-force checks of the truncated-polynomial algebra that carries the jets.

`invimbed._core.derivatives.multiindex` stores a polynomial of total degree <= K in N
variables as its C(N + K, K) coefficients in graded order, and multiplies, differentiates,
composes and converts such polynomials through precomputed index tables. Every table is
checked here against sympy on random polynomials with small integer coefficients, so
that the reference is exact and the float results are exact too (integer arithmetic well
inside 2**53) or, where a Taylor series brings rational coefficients, within 1e-12.
`invimbed._core.ordered` (the fixed-order sums the tables are applied with) is checked
against plain numpy sums.

The hypothesis profile (``ci`` / ``dev``, see ``conftest.py``) decides randomisation;
the sympy-heavy tests cap ``max_examples`` to keep the file at a few seconds.
"""

from __future__ import annotations

from itertools import combinations_with_replacement, product
from math import comb, factorial

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from invimbed._core import ordered
from invimbed._core.derivatives import multiindex as mi

NS = st.integers(1, 3)        # number of variables
KS = st.integers(0, 4)        # truncation degree
COEF = st.integers(-4, 4)     # coefficients: exact in float64 and in sympy
FEW = settings(max_examples=25)
SERIES = settings(max_examples=12)


# -- helpers: vectors in the module's ordering <-> sympy expressions -------------------------

def _syms(prefix: str, n: int) -> tuple[sp.Symbol, ...]:
    return tuple(sp.Symbol(f"{prefix}{i}") for i in range(n))


def to_expr(coef, xs, order: int) -> sp.Expr:
    """The polynomial with coefficients ``coef`` (module order, degree <= ``order``)."""
    E = mi.multi_indices(len(xs), order)
    assert len(coef) == len(E)
    return sp.Add(*[sp.Rational(float(c)) * sp.Mul(*[x ** int(p) for x, p in zip(xs, e)])
                    for c, e in zip(coef, E)])


def from_expr(expr: sp.Expr, xs, order: int) -> list[sp.Rational]:
    """Coefficients of the polynomial ``expr`` in ``xs``, truncated at total degree
    ``order``, in the module's order (exact sympy numbers)."""
    look = {tuple(int(v) for v in e): i for i, e in enumerate(mi.multi_indices(len(xs), order))}
    out = [sp.Integer(0)] * len(look)
    poly = sp.Poly(sp.expand(expr), *xs)
    for mono, c in poly.terms():
        if sum(mono) <= order:
            out[look[mono]] += c
    return out


def truncate(expr: sp.Expr, xs, order: int) -> sp.Expr:
    return to_expr(from_expr(expr, xs, order), xs, order)


def floats(values) -> np.ndarray:
    return np.array([float(v) for v in values], dtype=float)


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


def taylor_at_zero(f: sp.Expr, us, order: int) -> list[sp.Rational]:
    """Exact Taylor coefficients of ``f`` at ``us = 0`` up to total degree ``order``
    (``us -> s us``, series in ``s``)."""
    s = sp.Symbol("s")
    g = f.subs({u: s * u for u in us}, simultaneous=True)
    ser = sp.series(g, s, 0, order + 1).removeO().subs(s, 1)
    return from_expr(ser, us, order)


def series_truncated(f: sp.Expr, ds, order: int) -> list[sp.Rational]:
    """Exact Taylor coefficients of ``f(d)`` at ``d = 0`` up to degree ``order``."""
    return taylor_at_zero(f, ds, order)


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
    want = from_expr(to_expr(a, xs, ka) * to_expr(b, xs, kb), xs, kout)
    np.testing.assert_array_equal(c, floats(want))


@FEW
@given(n=NS, order=KS, batch=st.integers(1, 3), data=st.data())
def test_poly_mul_is_the_truncated_product_and_broadcasts(n, order, batch, data):
    a = np.stack([coefs(data, n, order) for _ in range(batch)])   # (batch, c)
    b = coefs(data, n, order)                                     # (c,): broadcast
    got = mi.poly_mul(a, b[None, :], n, order)
    assert got.shape == a.shape
    xs = _syms("x", n)
    pb = to_expr(b, xs, order)
    for r in range(batch):
        want = from_expr(to_expr(a[r], xs, order) * pb, xs, order)
        np.testing.assert_array_equal(got[r], floats(want))
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
    xs = _syms("x", n)
    us = [to_expr(inner[0, j], xs, order) for j in range(m)]
    for i, beta in enumerate(mi.multi_indices(m, order)):
        prod_ = sp.Mul(*[u ** int(p) for u, p in zip(us, beta)])
        np.testing.assert_array_equal(U[0, i], floats(from_expr(prod_, xs, order)),
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
            want = from_expr(sp.diff(p, x), xs, order - 1)
            np.testing.assert_array_equal(got[r, i], floats(want), err_msg=f"d/dx{i}")
    src, tgt, fac = mi.derivative_table(n, order)
    np.testing.assert_array_equal(tgt, np.broadcast_to(np.arange(src.shape[1]), src.shape))


def _derivative_tensor(p: sp.Expr, xs, at: dict, k: int) -> np.ndarray:
    n = len(xs)
    T = np.empty((n,) * k)
    for idx in product(range(n), repeat=k):
        T[idx] = float(sp.diff(p, *[xs[i] for i in idx]).subs(at)) if k else float(p.subs(at))
    return T


@FEW
@given(n=NS, order=KS, data=st.data())
def test_tensors_to_taylor_and_back_match_sympy(n, order, data):
    xs, ds = _syms("x", n), _syms("d", n)
    x0 = data.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n))
    at = dict(zip(xs, x0))
    polys = [to_expr(coefs(data, n, order), xs, order) for _ in range(2)]
    # D^k p(x0) as full tensors, stacked over a leading axis of two polynomials
    tensors = [np.stack([_derivative_tensor(p, xs, at, k) for p in polys])
               for k in range(order + 1)]
    got = mi.tensors_to_taylor(tensors, n)
    shift = {x: x0i + d for x, x0i, d in zip(xs, x0, ds)}
    for r, p in enumerate(polys):
        want = floats(from_expr(p.subs(shift, simultaneous=True), ds, order))
        assert_close(got[r], want)   # Taylor coefficients of p(x0 + d)
    for k in range(order + 1):
        np.testing.assert_allclose(mi.taylor_to_tensor(got, n, k), tensors[k],
                                   rtol=1e-12, atol=1e-12)


@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_joint_positions_read_joint_coefficients_off_derivative_tensors(n, m, order, data):
    zs, ths = _syms("z", n), _syms("th", m)
    allv = zs + ths
    g = to_expr(coefs(data, n + m, order), allv, order)
    want = floats(from_expr(g, allv, order))
    at = {v: 0 for v in allv}
    rows = mi.joint_positions(n, m, order)
    E = mi.multi_indices(n + m, order)
    assert len(rows) == len(E)
    cache: dict = {}
    for i, ((dz, dth, pos, fact), e) in enumerate(zip(rows, E)):
        assert (dz, dth) == (int(e[:n].sum()), int(e[n:].sum()))
        if (dz, dth) not in cache:   # layout: z axes (n,)*dz then theta axes (m,)*dth
            T = np.empty((n,) * dz + (m,) * dth)
            for zi in product(range(n), repeat=dz):
                for ti in product(range(m), repeat=dth):
                    T[zi + ti] = float(sp.diff(g, *[zs[j] for j in zi],
                                               *[ths[j] for j in ti]).subs(at))
            cache[(dz, dth)] = T.reshape(-1)
        assert cache[(dz, dth)][pos] / fact == want[i], e.tolist()


# -- composition --------------------------------------------------------------------------------

@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_compose_substitutes_polynomials(n, m, order, data):
    g = coefs(data, m, order)[None]                                     # (1, c_m)
    inner = np.stack([coefs(data, n, order, constant=False) for _ in range(m)])[None]
    got = mi.compose(g, inner, n, order)
    xs, us = _syms("x", n), _syms("u", m)
    sub = {u: to_expr(inner[0, j], xs, order) for j, u in enumerate(us)}
    want = from_expr(to_expr(g[0], us, order).subs(sub, simultaneous=True), xs, order)
    np.testing.assert_array_equal(got[0], floats(want))


@SERIES
@given(n=NS, m=st.integers(1, 2), order=KS, phi=PHI_NAMES, chi=PHI_NAMES, data=st.data())
def test_compose_taylor_series_of_a_function_with_a_polynomial(n, m, order, phi, chi, data):
    """``f(p(d))`` from the Taylor coefficients of ``f`` and the polynomials ``p`` (no
    constant term) against sympy's series of the composed function."""
    us, ds = _syms("u", m), _syms("d", n)
    w = data.draw(st.lists(st.integers(-2, 2), min_size=m, max_size=m))
    f = PHI[phi](sum(c * u for c, u in zip(w, us))) * PHI[chi](us[0])
    coef = floats(taylor_at_zero(f, us, order))[None]
    inner = np.stack([coefs(data, n, order, constant=False) for _ in range(m)])[None]
    got = mi.compose(coef, inner, n, order)
    ps = {u: to_expr(inner[0, j], ds, order) for j, u in enumerate(us)}
    want = floats(series_truncated(f.subs(ps, simultaneous=True), ds, order))
    assert_close(got[0], want)


@FEW
@given(n=NS, m=NS, order=KS, data=st.data())
def test_compose_split_substitutes_a_feedback(n, m, order, data):
    """``g(x + d, theta_0 + psi(d))`` with ``g`` a polynomial in (z, theta), batched
    over B = 2 and an output axis of 2."""
    ds, zs, ths = _syms("d", n), _syms("z", n), _syms("th", m)
    B, nout = 2, 2
    coef = np.stack([np.stack([coefs(data, n + m, order) for _ in range(nout)])
                     for _ in range(B)])                               # (B, out, c_{n+m})
    psi = np.stack([np.stack([coefs(data, n, order, constant=False) for _ in range(m)])
                    for _ in range(B)])                                # (B, m, c_n)
    got = mi.compose_split(coef, mi.monomials(psi, n, order), n, m, order)
    assert got.shape == (B, nout, mi.n_coefficients(n, order))
    for b in range(B):
        sub = {z: d for z, d in zip(zs, ds)}
        sub.update({th: to_expr(psi[b, j], ds, order) for j, th in enumerate(ths)})
        for o in range(nout):
            g = to_expr(coef[b, o], zs + ths, order)
            want = from_expr(g.subs(sub, simultaneous=True), ds, order)
            np.testing.assert_array_equal(got[b, o], floats(want))


@SERIES
@given(n=NS, m=st.integers(1, 2), order=KS, phi=PHI_NAMES, data=st.data())
def test_compose_split_taylor_series_of_a_function_of_state_and_control(n, m, order, phi,
                                                                          data):
    zs, ths, ds = _syms("z", n), _syms("th", m), _syms("d", n)
    a = data.draw(st.lists(st.integers(-2, 2), min_size=n + m, max_size=n + m))
    f = PHI[phi](sum(c * v for c, v in zip(a, zs + ths))) + zs[0] * ths[-1]
    coef = floats(taylor_at_zero(f, zs + ths, order))[None]
    psi = np.stack([coefs(data, n, order, constant=False) for _ in range(m)])[None]
    got = mi.compose_split(coef, mi.monomials(psi, n, order), n, m, order)
    sub = {z: d for z, d in zip(zs, ds)}
    sub.update({th: to_expr(psi[0, j], ds, order) for j, th in enumerate(ths)})
    want = floats(series_truncated(f.subs(sub, simultaneous=True), ds, order))
    assert_close(got[0], want)


# -- invimbed._core.ordered -------------------------------------------------------------------

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
    flat_v, flat_g = values.reshape(-1, targets.size), got.reshape(-1, n_out)
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
