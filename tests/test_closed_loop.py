"""The closed loop: `invimbed.simulate`, and `solve_optimal`'s check of its value against
the true cost of its own feedback (closed forms, scipy's solve_ivp, solve_adjoint)."""

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import solve_ivp

import invimbed
from invimbed import simulate, solve_optimal


@pytest.fixture(scope="module")
def integrator():
    """dz/dt = u, R = (z^2 + u^2)/2: P(s) = tanh(s), Psi = -tanh(s) z, V = tanh(s) z^2/2."""
    t, z, u = sp.symbols("t z u")
    return invimbed.from_sympy(t, [z], [u], [u], running_loss=(z**2 + u**2) / 2)


@pytest.fixture(scope="module")
def cubic():
    """dz/dt = -z^3 + u, R = (z^2 + u^2)/2, T = 50 (z - 1)^2: a hypersensitive-type
    problem whose order-1 jet is far off at x = 1.5."""
    t, z, u = sp.symbols("t z u")
    return invimbed.from_sympy(t, [z], [u], [-z**3 + u], running_loss=(z**2 + u**2) / 2,
                               terminal_loss=50 * (z - 1)**2)


def cost_by_solve_ivp(problem_f, problem_R, terminal, policy, x, t0, q):
    """J of a feedback by scipy's solve_ivp on (z, int R), independent of invimbed."""
    def rhs(t, y):
        z = y[:-1][None]
        u = policy(np.array([[t]]), z)
        return np.concatenate([problem_f(z, u)[0], [problem_R(z, u)[0]]])

    sol = solve_ivp(rhs, (t0, q), np.concatenate([x, [0.0]]), method="DOP853", rtol=1e-11,
                    atol=1e-12)
    return sol.y[-1, -1] + terminal(sol.y[:-1, -1])


# -- simulate ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["RK45", "Radau"])
def test_simulate_linear_feedback_closed_form(integrator, method):
    """u = -z: z(t) = x e^-(t - t0), J = x^2 (1 - e^(-2h)) / 2, for every horizon and input."""
    x = np.array([[1.0], [-2.0]])
    h = np.array([0.5, 2.0])
    sim = simulate(integrator, x, lambda t, z: -z, h, method=method, rtol=1e-9, atol=1e-11,
                   n_points=11)
    assert sim.success, sim.message
    assert sim.strategy == ("ensemble" if method == "RK45" else "solve_ivp")
    exact = 0.5 * x[:, 0][None] ** 2 * (1 - np.exp(-2 * h))[:, None]
    np.testing.assert_allclose(sim.cost, exact, rtol=1e-7)
    assert sim.z.shape == (2, 2, 11, 1) and sim.control.shape == (2, 2, 11, 1)
    z_exact = x[None, :, None, 0] * np.exp(-(sim.t - sim.t[:, :1]))[:, None, :]
    np.testing.assert_allclose(sim.z[..., 0], z_exact, rtol=1e-6)
    np.testing.assert_allclose(sim.control, -sim.z)
    np.testing.assert_allclose(sim.terminal_cost, 0.0)


def test_simulate_open_loop_control_equals_solve_adjoint(integrator):
    """A piecewise-constant control: the cost equals solve_adjoint's value (which stops
    at the jumps too), and the trajectory's control follows the pieces."""
    ctrl = invimbed.PiecewiseConstant([-2.0, -1.0, 0.0], [[0.5], [-1.0]])
    depths = np.array([-2.0, -1.5, -0.5])
    sim = simulate(integrator, [0.3], ctrl, -depths, rtol=1e-10, atol=1e-12)
    ref = invimbed.solve_adjoint(integrator, [0.3], depths, control=ctrl, rtol=1e-10,
                                 atol=1e-12)
    np.testing.assert_allclose(sim.cost, ref.value, rtol=1e-8)
    np.testing.assert_allclose(sim.z[:, -1], ref.z, rtol=1e-8)
    t, u = sim.t[0], sim.control[0, :, 0]
    assert np.all(u[t < -1.0] == 0.5) and np.all(u[t > -1.0] == -1.0)
    single = simulate(integrator, [0.3], ctrl, 2.0)
    assert np.ndim(single.cost) == 0 and single.z.shape == (101, 1)


