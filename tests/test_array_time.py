"""Vectorised functions at per-row times: ``t`` of shape (B,) in one call, checked at the
first call against one call per time; functions that take a scalar ``t`` only run per
distinct time and every result says so (`invimbed._core.runtime.row_times`)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import invimbed

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
TIGHT = dict(rtol=1e-8, atol=1e-10)
CONTROL = invimbed.PiecewiseConstant(knots=np.linspace(-1.0, 0.0, 5),
                                     values=[[0.2, 0.1], [0.5, -0.1], [-0.1, 0.3], [0.3, 0.0]])
DEPTHS = np.linspace(0.0, -1.0, 5)
X = np.array([[0.3, 0.1], [-0.2, 0.4]])
OMEGA = 2.3


def forcing(t):
    """README-style: numpy operations, right for a float and for an array ``t``."""
    return 0.4 * np.cos(OMEGA * t)


def dynamics(t, z, th):
    return np.stack([z[:, 1], -np.sin(z[:, 0]) - th[:, 1] * z[:, 1] + th[:, 0] + forcing(t)],
                    axis=1)


def running_loss(t, z, th):
    return 0.1 * (1 - np.cos(z[:, 0])) * (1 + 0.5 * np.sin(t)) + 0.05 * np.sum(th ** 2, axis=1)


def terminal_loss(z):
    return 0.5 * (z[:, 0] - 1.0) ** 2 + 0.5 * z[:, 1] ** 2


def counted(fn, log):
    """``fn``, recording the shape of each ``t`` it receives (() for a float)."""
    def wrapped(t, z, th):
        log.append(np.shape(t))
        return fn(t, z, th)
    return wrapped


def scalar_only(fn):
    """``fn`` behind ``float(t)``: raises for an array of several times."""
    return lambda t, z, th: fn(float(t), z, th)


def problem(f=dynamics, R=running_loss, **kw):
    # finite differences: every derivative is a call of the user's functions, which is
    # what the time contract is about (traced derivatives would not call them)
    kw.setdefault("derivatives", "finite-differences")
    return invimbed.BolzaProblem(f, R, terminal_loss, vectorized=True, **kw)


@functools.lru_cache(maxsize=None)
def reference():
    """The README-style problem's ensemble (array t), shared by the tests."""
    return invimbed.solve_adjoint(problem(), X, DEPTHS, control=CONTROL, **TIGHT)


def codes(res):
    return [w.code for w in res.warnings]


def assert_equal_fields(a, b, tol=1e-14):
    for k in FIELDS:
        scale = max(1.0, float(np.max(np.abs(b[k]))))
        assert np.max(np.abs(a[k] - b[k])) <= tol * scale, k


def test_array_t_equals_per_time_in_one_call_per_evaluation():
    log = []
    fast = problem(counted(dynamics, log))
    res = invimbed.solve_adjoint(fast, X, DEPTHS, control=CONTROL, **TIGHT)
    slow = problem(scalar_only(dynamics), scalar_only(running_loss))
    ref = invimbed.solve_adjoint(slow, X, DEPTHS, control=CONTROL, **TIGHT)
    assert res.success and ref.success
    assert "scalar_time" not in codes(res)
    assert_equal_fields(res, ref)
    # one call per right-hand-side evaluation: forward f, backward f_z and f_theta (two
    # difference calls), the depth gradients, the first point's checks
    assert len(log) <= 2 * res.nfev + 16
    arrays = [s for s in log if s != ()]
    assert arrays and all(s[0] > 1 for s in arrays)      # (B,) per-row times did arrive
    # and the per-time reference is the independent per-depth solve's
    pd = invimbed.solve_adjoint(fast, X, DEPTHS, control=CONTROL, strategy="per_depth",
                                **TIGHT)
    for k in FIELDS:
        assert np.max(np.abs(res[k] - pd[k])) <= 1e-7 * max(1.0, np.max(np.abs(pd[k]))), k


def test_finite_differences_and_the_sweep_at_per_row_times():
    fast, slow = problem(), problem(scalar_only(dynamics), scalar_only(running_loss))
    rng = np.random.default_rng(3)
    t = rng.uniform(-1.0, 0.0, 7)
    z, th = rng.normal(size=(7, 2)), rng.normal(size=(7, 2))
    for which, dz, dth in (("f", 0, 0), ("f", 1, 0), ("f", 0, 1), ("R", 2, 0), ("R", 1, 1)):
        a = fast.provider(2, 2).derivative(which, t, z, th, dz, dth)
        b = np.stack([fast.provider(2, 2).derivative(which, float(t[i]), z[i:i + 1],
                                                     th[i:i + 1], dz, dth)[0]
                      for i in range(7)])
        c = slow.provider(2, 2).derivative(which, t, z, th, dz, dth)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    # the sweep's depth gradients of every depth at once
    res = invimbed.solve_imbedding(fast, X, DEPTHS[:3], control=CONTROL, order=1,
                                   estimate_error=False)
    ref = invimbed.solve_imbedding(slow, X, DEPTHS[:3], control=CONTROL, order=1,
                                   estimate_error=False)
    assert "scalar_time" not in codes(res) and "scalar_time" in codes(ref)
    assert_equal_fields(res, ref)


