"""`tol` raises the jet order only while it pays, and keeps what it has certified.

The order prediction (docs/accuracy.md, "How the sweep picks the jet order") stops a
divergent series at once and carries a convergent one to the tolerance; a higher order
that fails leaves the depths a lower order had certified; the fallback turns such a
result into a success when the exact solve succeeds; exact zeros pass a pure relative
tolerance; a result without an error estimate says so in its status.
"""

from functools import lru_cache

import numpy as np
import pytest

import invimbed
from invimbed import solve_adjoint, solve_imbedding
from invimbed._core.results.status import status_table

STATUS = status_table()    # {code: message}, the value of the deprecated invimbed.STATUS

sp = pytest.importorskip("sympy")

FIELDS = ("z", "value", "adjoint", "param_grad")


def within(res, ref, rtol, atol):
    """Per depth: every field within ``atol + rtol |ref|`` of the reference."""
    ok = np.ones(np.shape(res.value), bool)
    for k in FIELDS:
        bad = np.abs(res[k] - ref[k]) > atol + rtol * np.abs(ref[k])
        ok &= ~bad.reshape(ok.shape + (-1,)).any(-1)
    return ok


@lru_cache(maxsize=None)
def pendulum():
    """One problem for the tests of this file: its generated code is shared."""
    t, phi, v, u = sp.symbols("t phi v u")
    return invimbed.from_sympy(t, [phi, v], [u], [v, -sp.sin(phi) - 0.1 * v + u],
                               running_loss=0.1 * (1 - sp.cos(phi)) + 0.05 * u**2 / 2,
                               terminal_loss=1 - sp.cos(phi - 2.5) + v**2 / 2)


def lorenz():
    t = sp.Symbol("t")
    x, y, z = sp.symbols("x y z")
    f = [10 * (y - x), x * (28 - z) - y, x * y - sp.Rational(8, 3) * z]
    return invimbed.from_sympy(t, [x, y, z], [], f, None, (x**2 + y**2 + z**2) / 2)


def rough(monkeypatch):
    """``dz/dt = -z + sin(z) / 2 + z^3 / 3`` whose derivative provider gives infinite
    derivatives of ``f`` from order 6 on (a function that is only C^5 at ``x``): the
    jets up to order 2 (derivatives up to order 5) are served, the sweep of order 3
    fails at its first evaluation."""
    t, z = sp.symbols("t z")
    pb = invimbed.from_sympy(t, [z], [], [-z + sp.sin(z) / 2 + z**3 / 3], z**2 / 2, z**2 / 2)
    prov = pb.provider(1, 0)
    real = prov.taylor

    def taylor(which, t, z, theta, order, dth=0):
        out = np.array(real(which, t, z, theta, order, dth))
        if which == "f":
            out[..., 6:] = np.inf          # N = 1: the last axis is the degree
        return out

    monkeypatch.setattr(prov, "taylor", taylor)
    return pb


def test_pure_relative_tol_passes_an_exactly_zero_entry():
    """dz = -z + u, a two-piece control on [-1, 0], depth -0.2: the first piece's gradient
    is exactly 0 at every order, and 0 is within any relative tolerance of 0."""
    t, z, u = sp.symbols("t z u")
    pb = invimbed.from_sympy(t, [z], [u], [-z + u], (z**2 + u**2) / 2, z**2 / 2)
    ctrl = invimbed.PiecewiseConstant(knots=[-1.0, -0.5, 0.0], values=[[0.3], [-0.4]])
    res = solve_imbedding(pb, [0.7], [-0.2], control=ctrl, tol=(1e-2, 0.0), max_order=2)
    ref = solve_adjoint(pb, [0.7], [-0.2], control=ctrl, rtol=1e-12, atol=1e-14)
    assert ref.param_grad[0, 0] == 0.0 and res.param_grad[0, 0] == 0.0
    assert res.success and res.status == 0 and res.converged.all(), res.message
    assert res.order == 1 and res.orders_run == [1]
    assert within(res, ref, 1e-2, 1e-12).all()


