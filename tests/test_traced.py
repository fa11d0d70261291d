"""Exact derivatives traced from a problem's own functions (docs/derivatives.md).

The reference is sympy: the same problem written with `invimbed.from_sympy`, whose
provider differentiates the expressions the user wrote by hand. Traced derivatives of
orders up to 3 must equal its derivatives to 1e-12 at random points (hypothesis), for
vectorised numpy functions and for per-sample ``numba.njit`` functions. A function that
branches on values falls back to finite differences and says so; a trace that disagrees
with its function is refused; solves on the traced derivatives agree with solves on
finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import invimbed
from invimbed import BolzaProblem, Constant, solve_adjoint, solve_imbedding

sp = pytest.importorskip("sympy")

K, C, A, RHO = 0.5, 0.1, 0.2, 0.05
ZT = np.array([1.0, 1.0, 0.0, 0.0])


# -- one problem, written four ways ---------------------------------------------------------
def f_vec(t, z, th):
    p1, p2, w1, w2 = z.T
    return np.stack([w1, w2,
                     -np.sin(p1) - K * (p1 - p2) - C * w1 + th[:, 0] * np.cos(t),
                     -np.sin(p2) - K * (p2 - p1) - C * w2 + th[:, 1] * np.exp(0.3 * t)],
                    axis=1)


def R_vec(t, z, th):
    return A * (2.0 - np.cos(z[:, 0]) - np.cos(z[:, 1])) + 0.5 * RHO * np.sum(th ** 2, axis=1) \
        + 0.1 * t * np.tanh(z[:, 2])


def T_vec(z):
    return 0.5 * np.sum((z - ZT) ** 2, axis=1) + np.log1p(z[:, 3] ** 2)


def T_z_vec(z):
    out = z - ZT
    out[:, 3] += 2 * z[:, 3] / (1 + z[:, 3] ** 2)
    return out


def f_one(t, z, th):               # per sample, the numba way: fill an empty array
    out = np.empty(4)
    out[0] = z[2]
    out[1] = z[3]
    out[2] = -np.sin(z[0]) - K * (z[0] - z[1]) - C * z[2] + th[0] * math.cos(t)
    out[3] = -np.sin(z[1]) - K * (z[1] - z[0]) - C * z[3] + th[1] * np.exp(0.3 * t)
    return out


def R_one(t, z, th):
    return A * (2.0 - math.cos(z[0]) - np.cos(z[1])) + 0.5 * RHO * (th[0] ** 2 + th[1] ** 2) \
        + 0.1 * t * np.tanh(z[2])


def T_one(z):
    d = z - ZT
    return 0.5 * np.sum(d * d) + np.log1p(z[3] ** 2)


def sympy_problem() -> BolzaProblem:
    t = sp.Symbol("t")
    z = sp.symbols("p1 p2 w1 w2")
    u = sp.symbols("u1 u2")
    p1, p2, w1, w2 = z
    f = [w1, w2, -sp.sin(p1) - K * (p1 - p2) - C * w1 + u[0] * sp.cos(t),
         -sp.sin(p2) - K * (p2 - p1) - C * w2 + u[1] * sp.exp(0.3 * t)]
    R = A * (2 - sp.cos(p1) - sp.cos(p2)) + RHO / 2 * (u[0] ** 2 + u[1] ** 2) \
        + 0.1 * t * sp.tanh(w1)
    T = sum((zi - float(g)) ** 2 for zi, g in zip(z, ZT)) / 2 + sp.log(1 + w2 ** 2)
    return invimbed.from_sympy(t, z, u, f, R, T)


def njit_or_plain(fn):
    numba = pytest.importorskip("numba")
    return numba.njit(cache=False)(fn)


WAYS = {
    "vectorised": lambda: BolzaProblem(f_vec, R_vec, T_vec, vectorized=True),
    "per-sample": lambda: BolzaProblem(f_one, R_one, T_one),
}
REQUESTS = [("f", 0, 0), ("f", 1, 0), ("f", 2, 0), ("f", 3, 0), ("f", 0, 1), ("f", 1, 1),
            ("f", 2, 1), ("R", 0, 0), ("R", 1, 0), ("R", 2, 0), ("R", 3, 0), ("R", 0, 1),
            ("R", 1, 1), ("R", 2, 1), ("T", 1, 0), ("T", 2, 0), ("T", 3, 0)]
REF = sympy_problem().provider(4, 2)

points = st.lists(st.floats(-2.0, 2.0), min_size=7, max_size=7)


def assert_equal_derivatives(prov, values):
    v = np.asarray(values)
    t, z, th = v[0], v[1:5][None, :], v[5:7][None, :]
    for which, dz, dth in REQUESTS:
        got = prov.derivative(which, t, z, th, dz, dth)
        want = REF.derivative(which, t, z, th, dz, dth)
        scale = max(1.0, float(np.max(np.abs(want))))
        assert np.max(np.abs(got - want)) <= 1e-12 * scale, (which, dz, dth)


@pytest.fixture(scope="module", params=["vectorised", "per-sample", "njit"])
def traced_provider(request):
    if request.param == "njit":    # traced through py_func: nothing is compiled
        prob = BolzaProblem(njit_or_plain(f_one), njit_or_plain(R_one), njit_or_plain(T_one))
    else:
        prob = WAYS[request.param]()
    prov = prob.provider(4, 2)
    assert prov.traced and prob.derivative_source.startswith("exact")
    return prov


@settings(max_examples=15)
@given(values=points)
def test_traced_derivatives_equal_sympys(traced_provider, values):
    assert_equal_derivatives(traced_provider, values)


def test_njit_functions_trace_through_py_func_and_helpers():
    numba = pytest.importorskip("numba")

    @numba.njit
    def spring(a, b):
        return -K * (a - b)

    @numba.njit
    def f(t, z, th):
        out = np.zeros(2)
        out[0] = z[1]
        out[1] = spring(z[0], 0.0) + th[0]
        return out

    prob = BolzaProblem(f)
    prov = prob.provider(2, 1)
    assert prov.traced
    assert sp.expand(prov.expressions["f"][1] - (-K * prov.z[0] + prov.theta[0])) == 0


def test_branch_on_a_value_falls_back_to_finite_differences_and_says_so():
    def f(t, z, th):
        return np.array([z[1], -z[0] if z[0] > 0 else -2.0 * z[0]])

    prob = BolzaProblem(f, terminal_loss=lambda z: 0.5 * z[0] ** 2)
    res = solve_adjoint(prob, [0.3, 0.1], [-0.5, 0.0])
    assert res.success
    assert res.derivatives.startswith("finite differences (tracing failed")
    assert "`dynamics`" in res.derivatives and "compares" in res.derivatives
    assert isinstance(prob.provider(2, 0), invimbed.FiniteDifferences)
    with pytest.raises(ValueError, match="derivatives='trace'.*compares"):
        BolzaProblem(f, derivatives="trace").provider(2, 0)


def test_np_maximum_and_float_conversion_fall_back():
    relu = BolzaProblem(lambda t, z, th: np.maximum(z, 0.0) - z, vectorized=True)
    assert "compares" in relu.provider(2, 0).derivative_source
    cast = BolzaProblem(lambda t, z, th: np.array([float(z[0]), 0.0]))
    assert "float" in cast.provider(2, 0).derivative_source


def test_a_trace_that_disagrees_with_its_function_is_refused():
    def f(t, z, th):      # another formula on object arrays: tracing cannot see it
        if z.dtype == object:
            return np.array([z[1], -np.sin(z[0])])
        return np.array([z[1], -np.sin(z[0]) + 1e-9 * z[0] ** 3])

    prob = BolzaProblem(f)
    src = prob.provider(2, 0).derivative_source
    assert src.startswith("finite differences") and "disagrees" in src
    with pytest.raises(ValueError, match="disagrees"):
        BolzaProblem(f, derivatives="trace").provider(2, 0)


def test_a_closure_whose_array_changes_is_traced_again():
    W = np.array([[0.0, 1.0], [-1.0, 0.0]])
    prob = BolzaProblem(lambda t, z, th: W @ z, terminal_loss=lambda z: z @ z)
    first = prob.provider(2, 0)
    assert first.traced and prob.provider(2, 0) is first
    W[1, 0] = -3.0
    again = prob.provider(2, 0)
    assert again is not first and again.traced
    z = np.array([[0.3, 0.2]])
    np.testing.assert_allclose(again.derivative("f", 0.0, z, None, 1)[0], W, rtol=0, atol=0)


def test_results_say_which_derivatives_were_used():
    x, d, ctrl = [0.3, 0.1, 0.2, -0.1], [-0.6, -0.2, 0.0], Constant([0.2, -0.1])
    traced = WAYS["vectorised"]()
    assert repr(traced).endswith("derivatives='auto')")
    res = solve_imbedding(traced, x, d, control=ctrl, order=2)
    assert res.derivatives == "exact: the problem's functions traced into sympy"
    assert repr(traced).endswith("derivatives='traced')")
    assert solve_adjoint(sympy_problem(), x, d, control=ctrl).derivatives == \
        "exact: the user's symbolic (sympy) provider"
    fd = BolzaProblem(f_vec, R_vec, T_vec, vectorized=True, derivatives="finite-differences")
    assert solve_adjoint(fd, x, d, control=ctrl).derivatives == \
        "finite differences (derivatives='finite-differences')"
    user = BolzaProblem(f_vec, R_vec, T_vec, vectorized=True, derivatives={"T_z": T_z_vec})
    assert user.derivative_source == "user: T_z; the rest traced at the first solve"
    res = solve_adjoint(user, x, d, control=ctrl)
    assert res.derivatives == "user: T_z; the rest exact: traced into sympy"
    assert repr(user).endswith("derivatives='user: T_z')")
    # where tracing fails, the rest are finite differences of the user's, saying why
    branchy = BolzaProblem(lambda t, z, th: np.maximum(z, 0.0) - z, vectorized=True,
                           derivatives={"f_z": lambda t, z, th: np.zeros((len(z), 2, 2))})
    src = branchy.provider(2, 0).derivative_source
    assert src.startswith("user: f_z; the rest by finite differences (tracing failed")
    assert "compares" in src
    assert isinstance(branchy.provider(2, 0), invimbed.FiniteDifferences)


def test_given_derivatives_are_completed_by_the_traced_ones():
    """A problem that gives some derivatives gets the others traced, exactly: the given
    ones are the user's callables (called, not replaced), the rest equal the symbolic
    reference to 1e-12 where finite differences are off by more than 1e-8."""
    calls = []

    def T_z_counted(z):
        calls.append(len(z))
        return T_z_vec(z)

    prob = BolzaProblem(f_vec, R_vec, T_vec, vectorized=True, derivatives={"T_z": T_z_counted})
    fd = BolzaProblem(f_vec, R_vec, T_vec, vectorized=True, derivatives="finite-differences")
    prov, ref, diffs = prob.provider(4, 2), sympy_problem().provider(4, 2), fd.provider(4, 2)
    assert not isinstance(prov, invimbed.FiniteDifferences)
    rng = np.random.default_rng(3)
    z, th = rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    for which, dz, dth in [("f", 3, 0), ("f", 2, 1), ("R", 3, 0), ("R", 1, 1), ("T", 3, 0),
                           ("T", 1, 0), ("f", 0, 0)]:
        got = prov.derivative(which, 0.4, z, th, dz, dth)
        want = ref.derivative(which, 0.4, z, th, dz, dth)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))
        if dz + dth == 3:   # what the old rule gave: differences, off by far more
            assert np.max(np.abs(diffs.derivative(which, 0.4, z, th, dz, dth) - want)) > 1e-8
    assert calls, "the given T_z was not called"


@pytest.mark.parametrize("solver", ["adjoint", "imbedding"])
def test_solves_agree_with_finite_differences(solver):
    x = np.array([[0.3, 0.1, 0.2, -0.1], [-0.4, 0.5, 0.0, 0.3]])
    kw = dict(control=Constant([0.2, -0.1]), rtol=1e-9, atol=1e-11)
    if solver == "imbedding":
        kw.update(order=1, estimate_error=False)
    run = solve_adjoint if solver == "adjoint" else solve_imbedding
    d = [-0.5, -0.25, 0.0]
    exact = run(WAYS["per-sample"](), x, d, **kw)
    fd = run(BolzaProblem(f_one, R_one, T_one, derivatives="finite-differences"), x, d, **kw)
    assert exact.success and fd.success and exact.derivatives.startswith("exact")
    for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
        scale = max(1.0, float(np.max(np.abs(fd[k]))))
        assert np.max(np.abs(exact[k] - fd[k])) <= 1e-7 * scale, k


def test_numba_ensemble_runs_the_generated_code_of_njit_functions():
    pytest.importorskip("numba")
    prob = BolzaProblem(njit_or_plain(f_one), njit_or_plain(R_one), njit_or_plain(T_one))
    x, d = [0.3, 0.1, 0.2, -0.1], np.linspace(0.0, -1.0, 5)
    kw = dict(control=Constant([0.2, -0.1]), rtol=1e-8, atol=1e-10)
    nb = solve_adjoint(prob, x, d, backend="numba", **kw)
    ref = solve_adjoint(sympy_problem(), x, d, **kw)
    assert nb.success and nb.derivatives.startswith("exact")
    for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
        np.testing.assert_allclose(nb[k], ref[k], rtol=1e-9, atol=1e-12, err_msg=k)


def test_derivatives_argument_is_checked():
    with pytest.raises(ValueError, match="`derivatives` must be one of 'auto', 'trace'"):
        BolzaProblem(f_one, derivatives="exact")
    with pytest.raises(TypeError, match="`derivatives` must be a dict"):
        BolzaProblem(f_one, derivatives=3)


def test_helpers_defined_inside_the_function_see_the_traced_numpy():
    def f(t, z, th):
        fill = lambda a: np.zeros(2) + a   # noqa: E731 - its own code reads np
        out = fill(0.0)
        out[0] = z[1]
        out[1] = -np.sin(z[0])
        return out

    assert BolzaProblem(f).provider(2, 0).traced


def test_the_device_backend_gets_the_functions_with_finite_differences():
    """backend='cupy' runs the problem's functions on device arrays: a traced problem
    hands it the finite differences the problem would build without tracing."""
    traced = WAYS["vectorised"]().provider(4, 2)
    fd = BolzaProblem(f_vec, R_vec, T_vec, vectorized=True,
                      derivatives="finite-differences").provider(4, 2)
    got = traced.finite_differences()
    assert isinstance(got, invimbed.FiniteDifferences) and got.row_times == fd.row_times
    z, th = np.array([[0.3, 0.1, 0.2, -0.1]]), np.array([[0.2, -0.1]])
    for which, dz, dth in [("f", 1, 0), ("R", 2, 0), ("f", 1, 1), ("T", 1, 0)]:
        np.testing.assert_array_equal(got.derivative(which, 0.3, z, th, dz, dth),
                                      fd.derivative(which, 0.3, z, th, dz, dth))


# functions whose domain sympy's simplification drops while tracing (0.0 * sqrt(2 - z) is
# 0, sqrt(z) ** 2 is z): the trace must be NaN where the function is
DOMAIN_DROPPED = {
    "zero times sqrt": (lambda t, z, th: z + 0.0 * np.sqrt(2.0 - z), [1.5, 2.5]),
    "zero times log": (lambda t, z, th: z * th + 0.0 * np.log(z), [0.5, -0.5]),
    "zero times arcsin": (lambda t, z, th: np.cos(z) + 0.0 * np.arcsin(z), [0.5, 1.5]),
    "square of a root": (lambda t, z, th: np.sqrt(z) ** 2 * th, [0.5, -0.5]),
    "a root cancelled": (lambda t, z, th: z ** 0.5 - z ** 0.5 + th, [0.5, -0.5]),
    "log1p times zero": (lambda t, z, th: z - 0.0 * np.log1p(z), [0.5, -1.5]),
}


@pytest.mark.parametrize("name", sorted(DOMAIN_DROPPED))
def test_a_trace_is_nan_where_the_function_is(name):
    f, (inside, outside) = DOMAIN_DROPPED[name]
    prov = BolzaProblem(f, vectorized=True, derivatives="trace").provider(1, 1)
    th = np.array([[0.7]])
    for z0, finite in ((inside, True), (outside, False)):
        z = np.array([[z0]])
        with np.errstate(all="ignore"):
            user = f(0.1, z, th)
        assert np.all(np.isfinite(user)) == finite          # the premise
        got = prov.derivative("f", 0.1, z, th)
        if finite:
            np.testing.assert_allclose(got, user, rtol=1e-14, atol=0)
        else:
            assert np.all(np.isnan(got)), (name, got)
            # and the derivatives in what the output depends on, symbolic and Taylor mode
            if "cancelled" not in name:
                assert np.all(np.isnan(prov.derivative("f", 0.1, z, th, 1)))
            assert np.all(np.isnan(prov.taylor("f", 0.1, z, th, 6)[..., 0]))


def test_an_integer_valued_float_power_has_no_domain():
    # z ** 2.0 is defined for negative z: dropping it must not make the trace NaN there
    prov = BolzaProblem(lambda t, z, th: z * th + 0.0 * z ** 2.0, vectorized=True,
                        derivatives="trace").provider(1, 1)
    got = prov.derivative("f", 0.1, np.array([[-1.5]]), np.array([[0.7]]))
    np.testing.assert_array_equal(got, [[-1.5 * 0.7]])


def test_a_trace_keeps_no_guard_where_the_function_stays():
    # sqrt(2 - z) is in the expression: it is NaN by itself, nothing is added
    prov = BolzaProblem(lambda t, z, th: np.sqrt(2.0 - z) * th, vectorized=True,
                        derivatives="trace").provider(1, 1)
    assert not prov.expressions["f"][0].has(__import__("sympy").Piecewise)
