"""The default rule (no `tol`): `converged` means every field within 10% of
`max(1, |field|)`, at requested depths, at `sol(p)` and in every row, and the depth
gradient is judged like the other fields (docs/accuracy.md, "`tol`: what the sweep is
asked for" and "The estimate, and when it is refused").

Every case is checked against `solve_adjoint` at `rtol=1e-11`; each failed on the code
before the ratio test ran without `tol` and before the depth gradient had an estimate.
"""

from functools import lru_cache

import numpy as np
import pytest

import invimbed
from invimbed import solve_adjoint, solve_imbedding
from problems import forced_double_pendulum

sp = pytest.importorskip("sympy")

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
X_DP, U_DP = [1.0, -0.5, 0.5, 0.0], invimbed.Constant([0.3])


@lru_cache(maxsize=None)
def double_pendulum():
    return invimbed.from_sympy(*forced_double_pendulum())


def errors_in_units(res, ref, scale):
    """Per (depth[, input]): the largest ``|res - ref| / scale(ref)`` over every field and
    component (the depth gradient included)."""
    worst = np.zeros(np.shape(res.value))
    for k in FIELDS:
        a, b = np.asarray(res[k], float), np.asarray(ref[k], float)
        d = np.abs(a - b)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(d == 0, 0.0, d / scale(b))       # exact zeros pass (as in `tol`)
        worst = np.maximum(worst, w.reshape(worst.shape + (-1,)).max(-1))
    return worst


def default_scale(b):
    return 0.1 * np.maximum(1.0, np.abs(b))


def test_default_rule_holds_at_requested_depths():
    """Order 2 at s = 0.44 to 0.5: the estimate alone passed these depths with errors 2.5
    to 3.8 times 10% of max(1, |field|) (status 0 where they were requested alone); the
    ratio test, now run without `tol` too, refuses them."""
    pb, depths = double_pendulum(), -np.array([0.1, 0.44, 0.48, 0.5])
    ref = solve_adjoint(pb, X_DP, depths, control=U_DP, rtol=1e-11, atol=1e-13)
    res = solve_imbedding(pb, X_DP, depths, control=U_DP, order=2)
    err = errors_in_units(res, ref, default_scale)
    assert res.converged[0] and err[0] <= 1
    assert np.all(err[res.converged] <= 1), (err, res.converged)
    assert not res.converged[1:].any() and res.status == -2
    assert res.series_ratio is not None
    alone = solve_imbedding(pb, X_DP, [-0.5], control=U_DP, order=2)
    assert (alone.success, alone.status) == (False, -2)
    assert errors_in_units(alone, ref, default_scale)[-1:] > 1      # rightly so


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_default_rule_holds_at_every_depth_of_the_dense_output(backend):
    """`sol(p)` at 300 depths of [-0.6, 0], order 2: the estimate alone claimed
    convergence at depths whose error exceeded the threshold; with the ratio test's
    differences carried by the continuous extension, none does."""
    if backend == "numba":
        pytest.importorskip("numba")
    pb = double_pendulum()
    res = solve_imbedding(pb, X_DP, [-0.6, 0.0], control=U_DP, order=2, dense_output=True,
                          backend=backend)
    p = np.linspace(-0.6, 0.0, 300)
    got = res.sol(p)
    ref = solve_adjoint(pb, X_DP, p, control=U_DP, rtol=1e-11, atol=1e-13)
    err = errors_in_units(got, ref, default_scale)
    assert got.converged.sum() >= 100                    # the shallow third, at least
    assert np.all(err[got.converged] <= 1), err[got.converged].max()
    assert got.series_ratio is not None
    assert "depth_grad" in got.error_estimate


def rigid_body():
    """Euler's equations of a torqued rigid body (inertia 1, 2, 3), quadratic terminal
    loss, the torque a piecewise-constant control of 4 pieces on [-1, 0]."""
    inertia, target = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.2, 0.1])

    def f(t, z, th):
        i1, i2, i3 = inertia
        w1, w2, w3 = z[:, 0], z[:, 1], z[:, 2]
        return np.stack([((i2 - i3) * w2 * w3 + th[:, 0]) / i1,
                         ((i3 - i1) * w3 * w1 + th[:, 1]) / i2,
                         ((i1 - i2) * w1 * w2 + th[:, 2]) / i3], axis=1)

    problem = invimbed.BolzaProblem(f, lambda t, z, th: 0.05 * np.sum(th ** 2, axis=1),
                                    lambda z: 0.5 * np.sum((z - target) ** 2, axis=1),
                                    vectorized=True)
    values = np.random.default_rng(3).normal(size=(4, 3)) * 0.5
    return problem, invimbed.PiecewiseConstant(np.linspace(-1.0, 0.0, 5), values)


