"""Taylor-mode jets of sympy problems, and the saturations engineers write in from_sympy.

Taylor mode (`invimbed._core.derivatives.taylor_mode`) must give the coefficients of the
symbolic derivatives (to 1e-12, orders 1 to 6, N = 2 and 4, every univariate function it
composes, the theta-gradient and the joint (z, theta) coefficients), in numpy and in the
compiled kernel, without differentiating anything symbolically. ``Max``, ``Min``, ``Abs``,
``Piecewise``, ``Heaviside`` and ``sign`` evaluate and differentiate (almost everywhere)
in both paths and in the generated numba code, checked against finite differences away
from the kinks; functions without a numpy equivalent are refused by name.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

import invimbed

sp = pytest.importorskip("sympy")

from invimbed._core.derivatives.multiindex import multi_indices, n_coefficients  # noqa: E402
from invimbed._core.derivatives.symbolic import SympyProvider  # noqa: E402
from invimbed._core.derivatives.taylor_mode import _numba_available  # noqa: E402

ENGINES = ["numpy"] + (["numba"] if _numba_available() else [])
t = sp.Symbol("t")


def elementary_args():
    """N = 2, M = 2, every univariate function of the tape."""
    x, y, a, b = sp.symbols("x y a b")
    f = [x * sp.sin(y) + a * sp.exp(x / 2) + sp.cos(3 * t) * y,
         sp.log(2 + x ** 2) * sp.tanh(y) + sp.sqrt(1 + y ** 2) * b - sp.tan(x / 3) * a * b]
    R = (sp.atan(x - y) + a ** 2 * sp.cos(x) + y ** 3 / (1 + x ** 2) + sp.sinh(x * y / 2)
         + sp.asin(x / 3) * sp.acos(y / 4) + sp.asinh(a * x) + sp.acosh(2 + y ** 2)
         + sp.atanh(y / 3) + (2 + x) ** sp.Rational(3, 2) + b * sp.cosh(y) + 2 ** (x * a))
    T = sp.cosh(x) / (2 + sp.sin(y)) + sp.exp(-x * y) + x ** 4 / 7
    return (t, [x, y], [a, b], f, R, T)


def chain_args():
    """N = 4, M = 1: two pendulums with the double pendulum's rational coupling."""
    p, q, v, w, u = sp.symbols("p q v w u")
    d = p - q
    f = [v, w, (-3 * sp.sin(p) - sp.sin(d) * (w ** 2 + v ** 2 * sp.cos(d))) / (3 - sp.cos(2 * d))
         + u * sp.sin(2 * t), sp.sin(d) * (2 * v ** 2 + sp.cos(p)) / (2 - sp.cos(d))]
    R = sp.Rational(1, 10) * (p ** 2 + q ** 2) + u ** 2 / 20 + u * sp.exp(v * w / 4)
    T = (1 - sp.cos(p - 1)) + (1 - sp.cos(q)) + (v ** 2 + w ** 2) / 20
    return (t, [p, q, v, w], [u], f, R, T)


@lru_cache(maxsize=None)
def symbolic(args):
    """The symbolic reference (``taylor_mode=False``) of ``args``: one per problem, so that
    the tests of both engines share its sympy derivatives and their generated code."""
    return SympyProvider(*args(), taylor_mode=False)


def points(n, m, B=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.7, 0.7, (B, n)), rng.uniform(-0.7, 0.7, (B, m))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("args,orders", [(elementary_args, range(1, 7)),
                                         (chain_args, range(1, 6))])
def test_taylor_mode_equals_symbolic_derivatives(args, orders, engine):
    sym = symbolic(args)
    tm = SympyProvider(*args(), taylor_mode=True)
    tm._jets.engine = engine
    N, M = sym.n_state, sym.n_theta
    z, th = points(N, M)
    times = np.array([0.3, -0.2, 0.7])                       # each row at its own time
    # the reference at the highest order only: the coefficients are in graded order
    # (`multi_indices`), so those of order <= K are its first n_coefficients(N, K)
    # entries, D^alpha g / alpha! of the same memoised sympy derivatives (one code
    # generation per function instead of one per order)
    top = max(orders)
    cases = [("f", 0), ("R", 0), ("T", 0), ("f", 1), ("R", 1)]
    ref = {c: sym.taylor(c[0], times, z, th, top, c[1]) for c in cases}
    for K in orders:
        for which, dth in cases:
            want = ref[which, dth][..., :n_coefficients(N, K)]
            got = tm.taylor(which, times, z, th, K, dth)
            assert got.shape == want.shape
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * scale,
                                       err_msg=f"{which} order {K} dth {dth}")
    assert tm.codegen_calls == 0 and not tm._diffs       # nothing differentiated by sympy


@pytest.mark.parametrize("engine", ENGINES)
def test_joint_coefficients_equal_the_tensor_route(engine):
    args = chain_args()
    sym = symbolic(chain_args)
    tm = SympyProvider(*args, taylor_mode=True)
    tm._jets.engine = engine
    z, th = points(4, 1, B=2, seed=3)
    for order in (1, 3):
        for which in ("f", "R"):
            want = sym.taylor_joint(which, 0.4, z, th, order)
            got = tm.taylor_joint(which, 0.4, z, th, order)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.skipif(len(ENGINES) < 2, reason="numba not installed")