@pytest.mark.parametrize("style", ["math.sin", "float", "if"])
def test_scalar_t_function_is_detected_warned_and_correct(style):
    def f(t, z, th):
        if style == "math.sin":
            push = 0.4 * math.cos(OMEGA * t)
        elif style == "float":
            push = forcing(float(t))
        else:
            push = forcing(t) if t <= 0.0 else 0.0
        return np.stack([z[:, 1], -np.sin(z[:, 0]) - th[:, 1] * z[:, 1] + th[:, 0] + push],
                        axis=1)

    pb = problem(f)
    res = invimbed.solve_adjoint(pb, X, DEPTHS, control=CONTROL, **TIGHT)
    ref = reference()
    assert res.success
    assert_equal_fields(res, ref)
    (note,) = [w for w in res.warnings if w.code == "scalar_time"]
    assert "`dynamics` takes a scalar t only" in note.message
    assert "once per distinct time" in note.message
    assert "np.sin(t)" in note.message and "autonomous=True" in note.message
    # never silent: in `warnings`, which the message does not repeat (docs/results-and-status.md)
    assert "`dynamics` takes a scalar t only" not in res.message
    # every later result of the problem says so too, once
    again = invimbed.solve_adjoint(pb, X, DEPTHS[:2], control=CONTROL)
    assert codes(again).count("scalar_time") == 1


def test_wrong_values_for_array_t_are_not_trusted():
    # reads the first row's time for every row: the right shape, the wrong values
    def first_time(t, z, th):
        return dynamics(np.asarray(t).ravel()[0], z, th)

    res = invimbed.solve_adjoint(problem(first_time), X, DEPTHS, control=CONTROL, **TIGHT)
    ref = reference()
    assert_equal_fields(res, ref)
    (note,) = [w for w in res.warnings if w.code == "scalar_time"]
    assert "differ from one call per time" in note.message


def test_t_times_z_on_three_states_is_caught():
    # t (B,) * z (B, N) broadcasts wrongly when B == N (and fails otherwise); N = 3 here,
    # and the check's three rows make it broadcast
    def f(t, z, th):
        return -(1.0 + 0.5 * np.sin(t)) * z + th

    def f_right(t, z, th):
        return -(1.0 + 0.5 * np.sin(np.expand_dims(t, -1))) * z + th

    T = lambda z: 0.5 * np.sum(z ** 2, axis=1)   # noqa: E731
    ctrl = invimbed.Constant([0.1, -0.2, 0.3])
    x = [0.5, -0.3, 0.8]
    res = invimbed.solve_adjoint(invimbed.BolzaProblem(f, terminal_loss=T, vectorized=True,
                                                      derivatives="finite-differences"),
                                 x, DEPTHS, control=ctrl, **TIGHT)
    ok = invimbed.solve_adjoint(invimbed.BolzaProblem(f_right, terminal_loss=T,
                                                      vectorized=True,
                                                      derivatives="finite-differences"),
                                x, DEPTHS, control=ctrl, **TIGHT)
    assert "scalar_time" in codes(res) and "scalar_time" not in codes(ok)
    assert_equal_fields(res, ok)
    # closed form: z(0) = x exp(-(s + 0.5 (cos(p) - 1))) + ... ; the value at the
    # shallowest nonzero depth against a per-depth solve
    pd = invimbed.solve_adjoint(invimbed.BolzaProblem(f_right, terminal_loss=T,
                                                      vectorized=True),
                                x, DEPTHS, control=ctrl, strategy="per_depth", **TIGHT)
    np.testing.assert_allclose(ok.value, pd.value, rtol=1e-8)


def test_a_user_derivative_that_takes_a_scalar_t_only_is_named():
    def f_z(t, z, th):
        B = z.shape[0]
        out = np.zeros((B, 2, 2))
        out[:, 0, 1] = 1.0
        out[:, 1, 0] = -np.cos(z[:, 0])
        out[:, 1, 1] = -th[:, 1]
        return out + 0.0 * math.sin(t)

    pb = problem(derivatives={"f_z": f_z})
    res = invimbed.solve_adjoint(pb, X, DEPTHS, control=CONTROL, **TIGHT)
    ref = reference()
    notes = [w.message for w in res.warnings if w.code == "scalar_time"]
    assert len(notes) == 1 and notes[0].startswith("`derivatives['f_z']` takes a scalar t")
    for k in FIELDS:       # exact f_z against its finite differences
        assert np.max(np.abs(res[k] - ref[k])) <= 1e-7 * max(1.0, np.max(np.abs(ref[k]))), k


def test_autonomous_functions_get_a_float_t_and_no_check():
    seen = []

    def f(t, z, th):
        seen.append(np.ndim(t))
        return np.stack([z[:, 1], -np.sin(z[:, 0]) + th[:, 0]], axis=1)

    R = lambda t, z, th: 0.05 * np.sum(th ** 2, axis=1) + 0.1 * z[:, 0] ** 2   # noqa: E731
    res = invimbed.solve_adjoint(problem(f, R, autonomous=True), X, DEPTHS, control=CONTROL,
                                 **TIGHT)
    unflagged = invimbed.solve_adjoint(problem(f, R), X, DEPTHS, control=CONTROL, **TIGHT)
    assert res.success and "scalar_time" not in codes(res) + codes(unflagged)
    assert_equal_fields(res, unflagged)
    assert set(seen) == {0, 1}          # float t with the flag; (B,) without it