def test_prediction_stops_a_divergent_series_at_once():
    """Lorenz-63 at s = 1 (ten times its time scale): the series grows from order to
    order. The sweep stops after the first order instead of running to max_order."""
    res = solve_imbedding(lorenz(), [1.0, 1.0, 20.0], [-1.0], tol=1e-3, max_order=6)
    assert res.orders_run == [1] and res.order == 1
    assert (res.success, res.status) == (False, -2) and not res.converged[0]
    assert "does not converge" in res.message and "depth p = -1" in res.message
    assert np.isfinite(res.z).all()          # the fields are returned, approximate


def test_prediction_reaches_the_tolerance_where_the_series_converges():
    """A shallow depth is carried to the tolerance; a deep one whose series cannot reach it
    by max_order is stopped at once, without holding the shallow one back."""
    pb, x, w = pendulum(), [0.5, 0.5], invimbed.Constant([0.5])
    depths = -np.array([0.1, 0.3, 3.0])
    res = solve_imbedding(pb, x, depths, control=w, tol=1e-4, max_order=4)
    ref = solve_adjoint(pb, x, depths, control=w, rtol=1e-12, atol=1e-14)
    assert list(res.converged) == [True, True, False] and res.status == -2
    assert within(res, ref, 1e-4, 1e-4)[:2].all()          # certified means within tol
    assert res.orders_run == list(range(1, res.order + 1)) and 1 < res.order < 4
    assert res.depth_order[2] == 1                         # stopped after the first order
    assert res.depth_order[0] <= res.depth_order[1] == res.order
    assert "depth p = -3" in res.message and "max_order" in res.message


def test_the_orders_no_pair_is_predicted_to_converge_at_are_skipped():
    """s = 1, tol = 1e-5: after order 1 the series predicts order 5; the sweep goes there
    at once instead of through orders 2, 3 and 4, and what it certifies is within tol."""
    pb, x, w = pendulum(), [0.5, 0.5], invimbed.Constant([0.5])
    res = solve_imbedding(pb, x, [-1.0], control=w, tol=1e-5)
    ref = solve_adjoint(pb, x, [-1.0], control=w, rtol=1e-12, atol=1e-14)
    assert res.success and res.converged[0], res.message
    assert res.orders_run == [1, res.order] and res.order >= 4
    assert within(res, ref, 1e-5, 1e-5).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_failed_higher_order_keeps_what_a_lower_order_certified(monkeypatch):
    pb, depths, tol = rough(monkeypatch), -np.array([0.05, 0.1, 0.2, 0.4]), 1e-6
    low = solve_imbedding(pb, [1.0], depths, order=2, max_order=2, tol=tol)
    assert list(low.converged) == [True, True, False, False]   # order 2 certifies two
    high = solve_imbedding(pb, [1.0], depths, order=3, max_order=3, tol=tol)
    assert high.status == -1 and np.isnan(high.z).all()        # order 3 fails at once
    res = solve_imbedding(pb, [1.0], depths, order=2, max_order=3, tol=tol)
    ref = solve_adjoint(pb, [1.0], depths, rtol=1e-12, atol=1e-14)
    assert list(res.converged) == [True, True, False, False] and res.status == -2
    assert res.orders_run == [2, 3] and list(res.depth_order) == [2, 2, 2, 2]
    assert within(res, ref, tol, tol)[:2].all() and np.isfinite(res.z).all()
    assert "higher_order_failed" in [w.code for w in res.warnings]
    assert "depth p = -0.2" in res.message and "order 3" in res.message
    # with the fallback (priced dear, so that order 3 is tried), the exact solve of the
    # last depths makes it a success
    fake_costs(monkeypatch, sweep=1e-3, probe=1.0)
    fb = solve_imbedding(pb, [1.0], depths, order=2, max_order=3, tol=tol,
                         fallback="adjoint")
    assert fb.success and fb.status == 0, fb.message
    assert list(fb.exact_fallback) == [False, False, True, True]
    assert within(fb, ref, tol, tol).all()
    codes = [w.code for w in fb.warnings]
    assert "higher_order_failed" in codes and "fallback_adjoint" in codes


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fallback_after_a_failed_sweep_is_a_success_when_the_exact_solve_succeeds(
        monkeypatch):
    """The sweep of the only order fails at its first evaluation; the exact ensemble
    recomputes every depth, so the result is a success, with the failure in warnings."""
    pb, depths = rough(monkeypatch), -np.array([0.05, 0.1])
    res = solve_imbedding(pb, [1.0], depths, order=3, max_order=3, tol=1e-6,
                          fallback="adjoint")
    ref = solve_adjoint(pb, [1.0], depths, rtol=1e-12, atol=1e-14)
    assert res.success and res.status == 0, res.message
    assert res.exact_fallback.all() and within(res, ref, 1e-6, 1e-6).all()
    assert "sweep_failed" in [w.code for w in res.warnings]