def test_engines_agree_at_high_order_without_symbolic_work():
    """Order 8 at N = 4: what the sweep's tol asks for, beyond what symbolic expansion
    affords; the numba kernel and the numpy evaluator agree, and no code is generated."""
    a = SympyProvider(*chain_args(), taylor_mode=True)
    b = SympyProvider(*chain_args(), taylor_mode=True)
    b._jets.engine = "numpy"
    z, th = points(4, 1, B=2, seed=5)
    for which, dth in [("f", 0), ("f", 1), ("R", 1)]:
        x, y = a.taylor(which, 0.1, z, th, 8, dth), b.taylor(which, 0.1, z, th, 8, dth)
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-13 * np.abs(y).max())
    assert a.codegen_calls == 0 and b.codegen_calls == 0


def test_automatic_choice_by_order():
    prov = SympyProvider(*chain_args())
    jets = prov._jets
    assert not jets._tapes                              # nothing built before it is asked for
    assert jets.use(8, 1) and not jets.use(1, 0) and not jets.use(3, 2)
    assert SympyProvider(*chain_args(), taylor_mode=False)._jets is None


# -- saturations ----------------------------------------------------------------------------
def bryson_denham(l=1 / 9, **kw):
    x1, x2, u = sp.symbols("x1 x2 u")
    return invimbed.from_sympy(t, [x1, x2], [u], [x2, u],
                               running_loss=u ** 2 / 2 + 100 * sp.Max(0, x1 - l) ** 2,
                               terminal_loss=(x1 ** 2 + (x2 + 1) ** 2) / 2, **kw)


def saturations_args():
    x, y, u = sp.symbols("x y u")
    f = [sp.Min(x, 2 * y) + sp.Abs(y - 0.2) * u,
         sp.Piecewise((x ** 2, x < 0.1), (sp.sin(x), True)) + sp.Heaviside(y) * x * u]
    R = sp.Abs(x) ** 3 + sp.sign(y) * y * u + sp.Max(x, y, 0.3) ** 2
    T = sp.Piecewise((x * y, sp.And(x > 0, y > 0)), (x + y, True)) + sp.Abs(x - y)
    return (t, [x, y], [u], f, R, T)


def fd_jet(g, z, h=1e-4):
    """Value, gradient and Hessian of ``g`` (scalar of z (N,)) by central differences."""
    n = z.size
    grad, hess = np.zeros(n), np.zeros((n, n))
    for i in range(n):
        e = np.eye(n)[i] * h
        grad[i] = (g(z + e) - g(z - e)) / (2 * h)
        for j in range(n):
            f_ = np.eye(n)[j] * h
            hess[i, j] = (g(z + e + f_) - g(z + e - f_) - g(z - e + f_) + g(z - e - f_)) / (4 * h * h)
    return g(z), grad, hess


def as_taylor(v, grad, hess):
    """(value, grad, hess) -> Taylor coefficients of degree <= 2 (graded order)."""
    out = []
    for e in multi_indices(grad.size, 2):
        i = np.flatnonzero(e)
        if e.sum() == 0:
            out.append(v)
        elif e.sum() == 1:
            out.append(grad[i[0]])
        else:
            out.append(hess[i[0], i[-1]] / (2 if len(i) == 1 else 1))
    return np.array(out)


@pytest.mark.parametrize("mode", [False, True])
def test_bryson_denham_penalty_jets_agree_with_finite_differences(mode):
    problem = bryson_denham()
    prov = SympyProvider(*_bd_args(), taylor_mode=mode)
    th = np.array([[0.4]])
    for x1 in (0.05, 0.3):                                   # both sides of the kink at 1/9
        z = np.array([x1, -0.5])
        want = as_taylor(*fd_jet(lambda s: float(problem.running_loss(0.0, s, th[0])), z))
        got = prov.taylor("R", 0.0, z[None], th, 3)[0, :6]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert np.all(prov.taylor("R", 0.0, z[None], th, 4)[0, 6:] == 0.0)  # quadratic


def _bd_args(l=1 / 9):
    x1, x2, u = sp.symbols("x1 x2 u")
    return (t, [x1, x2], [u], [x2, u], u ** 2 / 2 + 100 * sp.Max(0, x1 - l) ** 2,
            (x1 ** 2 + (x2 + 1) ** 2) / 2)