def test_depth_gradient_is_inside_tol():
    """Near a zero of dJ/dp (s = 0.0825 to 0.085) at a pure relative tol: the adjoint
    passed, and the depth gradient, -(Lam . f + R), carried its error 18 times over
    `tol`. Its estimate, sum |f_i| (estimate of Lam_i), is judged like the other fields'."""
    pb, ctrl = rigid_body()
    x, depths = [0.3, -0.4, 0.8], -np.linspace(0.0825, 0.085, 5)
    ref = solve_adjoint(pb, x, depths, control=ctrl, rtol=1e-11, atol=1e-13)
    assert np.ptp(np.sign(ref.depth_grad)) == 2            # dJ/dp changes sign here
    res = solve_imbedding(pb, x, depths, control=ctrl, tol=(1e-4, 0.0))
    err = errors_in_units(res, ref, lambda b: 1e-4 * np.abs(b))
    assert np.all(err[res.converged] <= 1), (err, res.converged)
    assert res.success == res.converged.all()
    est = res.error_estimate
    assert "depth_grad" in est and est.depth_grad.shape == res.depth_grad.shape
    # the estimate bounds the depth gradient's error where the adjoint's does its own
    f = pb.dynamics(0.0, np.asarray([x]), ctrl.theta(float(depths[0]))[None])[0]
    np.testing.assert_allclose(est.depth_grad[0], np.abs(f) @ est.adjoint[0], rtol=1e-12)


def test_default_rule_holds_in_every_row_of_a_batch():
    """The pendulum of `tests/problems.py`, 4 inputs x 60 depths of [-1.5, 0], order 1:
    the estimate alone flagged rows converged that were up to several times outside the
    rule (the issue's 10^5 rows: 1,628 of them, worst 4.2x); the ratio test, none."""
    from problems import sympy_pendulum

    pb, ctrl = sympy_pendulum(), invimbed.Constant([0.2, 0.3])
    xs = np.random.default_rng(1).uniform(-1.5, 1.5, size=(4, 2))
    depths = np.linspace(0.0, -1.5, 60)
    ref = solve_adjoint(pb, xs, depths, control=ctrl, rtol=1e-11, atol=1e-13)
    res = solve_imbedding(pb, xs, depths, control=ctrl)
    err = errors_in_units(res, ref, default_scale)
    assert res.converged.shape == (60, 4) and res.converged.sum() >= 60
    assert np.all(err[res.converged] <= 1), err[res.converged].max()
    alone = solve_imbedding(pb, xs, depths, control=ctrl, ratio_test=False)
    assert np.any(alone.converged & (errors_in_units(alone, ref, default_scale) > 1))


def test_default_rule_holds_on_the_fixed_step_backends():
    """numba's fixed-step sweep carries no lower order, so no ratio test: its verdict had
    the estimate alone, which flagged pairs converged up to 8.7 times outside the rule
    (the pendulum of `tests/problems.py`, 4 inputs x 60 depths, order 1). The estimate
    alone must now be within 1/25 of the rule. cupy's fixed-step sweep reaches its
    verdict through the same function (`rejudge`), so this covers it too."""
    pytest.importorskip("numba")
    from problems import sympy_pendulum

    pb, ctrl = sympy_pendulum(), invimbed.Constant([0.2, 0.3])
    xs = np.random.default_rng(1).uniform(-1.5, 1.5, size=(4, 2))
    depths = np.linspace(0.0, -1.5, 60)
    ref = solve_adjoint(pb, xs, depths, control=ctrl, rtol=1e-11, atol=1e-13)
    kw = dict(control=ctrl, backend="numba", method="rk4", step=0.01)
    res = solve_imbedding(pb, xs, depths, **kw)
    err = errors_in_units(res, ref, default_scale)
    assert res.converged.sum() >= 20 and res.status == -2
    assert np.all(err[res.converged] <= 1), err[res.converged].max()
    assert "above 1/25 of it" in res.message
    alone = solve_imbedding(pb, xs, depths, ratio_test=False, **kw)    # the verdict before
    assert np.any(alone.converged & (errors_in_units(alone, ref, default_scale) > 1))
