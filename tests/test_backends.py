"""The accelerated backends (numba, cupy) against the numpy sweep.

Every backend must return the numpy backend's numbers, to 1e-12 relative, for the same
problem and the same source of derivatives (finite differences are taken by the same
rule inside the kernels); cupy, whose functions round differently on the GPU, to the
tolerance `fd_rtol` derives from the finite differences it takes (exact derivatives:
1e-12). The backends are parametrised:

* ``numba``: per-sample ``numba.njit`` functions, the jet only (the stencil cases skip;
  `test_unsupported_options_say_so` checks the refusal); skipped without numba;
* ``xp-numpy``: the cupy backend's code run with ``xp = numpy`` (how it is checked on
  machines without a GPU, as in CI);
* ``cupy``: the real thing; skipped without cupy or a CUDA device.

The first numba test compiles the kernels (about 25 s of CPU on a cold cache); later runs
load them from the cache.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import invimbed
from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_imbedding
from invimbed._core.runtime.namespace import array_namespace, is_cupy_array, to_numpy
from invimbed._core.setup.arguments import prepare
from invimbed._core.results.results import sweep_result
from invimbed._core.sweep.imbedding import mark_unchecked
from invimbed._core.integrators import ALL_METHODS
from problems import (lq_closed_form, no_control_f, no_control_T, pendulum_functions,
                      sympy_pendulum, uncompilable_dynamics)

try:
    import numba
    from numba import njit
except ImportError:  # pragma: no cover - CI installs numba for these tests
    numba = None

    def njit(*args, **kwargs):
        return (lambda f: f) if not args or not callable(args[0]) else args[0]


def _has_gpu() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()
BACKENDS = [
    pytest.param("numba", marks=pytest.mark.skipif(numba is None, reason="numba not installed")),
    "xp-numpy",
    pytest.param("cupy", marks=pytest.mark.skipif(not HAS_GPU, reason="no cupy or no GPU")),
]
FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def skip_unless_runs(backend: str, closure: str) -> None:
    """backend='numba' runs the jet only (test_numba_refuses_what_it_does_not_run)."""
    if backend == "numba" and closure != "jet":
        pytest.skip("backend='numba' runs closure='jet' only")

# -- the pendulum of tests/problems.py, one sample at a time (for numba) ----------------------
A_, FORCING, OMEGA, C_, KV, RHO, SIGMA, KT, PHS, VS = 1.0, 0.3, 1.3, 0.4, 0.2, 0.1, 0.15, 1.0, 0.5, -0.2


@njit(cache=True)
def pend_f(t, z, th):
    return np.array([z[1], -A_ * np.sin(z[0]) - th[1] * z[1] + th[0] + FORCING * np.cos(OMEGA * t)])


@njit(cache=True)
def pend_R(t, z, th):
    return (C_ * (1 - np.cos(z[0])) + 0.5 * KV * z[1] ** 2 + 0.5 * RHO * (th[0] ** 2 + th[1] ** 2)
            + SIGMA * z[1] * th[0])


@njit(cache=True)
def pend_T(z):
    return KT * (1 - np.cos(z[0] - PHS)) + 0.25 * (z[1] - VS) ** 4


@njit(cache=True)
def pend_f_z(t, z, th):
    out = np.zeros((2, 2))
    out[0, 1] = 1.0
    out[1, 0] = -A_ * np.cos(z[0])
    out[1, 1] = -th[1]
    return out


@njit(cache=True)
def pend_R_z(t, z, th):
    return np.array([C_ * np.sin(z[0]), KV * z[1] + SIGMA * th[0]])


@njit(cache=True)
def pend_T_z(z):
    return np.array([KT * np.sin(z[0] - PHS), (z[1] - VS) ** 3])


def pendulum_njit(derivatives: bool = False) -> BolzaProblem:
    # without derivatives: finite differences, the rule both backends follow bit for bit
    d = dict(f_z=pend_f_z, R_z=pend_R_z, T_z=pend_T_z) if derivatives else "finite-differences"
    return BolzaProblem(pend_f, pend_R, pend_T, derivatives=d)


def pendulum_vectorized(derivatives: bool = False) -> BolzaProblem:
    pf = pendulum_functions()
    if derivatives:
        return pf.problem()
    return BolzaProblem(pf.f, pf.R, pf.T, vectorized=True, derivatives="finite-differences")


# -- a linear-quadratic problem with its closed form ---------------------------------------
LQ_A = np.array([[-0.5, 0.3], [-0.2, -0.8]])
LQ_B = np.array([[0.0], [1.0]])
LQ_Q = np.array([[1.0, 0.2], [0.2, 0.5]])
LQ_P = np.array([[0.7, 0.1], [0.1, 1.2]])
LQ_RTH = 0.3


@njit(cache=True)
def lq_f(t, z, th):
    out = np.empty(2)
    for i in range(2):
        out[i] = LQ_A[i, 0] * z[0] + LQ_A[i, 1] * z[1] + LQ_B[i, 0] * th[0]
    return out


@njit(cache=True)
def _quad(S, z):
    return z[0] * (S[0, 0] * z[0] + S[0, 1] * z[1]) + z[1] * (S[1, 0] * z[0] + S[1, 1] * z[1])


@njit(cache=True)
def lq_R(t, z, th):
    return 0.5 * _quad(LQ_Q, z) + 0.5 * LQ_RTH * th[0] ** 2


@njit(cache=True)
def lq_T(z):
    return 0.5 * _quad(LQ_P, z)


def lq_closed(x, w, p):
    return lq_closed_form(LQ_A, LQ_B, LQ_Q, [[LQ_RTH]], np.zeros((2, 1)), LQ_P, x, w, p)


def lq_vectorized() -> BolzaProblem:
    # the matrices in the namespace of the arguments: cupy refuses numpy operands
    def f(t, z, th):
        xp = array_namespace(z)
        return z @ xp.asarray(LQ_A.T) + th @ xp.asarray(LQ_B.T)

    def R(t, z, th):
        xp = array_namespace(z)
        return 0.5 * xp.sum(z * (z @ xp.asarray(LQ_Q)), axis=1) + 0.5 * LQ_RTH * th[:, 0] ** 2

    def T(z):
        xp = array_namespace(z)
        return 0.5 * xp.sum(z * (z @ xp.asarray(LQ_P)), axis=1)

    # finite differences: what the array-namespace (cupy) sweep runs on the functions
    return BolzaProblem(f, R, T, vectorized=True, derivatives="finite-differences")


# -- running a backend -------------------------------------------------------------------------
def problem_for(backend: str, kind: str, derivatives: bool = False) -> BolzaProblem:
    if kind == "pendulum":
        return pendulum_njit(derivatives) if backend == "numba" else pendulum_vectorized(derivatives)
    return BolzaProblem(lq_f, lq_R, lq_T) if backend == "numba" else lq_vectorized()


def solve(backend: str, problem: BolzaProblem, x, depths, **kw) -> invimbed.ImbeddingResult:
    if backend == "xp-numpy":
        from invimbed._backends._xp import sweep_xp

        method = kw.get("method", "rk4")
        setup = prepare(problem, x, depths, kw.get("control"), method, 1e-6, 1e-9,
                        kw.get("step"), ALL_METHODS)
        closure = kw.get("closure", "jet")
        est = kw.get("estimate_error", True) and closure == "jet" and method != "disc"
        res = sweep_xp(setup, np, closure=closure, order=kw.get("order", 1), method=method,
                       step=kw.get("step"), difference=kw.get("difference", "central"),
                       delta=kw.get("delta"), estimate_error=est, backend="xp-numpy")
        return sweep_result(mark_unchecked(res, closure, est, method))  # as solve_imbedding
    return solve_imbedding(problem, x, depths, backend=backend, **kw)


EPS = np.finfo(float).eps


def fd_levels(closure: str = "jet", order: int = 1, method: str = "rk4",
              estimate_error: bool = True, **_) -> int:
    """The nested difference levels of a sweep's deepest request when no derivative is
    given: the jet of order K takes z-derivatives of order K + 1 (K + 2 with its error
    estimate) with one theta-derivative more; the stencil first derivatives."""
    if closure != "jet":
        return 1
    return order + 2 + (estimate_error and method != "disc")


def fd_rtol(backend: str, levels: int, closure: str = "jet") -> float:
    """The tolerance of ``backend`` against numpy's run of the same finite differences.

    numba and ``xp-numpy`` evaluate the functions with numpy's arithmetic: 1e-12. cupy
    evaluates them on the GPU, whose sin, cos and sums round a few ulp differently;
    ``levels`` nested central differences with the step ``h = eps^(1 / (2 + levels))``
    (`invimbed.FiniteDifferences`) magnify that to about ``eps / h^levels =
    eps^(2 / (2 + levels))`` relative, and the stencil's quotient over its spacing
    ``Delta`` (`default_spacing` of the inputs) adds ``eps / Delta``. The tolerance is
    100 times that (a few ulp, carried over the depths), and never below 1e-12."""
    if backend != "cupy":
        return 1e-12
    from invimbed._core.closures.stencil import default_spacing

    tol = EPS ** (2.0 / (2 + levels)) if levels else EPS
    if closure == "stencil":
        tol += EPS / float(default_spacing(X).min())
    return max(1e-12, 100 * tol)


def assert_same(res, ref, rtol=1e-12):
    assert res.success == ref.success
    assert res.nfev == ref.nfev
    for k in FIELDS:
        got, want = to_numpy(res[k]), ref[k]
        assert got.shape == want.shape, k
        assert np.array_equal(np.isnan(got), np.isnan(want)), k
        err = np.nanmax(np.abs(got - want) / np.maximum(1.0, np.abs(want)), initial=0.0)
        assert err <= rtol, f"{k}: relative difference {err:.3g} > {rtol}"
    if ref.get("error_estimate") is not None:
        for k, want in ref.error_estimate.items():
            got = to_numpy(res.error_estimate[k])
            assert np.nanmax(np.abs(got - want) / np.maximum(1.0, np.abs(want)),
                             initial=0.0) <= rtol, k
    else:
        assert res.get("error_estimate") is None


X = np.array([[0.4, -0.3], [1.1, 0.6], [-0.8, 0.2]])
DEPTHS = np.array([-1.0, -0.75, -0.5, -0.2, 0.0])
CTRL = Constant([0.2, 0.1])


# -- agreement with the numpy backend ------------------------------------------------------------
CASES = [
    dict(closure="jet", method="rk4", step=0.05),                        # with the error estimate
    dict(closure="jet", method="midpoint", step=0.1, estimate_error=False),
    dict(closure="jet", method="disc"),
    dict(closure="stencil", method="rk4", step=0.05),
    dict(closure="stencil", method="euler", step=0.1, difference="forward"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['closure']}-{c['method']}")
def test_same_numbers_as_numpy_finite_differences(backend, case):
    """Pendulum (t-dependent, non-quadratic T, control in f and R), no derivatives given:
    the kernels difference by the numpy rule."""
    skip_unless_runs(backend, case["closure"])
    problem = problem_for(backend, "pendulum")
    # the fixed-step kernels carry no lower order, so no ratio test: both without it (the
    # estimate alone; by default the backends want it within 1/25 of the rule instead)
    ref = solve_imbedding(problem, X, DEPTHS, control=CTRL, ratio_test=False, **case)
    res = solve(backend, problem, X, DEPTHS, control=CTRL, ratio_test=False, **case)
    # honest success: the jet's estimate exceeds 10% at the deeper depths (status -2);
    # without an estimate, status 1 (reached, not checked)
    assert ref.status == (-2 if ref.error_estimate is not None else 1)
    assert res.status == ref.status and res.success == ref.success
    assert [w.code for w in res.warnings] == [w.code for w in ref.warnings]
    assert_same(res, ref, fd_rtol(backend, fd_levels(**case), case["closure"]))
    assert res.message == ref.message


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("closure", ["jet", "stencil"])
def test_same_numbers_with_user_derivatives(backend, closure):
    """First derivatives given (f_z, R_z, T_z): higher orders are differences of them, in
    both backends; a piecewise-constant control puts breakpoints on the grid."""
    skip_unless_runs(backend, closure)
    problem = problem_for(backend, "pendulum", derivatives=True)
    ctrl = PiecewiseConstant([-1.0, -0.4, 0.0], [[0.2, 0.1], [-0.3, 0.05]])
    kw = dict(control=ctrl, closure=closure, method="rk4", step=0.1)
    depths = DEPTHS[::-1]                   # descending: results follow the given order
    ref = solve_imbedding(problem, X, depths, **kw)
    res = solve(backend, problem, X, depths, **kw)
    assert_same(res, ref)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("closure", ["jet", "stencil"])
def test_linear_quadratic_is_exact(backend, closure):
    """Jet of order 1 and the stencil are exact for LQ problems: the closed form to the
    integrator's accuracy, and the numpy backend to rounding."""
    skip_unless_runs(backend, closure)
    problem = problem_for(backend, "lq")
    w = np.array([0.4])
    kw = dict(control=Constant(w), closure=closure, method="rk4", step=0.02)
    res = solve(backend, problem, X, DEPTHS, **kw)
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    assert_same(res, ref, fd_rtol(backend, fd_levels(**kw), closure))   # differences on cupy
    for i, p in enumerate(DEPTHS):
        exact = lq_closed(X, w, p)
        for k in FIELDS:
            np.testing.assert_allclose(to_numpy(res[k])[i], exact[k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_running_loss_unbatched(backend):
    """R missing (zero, with every derivative), x of shape (N,)."""
    if backend == "numba":
        problem = BolzaProblem(lq_f, terminal_loss=lq_T)
    else:
        problem = BolzaProblem(lq_vectorized().dynamics, terminal_loss=lq_vectorized().terminal_loss,
                               vectorized=True, derivatives="finite-differences")
    kw = dict(control=Constant([0.0]), method="rk4", step=0.1)
    ref = solve_imbedding(problem, X[1], DEPTHS, **kw)
    res = solve(backend, problem, X[1], DEPTHS, **kw)
    assert res.z.shape == ref.z.shape == (DEPTHS.size, 2)
    assert_same(res, ref, fd_rtol(backend, fd_levels(**kw)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("closure", ["jet", "stencil"])
def test_without_any_control(backend, closure):
    skip_unless_runs(backend, closure)
    if backend == "numba":       # tests/problems.py: test_jet_code's, from sympy
        problem = BolzaProblem(no_control_njit_f, terminal_loss=no_control_njit_T)
    else:
        problem = BolzaProblem(lambda t, z, th: -z ** 3 + z[:, ::-1],
                               terminal_loss=pendulum_functions().T, vectorized=True,
                               derivatives="finite-differences")
    kw = dict(method="rk4", step=0.1, closure=closure)
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    res = solve(backend, problem, X, DEPTHS, **kw)
    assert res.param_grad.shape == (DEPTHS.size, 3, 0)
    assert_same(res, ref, fd_rtol(backend, fd_levels(**kw), closure))


no_control_njit_f = njit(cache=True)(no_control_f)
no_control_njit_T = njit(cache=True)(no_control_T)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_values_end_the_sweep_like_numpy(backend):
    """A dynamics that is NaN beyond |z| > 1 at depths below -0.4: the whole batch stops at
    the same stage as the numpy sweep, with the same message; earlier depths are kept."""
    if backend == "numba":
        problem = BolzaProblem(njit(cache=True)(_blowup_f), terminal_loss=pend_T)
    else:
        def f(t, z, th):
            xp = array_namespace(z)
            bad = (t < -0.4) & (xp.abs(z[:, 0]) > 1.0)
            return xp.where(bad[:, None], xp.nan, -z)
        problem = BolzaProblem(f, terminal_loss=pendulum_functions().T, vectorized=True)
    kw = dict(method="rk4", step=0.1, closure="jet")
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    res = solve(backend, problem, X, DEPTHS, **kw)
    assert not ref.success and "Integration stopped" in ref.message
    assert res.message == ref.message
    assert_same(res, ref, fd_rtol(backend, fd_levels(**kw)))   # cupy: the traced f differenced
    assert np.all(np.isfinite(to_numpy(res.z)[-1])) and np.all(np.isnan(to_numpy(res.z)[0]))


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_numba_step_budget_ends_like_numpy():
    """``max_steps`` cuts the grid of backend='numba' where it cuts numpy's: the same
    depths reached, the same message, status and nfev."""
    problem = pendulum_njit()
    kw = dict(control=CTRL, method="rk4", step=0.01, max_steps=30, estimate_error=False)
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    res = solve_imbedding(problem, X, DEPTHS, backend="numba", **kw)
    assert not ref.success and ref.status == -1
    assert res.message == ref.message
    assert_same(res, ref, rtol=1e-14)


def _blowup_f(t, z, th):
    if t < -0.4 and abs(z[0]) > 1.0:
        return np.full(z.shape[0], np.nan)
    return -z


# -- what the accelerated backends do not run -------------------------------------------------
@pytest.mark.parametrize("backend", ["numba", "cupy"])
def test_adaptive_methods_are_refused_with_the_list(backend):
    """numba runs RK45 and RK23 (tests/test_sweep_numba.py), not scipy's other solvers."""
    problem = BolzaProblem(pend_f, pend_R, pend_T)
    method = "DOP853" if backend == "numba" else "RK45"
    with pytest.raises(ValueError, match=r"'euler', 'midpoint', 'rk4', 'disc'.*backend='numpy'"):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, method=method, backend=backend)


@pytest.mark.skipif(numba is None, reason="numba not installed")
@pytest.mark.parametrize("kw, match", [
    (dict(closure="crop"), r"runs closure='jet' of order 1 .*'disc'.*closure='crop'.*"
                           r"backend='numpy'"),
    (dict(closure="stencil"), r"runs closure='jet' of order 1 .*closure='stencil'.*"
                              r"backend='numpy'"),
    (dict(order=2, estimate_error=False), "jet of order 1"),
    (dict(closure="stencil", method="disc"), "closure='jet'"),
])
def test_unsupported_options_say_so(kw, match):
    """What backend='numba' does not run (the stencil, since the measurements of
    docs/performance.md) is a ValueError naming what it runs."""
    problem = pendulum_njit()
    kw = {"method": "rk4", "step": 0.1, **kw}
    if kw["method"] == "disc":
        kw.pop("step")
    with pytest.raises(ValueError, match=match):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, backend="numba", **kw)


@pytest.mark.skipif(numba is None, reason="numba not installed")
def testuncompilable_dynamics_function_names_itself_and_the_fallback():
    from invimbed._backends import BackendCompileError

    problem = BolzaProblem(uncompilable_dynamics, pend_R, pend_T,
                           derivatives="finite-differences")     # not traced: compiled
    with pytest.raises(BackendCompileError) as info:
        solve_imbedding(problem, X, DEPTHS, control=CTRL, method="rk4", step=0.1, backend="numba")
    text = str(info.value)
    assert "`dynamics`" in text and "uncompilable_dynamics" in text
    assert "numba says" in text and "_OPAQUE" in text        # numba's own reason
    assert "backend='numpy'" in text


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_wrong_return_type_is_reported():
    from invimbed._backends import BackendCompileError

    @njit
    def scalar_dynamics(t, z, th):
        return z[0]

    # a wrong shape is named at the first call, on every backend (docs/derivatives.md)
    problem = BolzaProblem(pend_f, pend_R, pend_T, derivatives={"f_z": scalar_dynamics})
    with pytest.raises(ValueError, match=r"derivatives\['f_z'\]. must return shape \(2, 2\)"):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, method="rk4", step=0.1, backend="numba")

    @njit
    def transposed_jacobian(t, z, th):    # the right values and shape, Fortran order
        return pend_f_z(t, z, th).T.copy().T

    problem = BolzaProblem(pend_f, pend_R, pend_T, derivatives={"f_z": transposed_jacobian})
    with pytest.raises(BackendCompileError, match=r"`f_z`.*C-contiguous 2-D float64 array"):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, method="rk4", step=0.1, backend="numba")


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_numba_refuses_vectorized_problems():
    with pytest.raises(ValueError, match="one sample at a time.*vectorized=True"):
        solve_imbedding(pendulum_vectorized(), X, DEPTHS, control=CTRL, method="rk4", step=0.1,
                        backend="numba")


