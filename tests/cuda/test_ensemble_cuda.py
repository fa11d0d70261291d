"""``solve_adjoint(backend="cuda")`` in numba-cuda's simulator against ``backend="numba"``.

The CUDA kernel runs the numba kernel's step arithmetic (`_ensemble_parts`, compiled for
the device) on the same generated derivatives, so in the simulator both agree bit for
bit: every field, the step counts, ``nfev`` and the messages are asserted equal, but the
depth gradient (the kernel evaluates ``f`` and ``R`` by the generated code, numba by the
vectorised functions: 1e-12). A
closed form checks both against an independent reference (a wrong sign in the generated
derivatives fails it). Sizes are small: the simulator runs each thread as Python.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
pytest.importorskip("sympy")

import invimbed  # noqa: E402
from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_adjoint  # noqa: E402
from problems import sympy_pendulum  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "nsteps")
X = np.array([[0.4, -0.3], [1.1, 0.6]])
DEPTHS = np.array([-1.0, -0.3, 0.0])
KNOTS_CTRL = PiecewiseConstant([-1.0, -0.55, -0.15, 0.0],   # knots between the depths
                               [[0.2, 0.1], [-0.3, 0.05], [0.4, 0.2]])


def assert_identical(res, ref):
    assert res.success == ref.success
    assert res.message == ref.message
    assert res.nfev == ref.nfev
    for k in FIELDS:
        np.testing.assert_array_equal(np.asarray(res[k]), np.asarray(ref[k]), err_msg=k)
    # dJ/dp: the kernel's on the generated code, numba's on the vectorised functions
    np.testing.assert_array_equal(np.isnan(res.depth_grad), np.isnan(ref.depth_grad))
    np.testing.assert_allclose(res.depth_grad, ref.depth_grad, rtol=1e-12, atol=0)
    return float(np.nanmax(np.abs(res.depth_grad - ref.depth_grad)
                           / np.abs(ref.depth_grad), initial=0.0))


@pytest.fixture(scope="module")
def pendulum():
    return sympy_pendulum()


@pytest.mark.parametrize("method", ["RK45", "RK23"])
def test_breakpoints_of_a_piecewise_control_bit_for_bit(pendulum, method):
    kw = dict(control=KNOTS_CTRL, method=method, rtol=1e-6, atol=1e-8)
    ref = solve_adjoint(pendulum, X, DEPTHS, backend="numba", **kw)
    res = solve_adjoint(pendulum, X, DEPTHS, backend="cuda", **kw)
    assert res.success, res.message
    assert res.param_grad.shape == (3, 2, 6)
    assert_identical(res, ref)
    # the pieces before a depth do not act on it: exact zeros
    assert np.all(res.param_grad[0] != 0) and np.all(res.param_grad[1, :, :2] == 0)
    # the simulated kernel ran the per-sample functions numba compiled for the reference,
    # not each request's `point` compiled once more for the CPU
    from invimbed._backends._cuda_ensemble_kernel import KEYS

    prov = pendulum.derivative_provider
    for key in KEYS:
        point = prov.sample_function(*key).py_func.__globals__.get("point")
        assert point is None or not point.signatures, key


def test_a_row_that_outgrows_its_dense_buffer_is_rerun(pendulum, monkeypatch):
    # 4 accepted steps fit; the deep row takes many more, its neighbour 2: it is run
    # again, alone, with 16 (the module docstring of ensemble_cuda)
    from numba import cuda

    from invimbed._backends import ensemble_cuda

    monkeypatch.setattr(ensemble_cuda, "DENSE_STEPS", 4)
    buffers = []
    alloc = cuda.device_array
    monkeypatch.setattr(cuda, "device_array", lambda shape, *a: buffers.append(shape) or
                        alloc(shape, *a))
    depths = np.array([-1.0, -0.02])
    kw = dict(control=Constant([0.2, 0.1]), rtol=1e-8, atol=1e-10)
    ref = solve_adjoint(pendulum, X[:1], depths, backend="numba", **kw)
    res = solve_adjoint(pendulum, X[:1], depths, backend="cuda", **kw)
    assert res.success, res.message
    assert res.nsteps[0, 0] > 6 * res.nsteps[1, 0]      # many more steps than its neighbour
    dense = [(b[0], b[2]) for b in buffers if len(b) == 3]
    assert dense == [(4, 2), (16, 1)]      # (steps, rows) of each launch's dense output
    assert_identical(res, ref)


def linear_problem(a=0.7):
    import sympy as sp

    t, z, u = sp.Symbol("t"), sp.Symbol("z"), sp.Symbol("u")
    return invimbed.from_sympy(t, [z], [u], [a * z + u], 0.25 * u ** 2, z ** 2 / 2)


def test_against_the_closed_form():
    # dz/dt = a z + u, R = u^2 / 4, T = z^2 / 2: z(0) = x e + u (e - 1) / a with
    # e = exp(-a p); dJ/dx = z(0) e; dJ/du = z(0) (e - 1) / a - p / 2; dJ/dp = -(dJ/dx .
    # f + R)
    a, u = 0.7, 0.3
    x = np.array([[0.5], [-1.2]])
    p = np.array([-1.0, -0.4])
    res = solve_adjoint(linear_problem(a), x, p, control=Constant([u]), backend="cuda",
                        rtol=1e-10, atol=1e-12)
    assert res.success, res.message
    e = np.exp(-a * p)[:, None]
    zq = x[:, 0][None, :] * e + u * (e - 1) / a
    np.testing.assert_allclose(res.z[..., 0], zq, rtol=1e-8)
    np.testing.assert_allclose(res.value, 0.5 * zq ** 2 + 0.25 * u ** 2 * (-p)[:, None],
                               rtol=1e-8)
    np.testing.assert_allclose(res.adjoint[..., 0], zq * e, rtol=1e-8)
    np.testing.assert_allclose(res.param_grad[..., 0], zq * (e - 1) / a - 0.5 * u * p[:, None],
                               rtol=1e-8)
    f = a * x[:, 0][None, :] + u
    np.testing.assert_allclose(res.depth_grad, -(zq * e * f + 0.25 * u ** 2), rtol=1e-8)


# -- failures -------------------------------------------------------------------------------
def nan_above_two(t, z, th):
    return z + 0.0 * np.sqrt(2.0 - z)      # not finite for z > 2: x e^(q - p) > 2 fails


def half_square(z):
    return 0.5 * z[0] ** 2


def half_square_running(t, z, th):
    return 0.5 * z[0] ** 2


def test_a_failing_row_among_good_rows_bit_for_bit():
    # traced (the default): the kernel runs the trace's generated code
    problem = BolzaProblem(nan_above_two, half_square_running, half_square)
    x = np.array([[0.5], [1.0]])
    depths = np.array([0.0, -1.0])
    kw = dict(rtol=1e-8, atol=1e-10)
    ref = solve_adjoint(problem, x, depths, backend="numba", **kw)
    res = solve_adjoint(problem, x, depths, backend="cuda", **kw)
    assert not res.success and res.status == -1
    expected = np.array([[False, False], [False, True]])      # only 1.0 e^1 > 2
    np.testing.assert_array_equal(np.isnan(res.value), expected)
    assert "forward solve failed for depth p = -1 and input x[1]" in res.message
    assert_identical(res, ref)


def stiff_f(t, z, th):
    return -1e6 * z


def test_max_steps_ends_a_long_row_and_not_its_neighbour():
    problem = BolzaProblem(stiff_f, terminal_loss=half_square)
    kw = dict(max_steps=40)
    ref = solve_adjoint(problem, [1.0], [-1.0, -1e-6], backend="numba", **kw)
    res = solve_adjoint(problem, [1.0], [-1.0, -1e-6], backend="cuda", **kw)
    assert not res.success and "max_steps = 40" in res.message
    assert np.isnan(res.value[0]) and np.isfinite(res.value[1])
    assert res.nsteps[0] == 40
    assert_identical(res, ref)


# -- what the backend refuses -----------------------------------------------------------------
def test_python_callables_are_refused_naming_from_sympy():
    problem = BolzaProblem(stiff_f, terminal_loss=half_square, derivatives="finite-differences")
    with pytest.raises(ValueError, match=r"backend='cuda'.*from_sympy.*backend='numba'"):
        solve_adjoint(problem, [1.0], [-0.5], backend="cuda")


def test_strategy_per_depth_is_refused_naming_the_backend(pendulum):
    with pytest.raises(ValueError, match=r"`backend='cuda'` runs the ensemble only"):
        solve_adjoint(pendulum, X, [-0.5], control=Constant([0.2, 0.1]), backend="cuda",
                      strategy="per_depth")


def test_missing_numba_cuda_names_the_extra(monkeypatch):
    import sys

    from invimbed._backends._cuda_device import import_cuda

    monkeypatch.setitem(sys.modules, "numba.cuda", None)
    with pytest.raises(ImportError, match=r"invimbed\[cuda\]"):
        import_cuda()


def test_no_gpu_is_a_clear_error(monkeypatch):
    from numba import cuda

    from invimbed._backends import _cuda_device

    monkeypatch.setattr(_cuda_device, "simulated", lambda: False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"needs an NVIDIA GPU.*backend='numba'"):
        _cuda_device.check_device()