def fake_costs(monkeypatch, sweep, probe, probe_ok=True):
    """Make the measured cost of every sweep ``sweep`` seconds and of the exact probe
    ``probe`` seconds (the rule, not the machine, is under test); ``probe_ok=False``
    makes the probe's exact solve fail."""
    from invimbed._core.sweep import orders

    real = orders._timed

    def timed(kind, fn, *args, **kw):
        out, _ = real(kind, fn, *args, **kw)
        if kind == "probe":
            return out and probe_ok, probe
        return out, sweep

    monkeypatch.setattr(orders, "_timed", timed)


def test_fallback_hands_over_at_once_where_the_exact_solve_is_cheaper(monkeypatch):
    pb, x, w = pendulum(), [0.5, 0.5], invimbed.Constant([0.5])
    depths = -np.array([0.1, 0.3])
    ref = solve_adjoint(pb, x, depths, control=w, rtol=1e-12, atol=1e-14)
    fake_costs(monkeypatch, sweep=1.0, probe=1e-3)
    cheap = solve_imbedding(pb, x, depths, control=w, tol=1e-5, fallback="adjoint")
    assert cheap.orders_run == [1] and cheap.success, cheap.message
    assert cheap.exact_fallback.all() and within(cheap, ref, 1e-5, 1e-5).all()
    # the same call when the exact solve is dear: the sweep raises the order instead
    fake_costs(monkeypatch, sweep=1e-3, probe=1.0)
    dear = solve_imbedding(pb, x, depths, control=w, tol=1e-5, fallback="adjoint")
    assert len(dear.orders_run) > 1 and dear.success, dear.message
    assert not dear.exact_fallback.any() and within(dear, ref, 1e-5, 1e-5).all()
    # an exact solve that fails is no reason to stop raising, however cheap
    fake_costs(monkeypatch, sweep=1.0, probe=1e-3, probe_ok=False)
    failing = solve_imbedding(pb, x, depths, control=w, tol=1e-5, fallback="adjoint")
    assert failing.orders_run == dear.orders_run and failing.success


@pytest.mark.parametrize("kw", [dict(closure="stencil"), dict(closure="crop"),
                                dict(estimate_error=False), dict(method="disc")])
def test_a_result_without_an_estimate_says_so_in_its_status(kw):
    pb = invimbed.BolzaProblem(lambda t, z, th: -z + 0.1 * z**2,
                               terminal_loss=lambda z: 0.5 * np.sum(z**2, 1), vectorized=True)
    res = solve_imbedding(pb, [1.0], [-0.1, -0.2], **kw)
    assert res.status == 1 and 1 in STATUS and res.converged is None
    assert res.success            # every depth reached with finite values, nothing more
    assert "no error estimate" in res.message and "not checked" in res.message


