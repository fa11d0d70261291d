"""The accuracy contract of solve_imbedding: `success=True` means within the tolerance.

`tol` lets the sweep choose the jet order; the ratio test refuses depths where the jet
series does not visibly converge; `fallback="adjoint"` recomputes those exactly; a
finite-time blow-up is not a success; finite differences asked for more than they can
give say so.
"""

import numpy as np
import pytest

import invimbed
from invimbed import BolzaProblem, solve_adjoint, solve_imbedding
from invimbed._core.results.status import status_table

STATUS = status_table()    # {code: message}, the value of the deprecated invimbed.STATUS
from problems import forced_double_pendulum

sp = pytest.importorskip("sympy")


def lorenz():
    t = sp.Symbol("t")
    x, y, z = sp.symbols("x y z")
    f = [10 * (y - x), x * (28 - z) - y, x * y - sp.Rational(8, 3) * z]
    return invimbed.from_sympy(t, [x, y, z], [], f, None, (x**2 + y**2 + z**2) / 2)


def double_pendulum(g=3.0, amp=2.0):
    """Two-link pendulum with a sinusoidal torque on the first link and a constant
    control torque u (`problems.forced_double_pendulum`)."""
    return invimbed.from_sympy(*forced_double_pendulum(g, amp))


def pendulum():
    t, phi, v, u = sp.symbols("t phi v u")
    return invimbed.from_sympy(t, [phi, v], [u], [v, -sp.sin(phi) - 0.1 * v + u],
                               running_loss=0.1 * (1 - sp.cos(phi)) + 0.05 * u**2 / 2,
                               terminal_loss=1 - sp.cos(phi - 2.5) + v**2 / 2)


FIELDS = ("z", "value", "adjoint", "param_grad")


def true_error_within(res, ref, rtol, atol):
    ok = np.ones(np.shape(res.value), bool)
    for k in FIELDS:
        bad = np.abs(res[k] - ref[k]) > atol + rtol * np.abs(ref[k])
        ok &= ~bad.reshape(ok.shape + (-1,)).any(-1)
    return ok


def test_tol_is_reached_with_the_order_chosen():
    pb, x, w = pendulum(), [0.5, 0.5], invimbed.Constant([0.5])
    depths = -np.array([0.1, 0.3, 0.6, 1.0])
    res = solve_imbedding(pb, x, depths, control=w, tol=1e-5)
    ref = solve_adjoint(pb, x, depths, control=w, rtol=1e-12, atol=1e-13)
    assert res.success and res.status == 0 and res.converged.all(), res.message
    assert res.order > 1                          # order 1 is far from 1e-5 at s = 1
    assert true_error_within(res, ref, 1e-5, 1e-5).all()
    # a looser tolerance needs a lower order
    loose = solve_imbedding(pb, x, depths, control=w, tol=(1e-2, 1e-3))
    assert loose.success and loose.order < res.order
    assert true_error_within(loose, ref, 1e-2, 1e-3).all()


@pytest.mark.parametrize("K,s", [(3, 0.3)])
def test_lorenz_understatement_is_refused(K, s):
    """Jet 3 at s = 0.3 from (1, 1, 20): the estimate of the value is 2.6 times too small
    (the next difference of the series is larger than the estimate); the ratio test
    refuses it."""
    pb, x = lorenz(), [1.0, 1.0, 20.0]
    ref = solve_adjoint(pb, x, [-s], rtol=1e-12, atol=1e-12)
    res = solve_imbedding(pb, x, [-s], order=K, max_order=K, tol=(0.0, 0.1))
    err = np.abs(res.value[0] - ref.value[0])
    assert err > 0.1                                      # the answer is outside tol...
    assert res.error_estimate.value[0] < err / 2          # ...the estimate understates it...
    assert not res.converged[0] and res.status == -2      # ...and it is refused
    assert "depth p = -0.3" in res.message
    assert "series_not_converging" in [w.code for w in res.warnings]


def test_double_pendulum_without_convergence_is_not_a_success():
    """s = 0.15 converges at order 2 (every field, the depth gradient too), s = 0.65 does
    not. (At s = 0.2 the depth gradient is within tol by 2%, 0.98 of it, and its bound,
    sum |f_i| (error of Lam_i), 1.5 times it: refused since the depth gradient is judged.)"""
    pb, x, u = double_pendulum(), [1.0, -0.5, 0.5, 0.0], invimbed.Constant([0.3])
    depths = -np.array([0.15, 0.65])
    ref = solve_adjoint(pb, x, depths, control=u, rtol=1e-12, atol=1e-12)
    res = solve_imbedding(pb, x, depths, control=u, order=2, max_order=2, tol=1e-3)
    ok = true_error_within(res, ref, 1e-3, 1e-3)
    assert np.all(ok[res.converged])                     # converged means within tol
    assert not res.converged[1] and not ok[1]
    assert (res.success, res.status) == (False, -2) and -2 in STATUS
    assert res.message.startswith("Not converged from depth p = -0.65")


