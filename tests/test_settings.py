"""The settings objects (`invimbed.Accuracy`, `invimbed.Closure`, `invimbed.Integrator`):
checked once when made, accepted by every solver beside the keywords they stand for,
with the same results, and refused where a keyword sets a field differently."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import invimbed
from invimbed import Accuracy, Closure, Integrator

#: dz/dt = -z + sin(z) theta: nonlinear (the jet's order matters), exact derivatives
#: by finite differences are not needed at order 1 with ``estimate_error``.
PROBLEM = invimbed.BolzaProblem(
    lambda t, z, th: -0.5 * z + 0.3 * np.sin(z) + th,
    running_loss=lambda t, z, th: 0.5 * (z @ z + th @ th),
    terminal_loss=lambda z: 0.5 * z @ z)
CONTROL = invimbed.Constant([0.2])
DEPTHS = [-1.0, -0.5]
#: dz/dt = u, R = (z^2 + u^2)/2 on [p, 1]: the LQ problem of solve_optimal's docstring.
LQ = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
OCP = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (u[:, 0]**2 + z[:, 0]**2),
                            q=1.0, vectorized=True, autonomous=True)

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def _same_result(a, b, keys=FIELDS):
    for k in keys:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)
    assert (a.success, int(a.status), a.message) == (b.success, int(b.status), b.message)


# -- the objects, checked when made ------------------------------------------------------
@pytest.mark.parametrize("cls, kw, error, match", [
    (Accuracy, dict(tol=-1.0), ValueError, r"`tol` must be a positive float .* its rtol is"),
    (Accuracy, dict(tol=(0, 0)), ValueError, r"`tol` must not be \(0, 0\)"),
    (Accuracy, dict(tol="1e-6"), ValueError, r"`tol` must be a positive float"),
    (Accuracy, dict(rtol=0.0), ValueError, r"`rtol` must be a positive finite number, but "
                                           r"got 0.0"),
    (Accuracy, dict(atol="1e-9"), TypeError, r"`atol` must be a positive number, but got "
                                             r"'1e-9' \(type str\)"),
    (Accuracy, dict(max_order=0), ValueError, r"`max_order` must be an integer >= 1, but got 0"),
    (Accuracy, dict(ratio_test="no"), TypeError, r"`ratio_test` must be True or False"),
    (Accuracy, dict(fallback="exact"), ValueError, r"`fallback` must be one of 'adjoint', "
                                                   r"but got 'exact'"),
    (Closure, dict(kind="taylor"), ValueError, r"`closure` must be one of 'jet', 'stencil', "
                                               r"'crop', but got 'taylor'"),
    (Closure, dict(order=1.5), TypeError, r"`order` must be an integer"),
    (Closure, dict(kind="stencil", order=2), ValueError, r"`order` applies to closure='jet' "
                                                         r"only"),
    (Closure, dict(delta=0.1), ValueError, r"`delta` is the spacing of closure='stencil' only"),
    (Closure, dict(kind="stencil", delta=-0.1), ValueError, r"`delta` must be positive and "
                                                            r"finite"),
    (Closure, dict(difference="backward"), ValueError, r"`difference` must be one of"),
    (Integrator, dict(method="rk5"), ValueError, r"`method` must be one of 'RK45'"),
    (Integrator, dict(method="rk4"), ValueError, r"`step` is required for the fixed-step "
                                                 r"method 'rk4'"),
    (Integrator, dict(step=0.1, max_step=0.2), ValueError, r"give either `step` or "
                                                           r"`max_step`"),
    (Integrator, dict(method="rk4", step=0.1, first_step=0.01), ValueError,
     r"`first_step` applies to scipy's adaptive methods \(.*\) only, but got method='rk4'"),
    (Integrator, dict(max_steps=0), ValueError, r"`max_steps` must be a positive integer"),
    (Integrator, dict(min_step=-1.0), ValueError, r"`min_step` must be a non-negative number"),
])
def test_objects_refuse_bad_fields_naming_them(cls, kw, error, match):
    with pytest.raises(error, match=match):
        cls(**kw)


def test_objects_are_frozen_and_say_what_they_set():
    acc = Accuracy(tol=1e-6, fallback="adjoint")
    with pytest.raises(dataclasses.FrozenInstanceError):
        acc.tol = 1e-3
    assert repr(acc) == "Accuracy(tol=1e-06, fallback='adjoint')"
    assert repr(Integrator()) == "Integrator()"
    assert Closure(kind="stencil", delta=np.array([0.1, 0.2])).delta == (0.1, 0.2)
    assert Integrator(method="RK23", max_steps=50, max_step=0.5).options == {
        "max_step": 0.5, "max_steps": 50}


@settings(max_examples=60, deadline=None)
@given(r=st.floats(0.0, 1.0), a=st.floats(0.0, 1.0))
def test_accuracy_reads_tol_as_a_pair(r, a):
    """A float ``t`` is ``(t, t)``; a pair keeps its parts; the scale of a field is
    ``atol + rtol |F|`` (the default rule without ``tol``: 10% of ``max(1, |F|)``)."""
    if r == a == 0:
        with pytest.raises(ValueError, match=r"\(0, 0\)"):
            Accuracy(tol=(r, a))
        return
    acc = Accuracy(tol=(r, a))
    assert acc.target == (r, a) and acc.checked
    F = np.array([-2.0, 0.0, 3.5])
    np.testing.assert_array_equal(acc.scale(F), a + r * np.abs(F))
    if r > 0:
        assert Accuracy(tol=r).target == (r, r)
    np.testing.assert_array_equal(Accuracy().scale(F), 0.1 * np.maximum(np.abs(F), 1.0))


@settings(max_examples=40, deadline=None)
@given(step=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3)))
def test_integrator_step_is_positive_and_finite(step):
    ok = isinstance(step, (int, float)) and math.isfinite(step) and step > 0
    if ok:
        assert Integrator(method="rk4", step=step).step == float(step)
    else:
        with pytest.raises(ValueError, match="`step` must be a positive finite number"):
            Integrator(method="rk4", step=step)


# -- the same results from keywords and from objects ------------------------------------
def test_solve_imbedding_keywords_and_objects_agree():
    kw = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL, tol=1e-5,
                                  max_order=4, order=2, method="RK23", max_steps=5000)
    obj = invimbed.solve_imbedding(
        PROBLEM, [0.8], DEPTHS, control=CONTROL, accuracy=Accuracy(tol=1e-5, max_order=4),
        closure=Closure(kind="jet", order=2), integrator=Integrator(method="RK23",
                                                                    max_steps=5000))
    mixed = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL,
                                     accuracy=Accuracy(tol=1e-5), max_order=4, order=2,
                                     integrator=Integrator(method="RK23"), max_steps=5000)
    assert kw.success and kw.order == 2
    for other in (obj, mixed):
        _same_result(kw, other)
    stencil = dict(difference="forward", delta=1e-3)
    a = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL, closure="stencil",
                                 method="rk4", step=0.05, **stencil)
    b = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL,
                                 closure=Closure(kind="stencil", **stencil),
                                 integrator=Integrator(method="rk4", step=0.05))
    _same_result(a, b)


def test_solve_adjoint_keywords_and_objects_agree():
    kw = invimbed.solve_adjoint(PROBLEM, [0.8], DEPTHS, control=CONTROL, rtol=1e-9,
                                atol=1e-11, method="RK23", max_steps=4000)
    obj = invimbed.solve_adjoint(PROBLEM, [0.8], DEPTHS, control=CONTROL,
                                 accuracy=Accuracy(rtol=1e-9, atol=1e-11),
                                 integrator=Integrator(method="RK23", max_steps=4000))
    _same_result(kw, obj)
    # and the sweep's answer is the exact one (an independent reference)
    sweep = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL,
                                     accuracy=Accuracy(tol=1e-6))
    np.testing.assert_allclose(sweep.value, kw.value, rtol=1e-5, atol=1e-6)


def test_solve_optimal_keywords_and_objects_agree():
    kw = invimbed.solve_optimal(LQ, [1.0], [-1.0], n_controls=1, rtol=1e-10, atol=1e-12,
                                method="DOP853", linear_quadratic=False, tol=1e-6, order=2,
                                closed_loop=False)
    obj = invimbed.solve_optimal(LQ, [1.0], [-1.0], n_controls=1, linear_quadratic=False,
                                 accuracy=Accuracy(tol=1e-6, rtol=1e-10, atol=1e-12),
                                 closure=Closure(order=2), closed_loop=False,
                                 integrator=Integrator(method="DOP853"))
    _same_result(kw, obj, ("z", "value", "adjoint", "feedback", "depth_grad"))
    assert abs(float(kw.value[0]) - 0.5 * np.tanh(1.0)) < 1e-5     # V = tanh(s)/2


def test_solve_ocp_keywords_and_objects_agree():
    common = dict(p=0.0, intervals=6, n_controls=1, solver="slsqp")
    kw = invimbed.solve_ocp(OCP, [1.0], tol=1e-7, rtol=1e-9, atol=1e-11, method="RK23",
                            max_steps=2000, **common)
    obj = invimbed.solve_ocp(OCP, [1.0], accuracy=Accuracy(tol=1e-7, rtol=1e-9, atol=1e-11),
                             integrator=Integrator(method="RK23", max_steps=2000), **common)
    assert kw.success
    np.testing.assert_array_equal(kw.x, obj.x)
    assert (kw.fun, kw.message) == (obj.fun, obj.message)


def test_optimize_control_takes_the_objects():
    ctrl = invimbed.PiecewiseConstant(np.linspace(-1.0, 0.0, 3), np.zeros(2))
    kw = invimbed.optimize_control(PROBLEM, [0.8], ctrl, p=-1.0, rtol=1e-9, atol=1e-11)
    obj = invimbed.optimize_control(PROBLEM, [0.8], ctrl, p=-1.0,
                                    accuracy=Accuracy(rtol=1e-9, atol=1e-11))
    np.testing.assert_array_equal(kw.x, obj.x)
    assert kw.fun == obj.fun
    with pytest.raises(ValueError, match=r"optimize_control does not use `accuracy.tol`"):
        invimbed.optimize_control(PROBLEM, [0.8], ctrl, p=-1.0, accuracy=Accuracy(tol=1e-3))
    with pytest.raises(ValueError, match=r"`rtol=1e-08` and `accuracy=Accuracy\(rtol=1e-09\)`"):
        invimbed.optimize_control(PROBLEM, [0.8], ctrl, p=-1.0, rtol=1e-8,
                                  accuracy=Accuracy(rtol=1e-9))


# -- conflicts: a keyword that sets a field differently ---------------------------------
@pytest.mark.parametrize("solve, kw, match", [
    ("imbedding", dict(tol=1e-3, accuracy=Accuracy(tol=1e-4)),
     r"`tol=0.001` and `accuracy=Accuracy\(tol=0.0001\)` set `tol` differently"),
    ("imbedding", dict(order=3, closure=Closure(order=2)),
     r"`order=3` and `closure=Closure\(order=2\)` set `order` differently \(3 and 2\)"),
    ("imbedding", dict(method="RK23", integrator=Integrator(method="DOP853")),
     r"`method='RK23'` and `integrator=Integrator\(method='DOP853'\)`"),
    ("imbedding", dict(max_steps=10, integrator=Integrator(max_steps=20)),
     r"`max_steps=10` and `integrator=Integrator\(max_steps=20\)`"),
    ("adjoint", dict(rtol=1e-8, accuracy=Accuracy(rtol=1e-7)),
     r"`rtol=1e-08` and `accuracy=Accuracy\(rtol=1e-07\)`"),
    ("adjoint", dict(accuracy=Accuracy(tol=1e-6)), r"solve_adjoint does not use "
                                                   r"`accuracy.tol`"),
    ("adjoint", dict(integrator=Integrator(method="rk4", step=0.1)),
     r"`integrator.method` must be one of 'RK45', 'RK23', 'DOP853'"),
    ("optimal", dict(closure=Closure(kind="stencil")), r"`integrator|`closure.kind` must be "
                                                       r"one of 'jet'"),
    ("optimal", dict(order=3, closure=Closure(estimate_error=False, order=2)),
     r"`order=3` and `closure=Closure\(order=2, estimate_error=False\)`"),
    ("ocp", dict(tol=1e-5, accuracy=Accuracy(tol=1e-4)), r"`tol=1e-05` and "
                                                         r"`accuracy=Accuracy\(tol=0.0001\)`"),
    ("ocp", dict(accuracy=Accuracy(tol=(1e-4, 1e-6))), r"`tol` of solve_ocp is the KKT "
                                                       r"tolerance, one positive float"),
    ("ocp", dict(integrator=Integrator(method="DOP853")), r"`integrator.method` must be one "
                                                          r"of 'RK45', 'RK23'"),
    ("ocp", dict(integrator=Integrator(max_step=0.1)), r"solve_ocp does not use "
                                                       r"`integrator.max_step`"),
    ("imbedding", dict(accuracy={"tol": 1e-3}), r"`accuracy` must be an invimbed.Accuracy, "
                                                r"but got \{'tol': 0.001\} \(type dict\)"),
])
def test_conflicting_settings_are_refused_naming_both(solve, kw, match):
    call = {"imbedding": lambda **k: invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS,
                                                              control=CONTROL, **k),
            "adjoint": lambda **k: invimbed.solve_adjoint(PROBLEM, [0.8], DEPTHS,
                                                          control=CONTROL, **k),
            "optimal": lambda **k: invimbed.solve_optimal(LQ, [1.0], [-1.0], n_controls=1,
                                                          **k),
            "ocp": lambda **k: invimbed.solve_ocp(OCP, [1.0], p=0.0, n_controls=1, **k)}
    error = TypeError if "must be an invimbed" in match else ValueError
    with pytest.raises(error, match=match):
        call[solve](**kw)


def test_a_keyword_that_agrees_or_fills_a_gap_is_taken():
    """A keyword equal to the object's field, or setting one it leaves at its default,
    is no conflict: the solve is that of the keywords."""
    base = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL, tol=1e-4,
                                    rtol=1e-8, order=2)
    same = invimbed.solve_imbedding(PROBLEM, [0.8], DEPTHS, control=CONTROL, tol=(1e-4, 1e-4),
                                    rtol=1e-8, accuracy=Accuracy(tol=1e-4), order=2,
                                    closure=Closure(kind="jet"))
    _same_result(base, same)


# -- every keyword of before is still taken ----------------------------------------------
#: The keywords of the solvers before the settings objects (their signatures then).
OLD_KEYWORDS = {
    "solve_imbedding": ("control", "closure", "order", "method", "rtol", "atol", "step",
                        "estimate_error", "difference", "delta", "backend", "tol", "fallback",
                        "max_order", "ratio_test", "dense_output", "memory_budget"),
    "solve_adjoint": ("control", "method", "rtol", "atol", "strategy", "backend",
                      "memory_budget"),
    "solve_optimal": ("n_controls", "control_bounds", "closure", "order", "method", "rtol",
                      "atol", "step", "estimate_error", "control_affine", "linear_quadratic",
                      "theta0", "newton_tol", "max_newton", "tol", "closed_loop", "max_time",
                      "progress", "dense_output"),
    "solve_ocp": ("p", "intervals", "grid", "n_controls", "control_bounds", "state_bounds",
                  "path_constraints", "path_points", "final_state", "terminal_equality",
                  "terminal_inequality", "free_horizon", "horizon_bounds", "initial_guess",
                  "solver", "hessian", "tol", "constraint_tol", "max_iter", "solver_options",
                  "callback", "rtol", "atol", "method", "max_steps", "trajectory_points"),
}


@pytest.mark.parametrize("name", sorted(OLD_KEYWORDS))
def test_every_old_keyword_is_still_taken_with_its_default(name):
    import inspect

    params = inspect.signature(getattr(invimbed, name)).parameters
    for key in OLD_KEYWORDS[name]:
        assert key in params, key
    assert {"accuracy", "integrator"} <= set(params)


# -- one check path for problem and x -----------------------------------------------------
def test_solve_ocp_checks_x_through_the_shared_path():
    """`solve_ocp` checks ``problem`` and ``x`` where the other solvers do: a non-finite
    ``x`` names the entry (before: "`x` must be finite"), a complex one is refused as
    complex, and an empty one as empty."""
    with pytest.raises(ValueError, match=r"`x` must be finite, but it has 1 non-finite "
                                         r"entries \(first at index \(1,\): nan\)"):
        invimbed.solve_ocp(OCP, [1.0, np.nan], p=0.0, n_controls=1)
    with pytest.raises(TypeError, match=r"`x` must be real, but got complex values"):
        invimbed.solve_ocp(OCP, [1.0 + 1j], p=0.0, n_controls=1)
    with pytest.raises(ValueError, match=r"`x` must be one initial state, shape \(N,\)"):
        invimbed.solve_ocp(OCP, [[1.0]], p=0.0, n_controls=1)
    with pytest.raises(TypeError, match=r"`problem` must be an invimbed.BolzaProblem"):
        invimbed.solve_ocp(lambda t, z, u: u, [1.0], p=0.0, n_controls=1)


def test_setup_carries_the_settings_read_once():
    """`prepare` reads the objects (or its positional keywords, the same way) into the
    `Setup`, with the integrator's ``rtol``, ``atol`` filled in."""
    from invimbed._core.setup.arguments import prepare

    setup = prepare(PROBLEM, [0.8], DEPTHS, CONTROL, integrator=Integrator(method="RK23"),
                    accuracy=Accuracy(tol=1e-4, atol=1e-8), closure=Closure(order=2))
    assert setup.integrator == Integrator(method="RK23") and setup.closure.order == 2
    assert (setup.accuracy.target, setup.accuracy.rtol, setup.accuracy.atol) == (
        (1e-4, 1e-4), 1e-6, 1e-8)
    old = prepare(PROBLEM, [0.8], DEPTHS, CONTROL, "rk4", 1e-7, 1e-9, 0.1)
    assert old.integrator == Integrator(method="rk4", step=0.1)
    assert old.accuracy == Accuracy(rtol=1e-7, atol=1e-9)
    with pytest.raises(ValueError, match=r"`method` must be one of 'RK45', but got 'RK23'"):
        prepare(PROBLEM, [0.8], DEPTHS, CONTROL, "RK23", allowed_methods=("RK45",))