def test_missing_numba_says_how_to_install(monkeypatch):
    from invimbed._backends import _numba

    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(ImportError, match=r"pip install invimbed\[numba\]"):
        _numba.import_numba()


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_cupy_without_gpu_says_what_is_missing():
    problem = pendulum_vectorized()
    with pytest.raises((ImportError, RuntimeError), match=r"cupy"):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, method="rk4", step=0.1, backend="cupy")


def test_xp_backend_refuses_per_sample_functions():
    from invimbed._backends._xp import sweep_xp

    setup = prepare(BolzaProblem(lambda t, z, th: -z), X, DEPTHS, None, "rk4", 1e-6, 1e-9, 0.1,
                    ALL_METHODS)
    with pytest.raises(ValueError, match="vectorized=True.*array_namespace"):
        sweep_xp(setup, np, closure="jet", order=1, method="rk4", step=0.1,
                 difference="central", delta=None, estimate_error=False)


def test_array_namespace_contract():
    assert array_namespace(np.zeros(2)) is np
    assert array_namespace(1.0, None, np.ones(1)) is np
    assert not is_cupy_array(np.zeros(1))
    assert isinstance(to_numpy([1.0, 2.0]), np.ndarray)


@pytest.mark.skipif(not HAS_GPU, reason="no cupy or no GPU")
def test_cupy_inputs_and_outputs():  # pragma: no cover - needs a GPU
    import cupy

    from invimbed._backends._xp import sweep_cupy

    problem = pendulum_vectorized()
    kw = dict(control=CTRL, method="rk4", step=0.05)
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    setup = prepare(problem, X, DEPTHS, CTRL, "rk4", 1e-6, 1e-9, 0.05, ALL_METHODS)
    res = sweep_cupy(setup, closure="jet", order=1, method="rk4", step=0.05,
                     difference="central", delta=None, estimate_error=True, array_type="cupy")
    assert isinstance(res.z, cupy.ndarray)
    rtol = fd_rtol("cupy", fd_levels(**kw))     # the functions differenced on the GPU
    assert_same(res, ref, rtol=rtol)
    res = solve_imbedding(problem, cupy.asarray(X), DEPTHS, backend="cupy", **kw)
    assert isinstance(res.z, cupy.ndarray) and isinstance(res.error_estimate["z"], cupy.ndarray)
    assert_same(res, ref, rtol=rtol)