# -- a raised order on a stiff problem (Robertson's kinetics with BDF) -----------------------
def test_a_raised_sweep_whose_steps_collapse_is_stopped_early():
    """`raise_budget`: a raised order's sweep ends after its budget of steps, saying so
    (the order-5 sweep of Robertson's kinetics with BDF crept on at steps of 1e-9 for
    minutes into NaN)."""
    from invimbed._core.integrators.scipy_ivp import integrate_scipy

    out = integrate_scipy(lambda p, y, piece=None: np.cos(1e4 * p) + 0.0 * y,
                          np.array([0.0]), 0.0, np.array([-1.0]), np.empty(0),
                          lambda a, b: None, method="RK45", max_steps=5000, raise_budget=100)
    assert not out.success and out.extra["nsteps"] == 100
    assert "a raised order may take" in out.message and "depth p = " in out.message
    # steps far too small for the budget: stopped once 50 steps after a tenth of it
    # project more than `COLLAPSE` times it
    fast = integrate_scipy(lambda p, y, piece=None: np.cos(1e6 * p) + 0.0 * y,
                           np.array([0.0]), 0.0, np.array([-1.0]), np.empty(0),
                           lambda a, b: None, method="RK45", max_steps=5000, raise_budget=2000)
    assert not fast.success and fast.extra["nsteps"] == 250
    assert "steps collapsed" in fast.message


def test_the_raised_orders_get_a_step_budget_from_the_first(monkeypatch):
    """Every raised order's sweep gets `RAISE_STEPS` times the starting order's steps (at
    least `RAISE_STEPS_MIN`) as its projected budget; the starting order none."""
    from invimbed._core.sweep import orders
    from invimbed._core.integrators import methods

    seen = []
    real = methods.integrate_scipy

    def spy(*args, **kw):
        out = real(*args, **kw)
        seen.append((kw.get("raise_budget"), out.extra["nsteps"]))
        return out

    monkeypatch.setattr(methods, "integrate_scipy", spy)
    res = solve_imbedding(pendulum(), [0.5, 0.5], [-1.0], control=invimbed.Constant([0.5]),
                          tol=1e-5)
    assert res.success and len(res.orders_run) > 1
    (first, steps), raised = seen[0], seen[1:]
    assert first is None and len(raised) == len(res.orders_run) - 1
    want = max(orders.RAISE_STEPS * steps, orders.RAISE_STEPS_MIN)
    assert all(budget == want for budget, _ in raised)


def jet_closure(control):
    """A jet closure of order 2 with its estimate, ratio test and look-ahead, on two
    inputs of a 2-state problem without a control, with a constant one or with two pieces."""
    from invimbed._core.setup.arguments import prepare
    from invimbed._core.closures import JetClosure
    from invimbed._core.integrators import ALL_METHODS

    t, a, b, u, c = sp.symbols("t a b u c")
    if control == "none":
        pb = invimbed.from_sympy(t, [a, b], [], [b, -sp.sin(a) - 0.3 * b], a ** 2,
                                 sp.cos(a - b) + b ** 4)
        ctrl = None
    else:
        pb = invimbed.from_sympy(t, [a, b], [u, c], [b, -sp.sin(a) - c * b + u],
                                 a ** 2 * u + b ** 2 * c, sp.cos(a - b) + b ** 4)
        ctrl = (invimbed.Constant([0.3, 0.2]) if control == "constant" else
                invimbed.PiecewiseConstant([-1, -0.5, 0], [[0.3, 0.2], [0.1, 0.4]]))
    setup = prepare(pb, np.array([[0.5, 0.3], [0.1, -0.2]]), [-0.7], ctrl, "BDF", 1e-6, 1e-9,
                    None, ALL_METHODS)
    return JetClosure(setup.provider, setup.control, setup.x, setup.q, order=2,
                      estimate_error=True, ratio_test=True, look_ahead=True)


@pytest.mark.parametrize("control", ["none", "constant", "pieces"])
def test_the_jet_jacobian_sparsity_covers_its_jacobian(control):
    """`JetClosure.jacobian_sparsity` (given to BDF and Radau) holds every nonzero of the
    differenced Jacobian of the jet's right-hand side: orders, inputs and components
    apart, W coupled to V."""
    clo = jet_closure(control)
    y = clo.initial_state() + np.random.default_rng(0).normal(size=clo.layout.size) * 0.1
    f0, n = clo.rhs(-0.7, y), y.size
    jac = np.stack([(clo.rhs(-0.7, y + 1e-6 * np.eye(n)[j]) - f0) / 1e-6 for j in range(n)], 1)
    pattern = clo.jacobian_sparsity().toarray() != 0
    assert not np.any((np.abs(jac) > 1e-9) & ~pattern)
    assert pattern.sum() < 0.2 * n * n                     # and it is sparse