def test_simulate_reports_a_blow_up():
    """dz/dt = z^2 from z = 2 blows up at t0 + 1/2: NaN cost, success False, the message
    names the row; the shorter horizon is kept."""
    pb = invimbed.BolzaProblem(lambda t, z, u: z**2 + 0 * u, lambda t, z, u: 0 * z[..., 0])
    sim = simulate(pb, [2.0], lambda t, z: 0 * z, [0.25, 1.0])
    assert not sim.success and sim.status == -1
    assert np.isfinite(sim.cost[0]) and np.isnan(sim.cost[1])
    assert "depth p = -1" in sim.message and "1 of 2" in sim.message


def test_simulate_checks_its_arguments(integrator):
    fb = lambda t, z: -z  # noqa: E731
    with pytest.raises(ValueError, match="`horizon` must be >= 0"):
        simulate(integrator, [1.0], fb, -1.0)
    with pytest.raises(TypeError, match="`control` must be a feedback callable"):
        simulate(integrator, [1.0], "lqr", 1.0)
    with pytest.raises(ValueError, match="must return shape"):
        simulate(integrator, [1.0], lambda t, z: np.zeros(3), 1.0)
    with pytest.raises(TypeError, match="rtoll"):
        simulate(integrator, [1.0], fb, 1.0, rtoll=1e-3)
    with pytest.raises(ValueError, match="`n_points`"):
        simulate(integrator, [1.0], fb, 1.0, n_points=1)
    with pytest.raises(ValueError, match="`method`"):
        simulate(integrator, [1.0], fb, 1.0, method="rk4")
    with pytest.raises(ValueError, match="covers|range|outside"):
        simulate(integrator, [1.0], invimbed.PiecewiseConstant([-1.0, 0.0], [[1.0]]), 2.0)


# -- solve_optimal's closed-loop check -------------------------------------------------------
@pytest.mark.parametrize("linear_quadratic", [None, False])   # Riccati path, jet sweep
def test_closed_loop_value_agrees_on_lq_and_stays_a_success(integrator, linear_quadratic):
    s = np.array([0.5, 1.0, 2.0])
    res = solve_optimal(integrator, [1.0], -s, n_controls=1, control_affine=True, rtol=1e-9,
                        atol=1e-11, tol=1e-6, linear_quadratic=linear_quadratic,
                        closed_loop=True)
    assert res.success, res.message
    assert res.linear_quadratic is (linear_quadratic is None)
    np.testing.assert_allclose(res.value, np.tanh(s) / 2, rtol=1e-7)
    np.testing.assert_allclose(res.closed_loop_value, np.tanh(s) / 2, rtol=1e-6)
    assert res.converged.all()
    # the policy is the sweep's feedback: at (p_i, x) and, affine, around it
    pol = res.policy
    np.testing.assert_allclose(pol(-s, np.ones((3, 1))), res.feedback, rtol=1e-9)
    np.testing.assert_allclose(pol(-1.0, [[3.0]]), [[-3 * np.tanh(1.0)]], rtol=1e-6)
    with pytest.raises(ValueError, match="known for t in"):
        pol(-3.0, [[1.0]])
    # simulate runs the result's feedback, and its trajectory is the optimal one
    sim = simulate(integrator, [1.0], res, 2.0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sim.cost, np.tanh(2.0) / 2, rtol=1e-6)
    with pytest.raises(ValueError, match="must be those inputs"):
        simulate(integrator, [2.0], res, 1.0)


def test_closed_loop_check_refuses_a_wrong_value(cubic):
    """Order 1 on the cubic problem at x = 1.5 reports V < 0 for non-negative losses; its
    feedback's true cost (checked by scipy's solve_ivp) is positive: every depth refused."""
    depths = [-0.25, -0.5]
    res = solve_optimal(cubic, [1.5], depths, n_controls=1, order=1, estimate_error=False,
                        control_affine=True)
    assert np.all(res.value < 0)                           # impossible: the losses are >= 0
    assert not res.success and res.status == -2
    assert not res.converged.any()
    assert "Closed-loop check failed at depth p = -0.25" in res.message
    assert [w.code for w in res.warnings] == ["closed_loop_mismatch"]
    for p, J in zip(depths, res.closed_loop_value):
        ref = cost_by_solve_ivp(lambda z, u: -z**3 + u, lambda z, u: 0.5 * (z[:, 0]**2 + u[:, 0]**2),
                                lambda z: 50 * (z[0] - 1) ** 2, res.policy, [1.5], p, 0.0)
        assert J > 0
        np.testing.assert_allclose(J, ref, rtol=1e-4)
    # without the check the same sweep "succeeds": the check is what refuses it
    unchecked = solve_optimal(cubic, [1.5], depths, n_controls=1, order=1,
                              estimate_error=False, control_affine=True, closed_loop=False)
    assert unchecked.success and "closed_loop_value" not in unchecked
    with pytest.raises(ValueError, match="without a feedback `policy`"):
        simulate(cubic, [1.5], unchecked, 0.25)