class _DeviceArray:
    """A stand-in for a cupy array where there is no GPU: recognised as cupy's by its
    type's module, copied back by ``get()``, and, as cupy does, refusing the implicit
    conversion ``np.asarray``."""

    __module__ = "cupy"

    def __init__(self, a):
        self.a = np.array(a)

    def get(self):
        return self.a.copy()

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed.")


def test_device_inputs_give_device_outputs_judged_on_the_host(monkeypatch):
    """Device arrays in, device arrays out: solve_imbedding judges the sweep (error
    estimate, status) on host arrays and moves the fields to the device at the end."""
    import types

    from invimbed._backends import _xp

    fake = types.ModuleType("cupy")
    fake.asarray = _DeviceArray
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_xp, "import_cupy", lambda: np)   # the sweep itself on numpy
    problem = pendulum_vectorized()
    kw = dict(control=CTRL, method="rk4", step=0.05, ratio_test=False)  # cupy carries none
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    for est in (True, False):
        res = solve_imbedding(problem, _DeviceArray(X), DEPTHS, backend="cupy",
                              estimate_error=est, **kw)
        assert all(isinstance(res[k], _DeviceArray) for k in FIELDS)
        assert (res.error_estimate is None) == (not est)
        if est:
            assert all(isinstance(v, _DeviceArray) for v in res.error_estimate.values())
            assert res.status == ref.status and res.message == ref.message
            assert_same(res, ref)
    # by default (ratio_test=True) the bare estimate must be within 1/25 of the rule
    # (`safety_factor`): cupy's verdict is the one of numba's fixed-step sweep
    dflt = solve_imbedding(problem, _DeviceArray(X), DEPTHS, backend="cupy",
                           **{**kw, "ratio_test": True})
    assert ref.converged.sum() > dflt.converged.sum() > 0
    assert not np.any(dflt.converged & ~ref.converged)


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_numba_batch_of_many_runs_in_parallel_and_agrees():
    """A batch larger than the thread count (prange) gives the same rows as solving each
    row alone."""
    rng = np.random.default_rng(3)
    x = rng.normal(scale=0.5, size=(37, 2))
    problem = pendulum_njit(derivatives=True)
    kw = dict(control=CTRL, method="rk4", step=0.1, backend="numba", estimate_error=False)
    res = solve_imbedding(problem, x, DEPTHS, **kw)
    for b in (0, 17, 36):
        one = solve_imbedding(problem, x[b], DEPTHS, **kw)
        for k in FIELDS:
            np.testing.assert_array_equal(res[k][:, b], one[k])
    assert math.isfinite(float(res.value.sum()))