@pytest.mark.parametrize("control", ["none", "pieces"])
@pytest.mark.parametrize("entries", [None, 50])
def test_the_jet_rhs_of_columns_is_the_rhs_of_each_column(control, entries, monkeypatch):
    """`JetClosure.rhs` of states in columns (size, k), scipy's ``vectorized`` form, is the
    right-hand side of each column (the columns stacked on the batch axis: equal up to
    the order of numpy's sums), also where the columns go in chunks
    (`COLUMN_ENTRIES`), and of one column exactly the plain evaluation."""
    from invimbed._core.closures import jet

    if entries is not None:                 # several chunks, the last one shorter
        monkeypatch.setattr(jet, "COLUMN_ENTRIES", entries * jet_closure(control).layout.size
                            // 20)
    clo = jet_closure(control)
    rng = np.random.default_rng(1)
    Y = clo.initial_state()[:, None] + 0.1 * rng.normal(size=(clo.layout.size, 7))
    got = clo.rhs(-0.3, Y)
    want = np.stack([clo.rhs(-0.3, Y[:, j].copy()) for j in range(7)], 1)
    assert got.shape == Y.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    np.testing.assert_array_equal(clo.rhs(-0.3, Y[:, :1]), want[:, :1])


def test_the_implicit_methods_difference_the_jet_jacobian_in_one_call(monkeypatch):
    """BDF and Radau get the jet's right-hand side in scipy's ``vectorized`` form: each
    finite-difference Jacobian is one call with every column group (it was one call per
    group: 4 of the 10 s of a deep Robertson sweep); ``nfev`` still counts
    states, one per column, and the result is the per-column one's within rounding."""
    from invimbed._core.closures import jet

    real, widths = jet.JetClosure.rhs_columns, []

    def record(self, coef, Y):
        widths.append(Y.shape[1])
        return real(self, coef, Y)

    monkeypatch.setattr(jet.JetClosure, "rhs_columns", record)
    pb = lorenz()
    ref = solve_adjoint(pb, [1.0, 1.0, 20.0], [-0.02], rtol=1e-11, atol=1e-12)
    for method in ("BDF", "Radau"):
        widths.clear()
        res = solve_imbedding(pb, [1.0, 1.0, 20.0], [-0.02], method=method, order=2)
        assert res.success, res.message
        assert max(widths) > 1 and res.nfev == sum(widths)
        for k in ("z", "value", "adjoint"):
            np.testing.assert_allclose(res[k], ref[k], rtol=1e-4, atol=1e-6)



def test_the_implicit_methods_take_the_jet_coefficients_once_per_depth(monkeypatch):
    """The jet's Taylor coefficients of ``f`` and ``R`` are taken at ``(p, x)``, not at
    the state: BDF's Newton iterations and Jacobian columns at one ``p`` get them once.
    (Each evaluation took them afresh: at order 5 on Robertson's kinetics they were 47 of
    70 s of the sweep.)"""
    pb = lorenz()
    prov = pb.provider(3, 0)
    real, seen = prov.taylor, []

    def taylor(which, t, *args, **kw):
        seen.append((which, float(t)))
        return real(which, t, *args, **kw)

    monkeypatch.setattr(prov, "taylor", taylor)
    res = solve_imbedding(pb, [1.0, 1.0, 20.0], [-0.02], method="BDF", order=2)
    assert res.success, res.message
    depths = {t for which, t in seen if which == "f"}
    # f and R once per p (+ T at q, and p = q again after scipy's first-step probe)
    assert len(seen) <= 2 * len(depths) + 3
    assert res.nfev > 2 * len(depths)        # each evaluation took both before: 2 nfev + 1


def _count_coefficients(monkeypatch):
    """The depths ``p`` at which the jet closure takes the Taylor coefficients of ``f``
    and ``R`` (`JetClosure.coefficients_at`), recorded."""
    from invimbed._core.closures.jet import JetClosure
    from invimbed._core.closures.stencil import StencilClosure

    seen = []

    def counted(real):
        def coefficients_at(self, p, theta, jac):
            seen.append(float(p))
            return real(self, p, theta, jac)
        return coefficients_at

    for cls in (JetClosure, StencilClosure):
        monkeypatch.setattr(cls, "coefficients_at", counted(cls.coefficients_at))
    return seen


@pytest.mark.parametrize("control", ["none", "piecewise", "given derivatives", "stencil"])
def test_a_time_free_problem_takes_the_jet_coefficients_once_per_control_piece(
        control, monkeypatch):
    """f and R without t, a control constant on its pieces: the coefficients at ``x`` are
    the same at every p of a piece, taken once per piece (RK45 evaluates at many p), and
    the fields are bit for bit those of taking them at every p. Also where the problem
    gives derivatives (the user's callables, the rest traced: `CompletedProvider`), and
    for the stencil closure's values of f and R at its points."""
    from invimbed._core.sweep import imbedding

    kw = dict(closure="stencil") if control == "stencil" else dict(order=2)
    if control == "none":
        pb, x, ctrl, pieces = lorenz(), [1.0, 1.0, 20.0], None, 1
    elif control == "given derivatives":
        from problems import lq_problem

        rng = np.random.default_rng(3)
        pb = lq_problem(A=-np.eye(2) + 0.3 * rng.normal(size=(2, 2)), B=rng.normal(size=(2, 1)),
                        Q=np.eye(2), Rth=np.eye(1), S=0.1 * rng.normal(size=(2, 1)),
                        PT=2 * np.eye(2))
        x, pieces = [0.8, -0.3], 2
        ctrl = invimbed.PiecewiseConstant([-0.6, -0.25, 0.0], [[0.3], [-0.2]])
    else:
        pb, x, pieces = pendulum(), [0.8, -0.3], 2
        ctrl = invimbed.PiecewiseConstant([-0.6, -0.25, 0.0], [[0.3], [-0.2]])
    depths = [-0.02] if control == "none" else [-0.1, -0.4]
    seen = _count_coefficients(monkeypatch)
    res = solve_imbedding(pb, x, depths, control=ctrl, method="RK45", **kw)
    once = len(seen)
    monkeypatch.setattr(imbedding, "time_free", lambda problem, prov: False)
    seen.clear()
    ref = solve_imbedding(pb, x, depths, control=ctrl, method="RK45", **kw)
    assert res.success and ref.success, (res.message, ref.message)
    assert once == pieces < res.nfev / 4
    assert len(set(seen)) > res.nfev / 4       # at every p without it
    for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
        np.testing.assert_array_equal(res[k], ref[k], err_msg=k)
    if control != "stencil":     # the stencil has no estimate
        np.testing.assert_array_equal(res.error_estimate["value"],
                                      ref.error_estimate["value"])


@pytest.mark.parametrize("given", [False, True], ids=["sympy", "given derivatives"])
def test_a_problem_that_reads_t_takes_the_jet_coefficients_at_every_p(given, monkeypatch):
    """``f`` with ``sin(t)``: the coefficients change with p and are taken at each; also
    where the problem gives its derivatives (and the rest is traced)."""
    t, z = sp.symbols("t z")
    if given:
        pb = invimbed.BolzaProblem(
            lambda t, z, th: (-1 + 0.5 * np.sin(3 * t)) * z,
            lambda t, z, th: 0.5 * z[..., 0] ** 2, lambda z: 0.5 * z[..., 0] ** 2,
            vectorized=True,
            derivatives={"f_z": lambda t, z, th: np.full((len(z), 1, 1),
                                                         -1 + 0.5 * np.sin(3 * t))})
    else:
        pb = invimbed.from_sympy(t, [z], [], [-z + 0.5 * sp.sin(3 * t) * z], z**2 / 2, z**2 / 2)
    seen = _count_coefficients(monkeypatch)
    res = solve_imbedding(pb, [0.7], [-0.5], method="RK45", order=2)
    assert res.success, res.message
    assert len(set(seen)) > res.nfev / 4