def test_fallback_adjoint_gives_exact_values_there():
    """s = 0.15 from the jet, s = 0.65 exactly (s = 0.2: see the test above)."""
    pb, x, u = double_pendulum(), [1.0, -0.5, 0.5, 0.0], invimbed.Constant([0.3])
    depths = -np.array([0.15, 0.65])
    ref = solve_adjoint(pb, x, depths, control=u, rtol=1e-12, atol=1e-12)
    res = solve_imbedding(pb, x, depths, control=u, order=2, max_order=2, tol=1e-3,
                          fallback="adjoint")
    assert res.success and res.status == 0, res.message
    assert list(res.exact_fallback) == [False, True]
    assert "fallback_adjoint" in [w.code for w in res.warnings]
    assert true_error_within(res, ref, 1e-3, 1e-3).all()
    for k in FIELDS + ("depth_grad",):
        np.testing.assert_allclose(res[k][1], ref[k][1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kw", [dict(method="rk4", step=0.01), dict(), dict(tol=1e-3)])
def test_blow_up_is_not_a_success(kw):
    """dz/dt = z^2 from x = 1: z is infinite from s = 1 on; the sweep stays finite."""
    pb = BolzaProblem(lambda t, z, th: z**2, terminal_loss=lambda z: 0.5 * np.sum(z**2, 1),
                      vectorized=True)
    depths = -np.linspace(0.25, 2.0, 8)
    res = solve_imbedding(pb, [1.0], depths, **kw)
    assert not res.success and res.status == -2
    assert not res.converged[depths <= -1.0].any()
    where = float(res.message.split("depth p = ")[1].split(" ")[0])
    assert where > -1.0


def test_without_tol_a_large_estimate_is_status_minus_2_and_fields_returned():
    pb, x = lorenz(), [1.0, 1.0, 20.0]
    res = solve_imbedding(pb, x, [-0.05, -0.3])
    assert (res.success, res.status) == (False, -2)
    assert list(res.converged) == [True, False]
    assert "depth p = -0.3" in res.message and np.isfinite(res.z).all()
    assert [w.code for w in res.warnings] == ["estimate_large"]
    assert res.order == 1 and res.exact_fallback is None


def test_finite_differences_at_tolerance_warn_and_do_not_chase_noise():
    """A 3-state problem with finite-difference derivatives only: rtol 1e-11 is far below
    what differences of differences can serve. The integrator's rtol is clamped, the
    result says so, and the sweep stays cheap."""
    A = np.array([[-0.5, 1.0, 0.0], [-1.0, -0.5, 0.3], [0.0, -0.3, -0.2]])
    pb = BolzaProblem(lambda t, z, th: z @ A.T + 0.1 * np.sin(z),
                      running_loss=lambda t, z, th: 0.5 * np.sum(z**2, 1),
                      terminal_loss=lambda z: np.sum(z**2, 1), vectorized=True,
                      derivatives="finite-differences")
    x, depths = [1.0, -0.5, 0.3], -np.linspace(0.1, 1.0, 5)
    normal = solve_imbedding(pb, x, depths)
    tight = solve_imbedding(pb, x, depths, rtol=1e-11, atol=1e-13)
    assert "finite_differences_at_tolerance" in [w.code for w in tight.warnings]
    assert normal.warnings == [] or "finite_differences_at_tolerance" not in [
        w.code for w in normal.warnings]
    assert tight.nfev < 20 * normal.nfev
    with_tol = solve_imbedding(pb, x, depths, tol=1e-10)
    assert "finite_differences_at_tolerance" in [w.code for w in with_tol.warnings]


def test_every_backend_result_has_warnings_and_status():
    pb = BolzaProblem(lambda t, z, th: z**2, terminal_loss=lambda z: 0.5 * np.sum(z**2, 1),
                      vectorized=True)
    for closure in ("jet", "stencil", "crop"):
        res = solve_imbedding(pb, [1.0], [-0.1, -0.2], closure=closure)
        assert isinstance(res.warnings, list) and res.status in STATUS


def test_tol_arguments_are_checked():
    pb = BolzaProblem(lambda t, z, th: -z, terminal_loss=lambda z: 0.5 * np.sum(z**2, 1),
                      vectorized=True)
    with pytest.raises(ValueError, match="`tol`"):
        solve_imbedding(pb, [1.0], [-0.1], tol="small")
    with pytest.raises(ValueError, match="`tol` needs"):
        solve_imbedding(pb, [1.0], [-0.1], tol=1e-3, closure="stencil")
    with pytest.raises(ValueError, match="fallback"):
        solve_imbedding(pb, [1.0], [-0.1], fallback="exact")
    # the accelerated backends carry orders 1 and 2 only: no ratio test, so `tol` is refused
    # there unless the bare estimate is accepted explicitly (checked before any compiling)
    with pytest.raises(ValueError, match="ratio test"):
        solve_imbedding(pb, [1.0], [-0.1], tol=1e-3, backend="numba", method="rk4", step=0.05)