@njit(cache=True)
def coupled_f(t, z, th):
    out = np.empty(4)
    out[0] = z[2]
    out[1] = z[3]
    out[2] = -np.sin(z[0]) - 0.5 * (z[0] - z[1]) - 0.1 * z[2] + th[0]
    out[3] = -np.sin(z[1]) - 0.5 * (z[1] - z[0]) - 0.1 * z[3] + th[1] * np.cos(t)
    return out


@njit(cache=True)
def coupled_R(t, z, th):
    return 0.2 * (2.0 - np.cos(z[0]) - np.cos(z[1])) + 0.05 * (th[0] ** 2 + th[1] ** 2)


@njit(cache=True)
def coupled_T(z):
    return 0.5 * ((z[0] - 1.0) ** 2 + z[1] ** 2 + z[2] ** 2 + z[3] ** 2) + 0.1 * np.sin(z[1]) ** 3


@pytest.mark.skipif(numba is None, reason="numba not installed")
@pytest.mark.parametrize("compiled_rows", [False, True])
@pytest.mark.parametrize("estimate_error", [False, True])
def test_numba_rounds_like_numpy_for_the_same_functions(estimate_error, compiled_rows,
                                                        monkeypatch):
    """Four states, the same per-sample functions in both backends, finite differences by
    the one step rule, the depth gradient by the core's formula (``f`` and ``R`` called
    row by row, or in the compiled loop of `_numba.CompiledValues`): the results agree to
    a few units in the last place (1e-14)."""
    if compiled_rows:
        from invimbed._backends import _numba

        monkeypatch.setattr(_numba, "COMPILED_ROWS", 0)
    closure, difference = "jet", "central"
    problem = BolzaProblem(coupled_f, coupled_R, coupled_T)
    x = np.random.default_rng(5).normal(scale=0.5, size=(12, 4))
    depths = np.linspace(0.0, -1.0, 17)
    kw = dict(control=PiecewiseConstant([-1.0, -0.5, 0.0], [[0.2, -0.1], [0.1, 0.3]]),
              closure=closure, difference=difference, method="rk4", step=1 / 32,
              estimate_error=estimate_error)
    # numba's fixed-step sweep carries no lower order, so no ratio test: both without it
    ref = solve_imbedding(problem, x, depths, ratio_test=False, **kw)
    res = solve_imbedding(problem, x, depths, backend="numba", ratio_test=False, **kw)
    assert_honest(ref)
    assert (res.success, res.status) == (ref.success, ref.status)
    assert_same(res, ref, rtol=1e-14)