def test_closed_loop_check_batched_inputs(integrator):
    x = np.array([[1.0], [-0.5]])
    res = solve_optimal(integrator, x, [-1.0, -0.5], n_controls=1, rtol=1e-10, atol=1e-12,
                        closed_loop=True)
    assert res.success, res.message
    assert res.closed_loop_value.shape == (2, 2)
    np.testing.assert_allclose(res.closed_loop_value, res.value, rtol=1e-6)
    # by default the exact Riccati path is not simulated, but its feedback is kept
    plain = solve_optimal(integrator, x, [-1.0, -0.5], n_controls=1)
    assert plain.linear_quadratic and "closed_loop_value" not in plain
    np.testing.assert_allclose(plain.policy([-1.0, -1.0], x, [0, 1]), plain.feedback[0],
                               rtol=1e-9)


# -- the order K - 1 jet, the time budget, progress -------------------------------------------
def test_default_call_is_not_stopped_by_the_lower_order_jet():
    """dz/dt = -z^3 + u, T = z^2 at x = 0.5, jet order 2, horizon 3: the order-1 jet blows
    up at p = -2.876, and a sweep carrying it (the ratio test's order K - 1) stops there.
    Without a `tol` the sweep carries orders 2 and 3 only, which reach the horizon in
    about 45 steps."""
    t, z, u = sp.symbols("t z u")
    pb = invimbed.from_sympy(t, [z], [u], [-z**3 + u], running_loss=(z**2 + u**2) / 2,
                             terminal_loss=z**2)
    res = solve_optimal(pb, [0.5], [-3.0], n_controls=1, order=2, control_affine=True,
                        max_steps=100)
    assert res.success, res.message
    assert np.isfinite(res.value[0]) and res.error_estimate.value[0] < 0.05
    np.testing.assert_allclose(res.closed_loop_value, res.value, rtol=0.1)


def test_time_budget_returns_what_was_reached(integrator):
    res = solve_optimal(integrator, [1.0], [0.0, -1.0], n_controls=1, max_time=1e-9,
                        linear_quadratic=False)
    assert not res.success and res.status == -1
    assert "time budget max_time = 1e-09 s was spent" in res.message
    assert np.isfinite(res.value[0]) and np.isnan(res.value[1])     # p = q is reached
    with pytest.raises(ValueError, match="`max_time`"):
        solve_optimal(integrator, [1.0], [-1.0], n_controls=1, max_time=-1.0)
    with pytest.raises(TypeError, match="`closed_loop`"):
        solve_optimal(integrator, [1.0], [-1.0], n_controls=1, closed_loop="yes")


def test_fixed_step_sweep_keeps_its_grid(integrator):
    """A fixed-step sweep's feedback grid lies on its own step ends: the fields do not
    change with the check (to rounding)."""
    kw = dict(n_controls=1, method="rk4", step=0.1, linear_quadratic=False)
    res = solve_optimal(integrator, [1.0], [-0.55, -1.0], **kw)
    ref = solve_optimal(integrator, [1.0], [-0.55, -1.0], closed_loop=False, **kw)
    assert res.success, res.message
    np.testing.assert_allclose(res.value, ref.value, rtol=1e-12)
    np.testing.assert_allclose(res.closed_loop_value, np.tanh([0.55, 1.0]) / 2, rtol=1e-5)


def test_progress_is_shown(integrator, capsys, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    res = solve_optimal(integrator, [1.0], [-1.0], n_controls=1, progress=True)
    assert res.success
    assert "solve_optimal: iteration 1" in capsys.readouterr().err
