"""The solvers check user derivatives once, at their first point (``check_derivatives``
of `BolzaProblem`): wrong ones raise naming the derivative, correct ones never do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import invimbed
import invimbed._core.derivatives.guard as check_module
from invimbed._core.problem.check import check_derivatives
from invimbed._core.derivatives.guard import GUARD_TOL, verify_user_derivatives
from problems import (logistic_functions, lq_functions, pendulum_functions,
                      vanderpol_functions)

A = np.array([[-1.0, 0.8], [-0.1, -0.7]])     # not symmetric: A.T is wrong
BM = np.array([[1.0], [0.5]])
X0 = [0.3, -0.4]
DEPTHS = [0.0, -0.5]
CTRL = invimbed.Constant([0.5])

SOLVERS = {"imbedding": invimbed.solve_imbedding, "adjoint": invimbed.solve_adjoint}
PROBLEMS = {
    "lq": lambda: lq_functions([[-1.0, 0.3], [0.2, -0.7]], [[1.0], [0.5]], np.eye(2),
                               [[0.4]], [[0.1], [0.2]], [[2.0, 0.1], [0.1, 1.0]]),
    "logistic": logistic_functions,
    "pendulum": pendulum_functions,
    "vanderpol": vanderpol_functions,
}


def linear(scale=1.0, **derivatives):
    """``f = scale (A z + B u)``, ``R = |z|^2 / 2 + z_0 u``, ``T = z^T P z / 2``."""
    P = np.array([[2.0, 0.3], [0.3, 1.0]])
    good = {
        "f_z": lambda t, z, th: np.broadcast_to(scale * A, (len(z), 2, 2)).copy(),
        "f_theta": lambda t, z, th: np.broadcast_to(scale * BM, (len(z), 2, 1)).copy(),
        "R_z": lambda t, z, th: z + np.stack([th[:, 0], 0 * th[:, 0]], 1),
        "R_theta": lambda t, z, th: z[:, :1].copy(),
        "T_z": lambda z: z @ P,
        "T_zz": lambda z: np.broadcast_to(P, (len(z), 2, 2)).copy(),
    }
    good.update(derivatives)
    kw = {k: good.pop(k) for k in ("check_derivatives",) if k in good}
    return invimbed.BolzaProblem(
        lambda t, z, th: scale * (z @ A.T + th @ BM.T),
        lambda t, z, th: 0.5 * np.sum(z ** 2, 1) + z[:, 0] * th[:, 0],
        lambda z: 0.5 * np.einsum("bi,ij,bj->b", z, P, z),
        derivatives={k: v for k, v in good.items() if v is not None}, vectorized=True, **kw)


def transposed(scale=1.0):
    return lambda t, z, th: np.broadcast_to(scale * A.T, (len(z), 2, 2)).copy()


# -- wrong derivatives raise, naming them ------------------------------------------------
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_transposed_f_z_raises_naming_it(solver):
    problem = linear(f_z=transposed())
    with pytest.raises(ValueError, match=r"`derivatives\['f_z'\]` does not match finite "
                                         r"differences of `dynamics`") as info:
        SOLVERS[solver](problem, X0, DEPTHS, control=CTRL)
    text = str(info.value)
    assert "check_derivatives=False" in text and "x[0] = [0.3, -0.4]" in text
    assert "theta = [0.5]" in text and "t = 0" in text
    for other in ("f_theta", "R_z", "R_theta", "T_z", "T_zz"):
        assert other not in text
    # it raises again: a failed check is not remembered as done
    with pytest.raises(ValueError, match="f_z"):
        SOLVERS[solver](problem, X0, DEPTHS, control=CTRL)


@pytest.mark.parametrize("key, wrong", [
    ("R_z", lambda t, z, th: -(z + np.stack([th[:, 0], 0 * th[:, 0]], 1))),    # sign
    ("R_theta", lambda t, z, th: np.zeros((len(z), 1))),                       # missing
    ("T_zz", lambda z: np.broadcast_to(np.array([[2.0, 0.3], [0.3, 2.0]]),
                                       (len(z), 2, 2)).copy()),                 # a typo
    ("T_z", lambda z: 2 * z),
    ("f_theta", lambda t, z, th: -np.broadcast_to(BM, (len(z), 2, 1)).copy()),
])
def test_wrong_derivatives_of_every_kind_raise(key, wrong):
    with pytest.raises(ValueError, match=rf"`derivatives\['{key}'\]` does not match") as info:
        invimbed.solve_adjoint(linear(**{key: wrong}), X0, DEPTHS, control=CTRL)
    culprits, _, dependants = str(info.value).partition("Checked against these")
    named = [k for k in ("f_z", "f_theta", "R_z", "R_theta", "T_z", "T_zz")
             if f"`derivatives['{k}']` does not match" in culprits]
    assert named == [key]
    # T_zz is right, but checked against the wrong T_z it fails too
    assert ("'T_zz'" in dependants) == (key == "T_z")


def test_a_missing_unit_term_among_large_entries_raises():
    """Scale-aware per row: a missing term of size 1 where entries are ~50 is caught."""
    big = 50.0
    wrong = transposed(big)
    problem = linear(scale=big, f_z=lambda t, z, th: (np.broadcast_to(big * A, (len(z), 2, 2))
                                                      - np.array([[1.0, 0], [0, 0]])))
    with pytest.raises(ValueError, match="f_z"):
        invimbed.solve_adjoint(problem, X0, DEPTHS, control=CTRL)
    with pytest.raises(ValueError, match="f_z"):
        invimbed.solve_adjoint(linear(scale=big, f_z=wrong), X0, DEPTHS, control=CTRL)


@pytest.mark.parametrize("scale", [1e-6, 1e6])
def test_scale_of_the_problem_does_not_matter(scale):
    good = linear(scale=scale)
    good.check_shapes(0.0, np.array([X0]), np.array([0.5]))      # passes
    bad = linear(scale=scale, f_z=transposed(scale))
    with pytest.raises(ValueError, match="f_z"):
        bad.check_shapes(0.0, np.array([X0]), np.array([0.5]))


def test_the_culprit_is_named_and_its_dependants_listed():
    pf = vanderpol_functions()
    good = pf.derivatives["f_z"]

    def wrong(t, z, th):
        out = good(t, z, th).copy()
        out[:, 1, 0] += z[:, 1]     # a missing term, varying with z
        return out

    d = dict(pf.derivatives, f_z=wrong)
    problem = invimbed.BolzaProblem(pf.f, pf.R, pf.T, derivatives=d, vectorized=True)
    with pytest.raises(ValueError) as info:
        invimbed.solve_adjoint(problem, X0, DEPTHS, control=invimbed.Constant([0.2, 0.4]))
    text = str(info.value)
    assert "`derivatives['f_z']` does not match finite differences of `dynamics`" in text
    assert "entry [1, 0]" in text
    assert "Checked against these, `derivatives['f_zz']` fail" in text
    assert "f_ztheta" not in text      # its differences in theta do not see the term
    assert "R_z" not in text and "T_z" not in text


def test_wrong_higher_derivative_given_alone_raises():
    """``f_zz`` without ``f_z``: checked against differences of a difference."""
    def f(t, z, th):
        return np.stack([z[:, 1] + 10.0, -np.sin(z[:, 0]) + th[:, 0]], 1)

    def f_zz(t, z, th, sign=1.0):
        out = np.zeros((len(z), 2, 2, 2))
        out[:, 1, 0, 0] = sign * np.sin(z[:, 0])
        return out

    x = np.array([[0.9, -0.4]])
    ok = invimbed.BolzaProblem(f, derivatives={"f_zz": f_zz}, vectorized=True)
    ok.check_shapes(0.0, x, np.array([0.2]))
    bad = invimbed.BolzaProblem(f, derivatives={"f_zz": lambda t, z, th: f_zz(t, z, th, -1.0)},
                                vectorized=True)
    with pytest.raises(ValueError, match=r"`derivatives\['f_zz'\]` does not match finite "
                                         r"differences of f_z \(itself from differences\)"):
        bad.check_shapes(0.0, x, np.array([0.2]))


def test_unvectorized_derivatives_are_checked():
    def f(t, z, th):
        return np.array([z[1], -np.sin(z[0]) + th[0]])

    right = {"f_z": lambda t, z, th: np.array([[0.0, 1.0], [-np.cos(z[0]), 0.0]])}
    wrong = {"f_z": lambda t, z, th: np.array([[0.0, 1.0], [np.cos(z[0]), 0.0]])}
    ctrl = invimbed.Constant([0.1])
    T = lambda z: 0.5 * z @ z  # noqa: E731
    res = invimbed.solve_adjoint(invimbed.BolzaProblem(f, terminal_loss=T, derivatives=right),
                                 X0, DEPTHS, control=ctrl)
    assert res.success
    with pytest.raises(ValueError, match=r"f_z.*relative error 2"):
        invimbed.solve_adjoint(invimbed.BolzaProblem(f, terminal_loss=T, derivatives=wrong),
                               X0, DEPTHS, control=ctrl)


# -- correct derivatives pass ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_correct_derivatives_pass(name):
    pf = PROBLEMS[name]()
    problem = pf.problem()
    x = np.full((2, pf.n_state), 0.3)
    ctrl = invimbed.Constant(np.full(pf.n_theta, 0.4))
    for solver in SOLVERS.values():
        res = solver(problem, x, DEPTHS, control=ctrl)
        assert np.all(np.isfinite(res.value))
    assert problem._derivatives_checked == {(pf.n_state, pf.n_theta)}


@settings(max_examples=15, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(PROBLEMS)), u=st.floats(-3.0, 3.0), v=st.floats(-3.0, 3.0),
       w=st.sampled_from([0.0, 1e-9, -0.5, 2.0]), t=st.sampled_from([0.0, -0.7]))
def test_correct_derivatives_pass_at_any_point(name, u, v, w, t):
    pf = PROBLEMS[name]()
    x = np.array([[u, v][:pf.n_state]])
    verify_user_derivatives(pf.problem(), t, x, np.full(pf.n_theta, w))


@pytest.mark.parametrize("x", [[0.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])
def test_kinks_and_zeros_do_not_fail(x):
    """relu and abs at their kink: a correct one-sided derivative passes."""
    def f(t, z, th):
        return np.stack([np.maximum(z[:, 0], 0.0) - z[:, 1], np.abs(z[:, 1]) * th[:, 0]], 1)

    def f_z(t, z, th):
        out = np.zeros((len(z), 2, 2))
        out[:, 0, 0] = z[:, 0] > 0
        out[:, 0, 1] = -1.0
        out[:, 1, 1] = np.sign(z[:, 1]) * th[:, 0]
        return out

    problem = invimbed.BolzaProblem(f, derivatives={"f_z": f_z}, vectorized=True)
    problem.check_shapes(0.0, np.array([x]), np.array([0.7]))


def test_derivatives_of_a_function_with_large_cancelling_terms_pass():
    """A derivative of about zero next to values of size 1e8: rounding is allowed for."""
    def f(t, z, th):
        return np.stack([1e8 * np.cos(z[:, 0]) ** 2 + 1e8 * np.sin(z[:, 0]) ** 2, z[:, 0]], 1)

    def f_z(t, z, th):
        out = np.zeros((len(z), 2, 2))
        out[:, 1, 0] = 1.0
        return out

    problem = invimbed.BolzaProblem(f, derivatives={"f_z": f_z}, vectorized=True)
    problem.check_shapes(0.0, np.array([[0.3, 0.2]]), np.zeros(0))


# -- opt-out, once, inputs ---------------------------------------------------------------
def test_check_derivatives_false_skips_the_check():
    problem = linear(f_z=transposed(), check_derivatives=False)
    assert problem.check_derivatives is False
    res = invimbed.solve_imbedding(problem, X0, DEPTHS, control=CTRL)
    assert res.success     # silently wrong: the user asked for it


def test_the_check_runs_once_per_size(monkeypatch):
    calls = []
    real = check_module.verify_user_derivatives
    monkeypatch.setattr(check_module, "verify_user_derivatives",
                        lambda *a: calls.append(a) or real(*a))
    problem = linear()
    invimbed.solve_imbedding(problem, X0, DEPTHS, control=CTRL)
    invimbed.solve_adjoint(problem, X0, DEPTHS, control=CTRL)
    invimbed.solve_imbedding(problem, [X0, X0], DEPTHS, control=CTRL)
    assert len(calls) == 1
    t, x, theta = calls[0][1:]
    assert t == 0.0 and np.array_equal(x[0], X0) and np.array_equal(theta, [0.5])
    # no derivatives, or a provider: nothing to check
    for p in (invimbed.BolzaProblem(lambda t, z, th: -z, vectorized=True),
              linear(check_derivatives=False)):
        invimbed.solve_adjoint(p, X0, DEPTHS, control=CTRL)
    assert len(calls) == 1


def test_the_check_costs_few_calls():
    counts = {"f": 0, "f_z": 0}

    def f(t, z, th):
        counts["f"] += 1
        return z @ A.T + th @ BM.T

    def f_z(t, z, th):
        counts["f_z"] += 1
        return np.broadcast_to(A, (len(z), 2, 2)).copy()

    problem = invimbed.BolzaProblem(f, derivatives={"f_z": f_z}, vectorized=True)
    problem.provider(2, 1)   # the trace that completes f_z (docs/derivatives.md), once
    assert counts == {"f": 9, "f_z": 0}       # on traced arrays, then 8 verifying points
    counts["f"] = 0
    problem.check_shapes(0.0, np.array([X0]), np.array([0.5]))
    # the check: the centre, one stencil; the first call's (shapes, writes into the
    # arguments): the first point and the seeded test points of `probe`; and the trace's
    # re-check at each solve (one call of f)
    from invimbed._core.inputs.probe import TEST_POINTS

    assert counts["f_z"] == 1 + 1 + TEST_POINTS and counts["f"] - 1 <= 3 + TEST_POINTS


def test_public_check_reports_without_raising_and_leaves_the_solver_check():
    problem = linear(f_z=transposed())
    res = check_derivatives(problem, X0, control=CTRL)
    assert not res.ok and res.suspects == ["f_z"]
    with pytest.raises(ValueError, match="f_z"):
        invimbed.solve_imbedding(problem, X0, DEPTHS, control=CTRL)


def test_check_derivatives_keyword_must_be_a_bool():
    with pytest.raises(TypeError, match="`check_derivatives` must be True or False"):
        linear(check_derivatives="yes")
    with pytest.raises(TypeError, match="`check_derivatives` must be True or False"):
        linear(check_derivatives=None)
    assert linear(check_derivatives=np.bool_(False)).check_derivatives is False
    assert linear().check_derivatives is True


def test_the_tolerance_is_documented():
    assert GUARD_TOL == 1e-3
    assert "check_derivatives" in invimbed.BolzaProblem.__doc__


# -- check_derivatives(control=) ---------------------------------------------------------
def test_check_derivatives_takes_a_control():
    pf = pendulum_functions()
    problem = pf.problem()
    ctrl = invimbed.PiecewiseConstant([-1.0, -0.5, 0.0], [[0.1, 0.2], [0.3, 0.4]])
    by_ctrl = check_derivatives(problem, [0.3, 0.1], control=ctrl, t=-0.7)
    by_theta = check_derivatives(problem, [0.3, 0.1], [0.1, 0.2], t=-0.7)
    assert by_ctrl.ok and by_ctrl.errors == by_theta.errors
    default_t = check_derivatives(problem, [0.3, 0.1], control=ctrl)   # t = q
    assert default_t.errors == check_derivatives(problem, [0.3, 0.1], [0.3, 0.4]).errors
    prov = problem.provider(2, 2)
    assert check_derivatives(prov, [0.3, 0.1], control=invimbed.Constant([0.1, 0.2])).ok


def test_check_derivatives_control_errors_name_the_arguments():
    problem = pendulum_functions().problem()
    ctrl = invimbed.Constant([0.1, 0.2])
    with pytest.raises(TypeError, match="either `theta`.*or `control`.*not both"):
        check_derivatives(problem, [0.3, 0.1], [0.1, 0.2], control=ctrl)
    with pytest.raises(TypeError, match="`control` must be None or an invimbed control"):
        check_derivatives(problem, [0.3, 0.1], control=[0.1, 0.2])
    with pytest.raises(TypeError, match="pass it as `control=`"):
        check_derivatives(problem, [0.3, 0.1], ctrl)
    with pytest.raises(ValueError, match="`theta` must have M = 2"):
        check_derivatives(problem.provider(2, 2), [0.3, 0.1], control=invimbed.Constant([1.0]))


def test_a_derivative_of_the_wrong_shape_is_named_at_the_first_call():
    problem = linear(f_z=lambda t, z, th: z.copy())
    with pytest.raises(ValueError, match=r"`derivatives\['f_z'\]` must return shape \(B, 2, 2\) "
                                         r"\(vectorized=True: .*but it returned shape \(1, 2\)") as info:
        invimbed.solve_adjoint(problem, X0, DEPTHS, control=CTRL)
    assert "does not match" not in str(info.value)