@njit(cache=True)
def coupled_f_z(t, z, th):
    out = np.zeros((4, 4))
    out[0, 2] = 1.0
    out[1, 3] = 1.0
    out[2, 0] = -np.cos(z[0]) - 0.5
    out[2, 1] = 0.5
    out[2, 2] = -0.1
    out[3, 0] = 0.5
    out[3, 1] = -np.cos(z[1]) - 0.5
    out[3, 3] = -0.1
    return out


@njit(cache=True)
def coupled_f_theta(t, z, th):
    out = np.zeros((4, 2))
    out[2, 0] = 1.0
    out[3, 1] = np.cos(t)
    return out


@njit(cache=True)
def coupled_R_z(t, z, th):
    out = np.zeros(4)
    out[0] = 0.2 * np.sin(z[0])
    out[1] = 0.2 * np.sin(z[1])
    return out


@njit(cache=True)
def coupled_T_z(z):
    out = z.copy()
    out[0] -= 1.0
    out[1] += 0.3 * np.sin(z[1]) ** 2 * np.cos(z[1])
    return out


def coupled_sympy() -> BolzaProblem:
    """`coupled_f`, `coupled_R`, `coupled_T` written with sympy: exact derivatives."""
    sp = pytest.importorskip("sympy")
    t = sp.Symbol("t")
    z = sp.symbols("z0:4")
    th = sp.symbols("th0:2")
    f = [z[2], z[3], -sp.sin(z[0]) - 0.5 * (z[0] - z[1]) - 0.1 * z[2] + th[0],
         -sp.sin(z[1]) - 0.5 * (z[1] - z[0]) - 0.1 * z[3] + th[1] * sp.cos(t)]
    R = 0.2 * (2 - sp.cos(z[0]) - sp.cos(z[1])) + 0.05 * (th[0] ** 2 + th[1] ** 2)
    T = (sp.Rational(1, 2) * ((z[0] - 1) ** 2 + z[1] ** 2 + z[2] ** 2 + z[3] ** 2)
         + sp.Rational(1, 10) * sp.sin(z[1]) ** 3)
    return BolzaProblem.from_sympy(t, z, th, f, R, T)


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_numba_completes_given_derivatives_by_the_traced_ones():
    """Per-sample @njit functions with some derivatives given (f_z, f_theta, R_z, T_z):
    the rest (up to f_zzztheta for the error estimate) are traced, not differenced in
    the kernel, and the result says so. The numba sweep equals the numpy sweep of the
    same problem to 1e-10, and the same problem written with sympy (every derivative
    exact) to 1e-10, the error estimate included: the error estimate of the old rule
    (the rest by differences of the given ones, in the kernel) was off by more."""
    given = dict(f_z=coupled_f_z, f_theta=coupled_f_theta, R_z=coupled_R_z, T_z=coupled_T_z)
    problem = BolzaProblem(coupled_f, coupled_R, coupled_T, derivatives=given)
    x = np.random.default_rng(6).normal(scale=0.5, size=(6, 4))
    depths = np.linspace(0.0, -1.0, 9)
    kw = dict(control=PiecewiseConstant([-1.0, -0.5, 0.0], [[0.2, -0.1], [0.1, 0.3]]),
              method="rk4", step=1 / 16)
    res = solve_imbedding(problem, x, depths, backend="numba", **kw)
    assert res.derivatives == ("user: R_z, T_z, f_theta, f_z; the rest exact: traced into "
                               "sympy")
    ref = solve_imbedding(problem, x, depths, **kw)
    assert ref.derivatives == res.derivatives
    assert_same(res, ref, rtol=1e-10)
    exact = solve_imbedding(coupled_sympy(), x, depths, **kw)
    assert_same(res, exact, rtol=1e-10)