def test_bryson_denham_penalty_solves():
    """The penalised problem goes through the sweep (order 3: derivatives of order 5 of
    Max, whose symbolic forms hold Dirac deltas) and the adjoint method alike. Where the
    constraint is active all along, the problem is smooth near the path and the two agree;
    where the path crosses the kink the jet (an expansion around x, inside the smooth
    branch) still evaluates."""
    problem = bryson_denham()
    kw = dict(control=invimbed.Constant([-2.0]), rtol=1e-10, atol=1e-12)
    x = [0.3, 0.5]                                           # x1 > 1/9 on the whole path
    ref = invimbed.solve_adjoint(problem, x, [-0.3], **kw)
    res = invimbed.solve_imbedding(problem, x, [-0.3], order=3, **kw)
    assert ref.success and res.success, res.message
    for k in ("z", "value", "adjoint", "param_grad"):
        np.testing.assert_allclose(res[k], ref[k], rtol=1e-5, atol=1e-7)
    crossing = invimbed.solve_imbedding(problem, [0.0, 1.0], [-0.3], order=3, **kw)
    assert np.isfinite(crossing.value).all()


@pytest.mark.parametrize("mode", [False, True])
def test_saturations_agree_with_finite_differences(mode):
    prov = SympyProvider(*saturations_args(), taylor_mode=mode)
    th = np.array([0.7])
    for z in (np.array([0.4, 0.35]), np.array([-0.3, 0.5]), np.array([0.05, -0.4])):
        for which, k in [("f", 0), ("f", 1), ("R", None), ("T", None)]:
            def g(s):
                v = prov.derivative(which, 0.0, s[None], th[None])[0]
                return float(v if k is None else v[k])
            want = as_taylor(*fd_jet(g, z))
            got = prov.taylor(which, 0.0, z[None], th[None], 4)[0]
            got = got[:6] if k is None else got[k, :6]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{which}[{k}] at {z}")


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_saturations_in_generated_numba_code():
    """compile='numba' and the per-sample functions of backend='numba' print the
    derivatives of Max, Abs, Piecewise, Heaviside, sign (no DiracDelta left)."""
    args = saturations_args()
    fast = SympyProvider(*args, compile="numba", taylor_mode=False)
    ref = SympyProvider(*args, taylor_mode=False)
    z, th = np.array([[0.4, 0.35], [-0.3, 0.5]]), np.array([[0.7], [0.2]])
    for which in ("f", "R"):
        want = ref.derivative(which, 0.0, z, th, dz=2)
        # the same sympy derivatives (memoised by `_diff`), printed as numba code: what
        # differs between the two providers is the printer only
        fast._diffs.update(ref._diffs)
        np.testing.assert_allclose(fast.derivative(which, 0.0, z, th, dz=2), want,
                                   rtol=1e-13)
    g = fast.sample_function("R", 2, 0)
    np.testing.assert_allclose(g(0.0, z[0], th[0]), ref.derivative("R", 0.0, z, th, dz=2)[0],
                               rtol=1e-13)


def test_functions_without_numpy_code_are_refused_by_name():
    x = sp.Symbol("x")
    with pytest.raises(ValueError, match=r"`running_loss` uses erf"):
        invimbed.from_sympy(t, [x], [], [x], running_loss=sp.erf(x))
    with pytest.raises(ValueError, match=r"`dynamics\[0\]` uses gamma"):
        invimbed.from_sympy(t, [x], [], [sp.gamma(x)])
    with pytest.raises(ValueError, match=r"taylor_mode=True: .*atan2"):
        SympyProvider(t, [x], [], [sp.atan2(x, 2)], taylor_mode=True)
    # chosen automatically, a function Taylor mode does not compose keeps the symbolic path
    prov = SympyProvider(t, [x], [], [sp.atan2(x, 2)])
    assert not prov._jets.use(4, 0)
    want = 2 / (4 + 0.25)                                  # d atan2(x, 2) / dx at x = 0.5
    assert abs(prov.taylor("f", 0.0, [[0.5]], None, 4)[0, 0, 1] - want) < 1e-14
    with pytest.raises(ValueError, match="`taylor_mode` must be None, True or False"):
        SympyProvider(t, [x], [], [x], taylor_mode="yes")


@pytest.mark.skipif(not _numba_available(), reason="numba not installed")
def test_compiled_jet_contraction_equals_the_numpy_route(monkeypatch):
    """The jet closure's high-order truncated contraction (numba from 400 pairs) gives the
    numpy route's numbers, small and sparse-summed tables alike."""
    from invimbed._core.closures import jet
    from invimbed._core.derivatives.multiindex import n_coefficients as nc

    rng = np.random.default_rng(7)
    for n, oa, ob, oo, P, Q in [(4, 5, 6, 6, (2,), ()), (4, 7, 8, 8, (3,), ()),
                                (2, 3, 4, 4, (2,), (1,))]:
        a = rng.normal(size=(2,) + P + (n, nc(n, oa)))
        b = rng.normal(size=(2, n) + Q + (nc(n, ob),))
        monkeypatch.setattr(jet, "_COMPILED_FROM", 10 ** 12)
        want = jet.contract_product(a, b, n, oa, ob, oo)
        monkeypatch.setattr(jet, "_COMPILED_FROM", 0)
        monkeypatch.setattr(jet, "_COMPILE_FROM", 0)    # compiled even where not cached
        got = jet.contract_product(a, b, n, oa, ob, oo)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