def assert_honest(res):
    """Success unless the jet's estimate of a field (any of them) exceeds 10% of
    max(1, |field|) somewhere (the estimate alone: a result without the ratio test): then
    status -2 (not converged), the fields still returned, and the `converged` mask says
    where."""
    if res.error_estimate is None:
        assert res.success and res.status == 1, res.message       # reached, not checked
        return
    big = np.zeros(np.shape(res.value), bool)
    for k in res.error_estimate:        # every field, the depth gradient included
        rel = res.error_estimate[k] / np.maximum(1.0, np.abs(res[k]))
        big |= rel.reshape(big.shape + (-1,)).max(-1) > 0.1
    assert np.array_equal(res.converged, ~big)
    assert (res.success, res.status) == ((False, -2) if big.any() else (True, 0)), res.message
    assert all(np.isfinite(res[k]).all() for k in ("z", "value", "adjoint"))


# -- problems built with from_sympy: the symbolic provider's generated code ----------------------


@pytest.mark.skipif(numba is None, reason="numba not installed")
@pytest.mark.parametrize("compile,closure,rtol", [("numba", "jet", 1e-14), (None, "jet", 1e-12)])
def test_numba_runs_from_sympy_problems(compile, closure, rtol):
    """backend='numba' runs a from_sympy problem on the provider's generated per-sample code
    (every derivative exact, the error estimate's f_zzztheta included). With
    compile='numba' the numpy backend runs that very code over the batch: the results agree
    to the last bits. With lambdified numpy code (compile=None) numpy's own sin/cos round
    differently from libm's, which the jet does not magnify."""
    problem = sympy_pendulum(compile)
    ctrl = PiecewiseConstant([-1.0, -0.4, 0.0], [[0.2, 0.1], [-0.3, 0.05]])
    kw = dict(control=ctrl, closure=closure, method="rk4", step=0.05)
    ref = solve_imbedding(problem, X, DEPTHS, ratio_test=False, **kw)   # numba's rk4: none
    res = solve_imbedding(problem, X, DEPTHS, backend="numba", ratio_test=False, **kw)
    assert_honest(ref)
    assert (res.success, res.status) == (ref.success, ref.status)
    assert_same(res, ref, rtol=rtol)
    # and the numbers are those of the hand-written pendulum (exact derivatives) to FD-free accuracy
    exact = solve_imbedding(pendulum_vectorized(derivatives=True), X, DEPTHS, **kw)
    for k in FIELDS:
        np.testing.assert_allclose(res[k], exact[k], rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(numba is None, reason="numba not installed")
def test_sympy_sample_functions_match_the_batched_code():
    """SympyProvider.sample_function (what the numba backend calls) gives, at one sample,
    the derivative tensors of the batched provider, for every key the kernels use."""
    from invimbed._backends._plans import BASE_KEYS

    prov = sympy_pendulum("numba").derivative_provider
    rng = np.random.default_rng(1)
    z, th, t = rng.normal(size=2), rng.normal(size=2), 0.3
    for which, dz, dth in BASE_KEYS:
        g = prov.sample_function(which, dz, dth)
        got = g(z) if which == "T" else g(t, z, th)
        want = prov.derivative(which, t, z[None], None if which == "T" else th[None], dz=dz,
                               dth=dth)[0]
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15,
                                   err_msg=str((which, dz, dth)))
        assert np.shape(got) == want.shape
