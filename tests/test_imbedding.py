"""solve_imbedding against closed forms, the adjoint reference and finite differences."""

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import invimbed
from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_adjoint, solve_imbedding
from problems import lq_closed_form, lq_matrices, lq_problem, pendulum_functions, vanderpol_functions

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
TIGHT = dict(rtol=1e-10, atol=1e-12)
CLOSURES = [dict(closure="jet"), dict(closure="stencil", difference="central"),
            dict(closure="stencil", difference="forward")]


def assert_fields_close(got, want, rtol, fields=FIELDS, what=""):
    """Relative error per field, measured against the field's largest entry (so that
    entries that happen to be ~0 do not divide by zero)."""
    for k in fields:
        a, b = np.asarray(got[k], float), np.asarray(want[k], float)
        assert a.shape == b.shape, (k, a.shape, b.shape)
        scale = max(np.abs(b).max(initial=0.0), 1e-300)
        err = np.abs(a - b).max(initial=0.0) / scale
        assert err <= rtol, f"{what}{k}: relative error {err:.3g} > {rtol}"


# -- linear dynamics, quadratic losses: exact closures ---------------------------------
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=lq_matrices(), seed=st.integers(0, 2 ** 16), batch=st.sampled_from([None, 3]))
@example(data={"A": np.array([[-1.0]]), "B": np.zeros((1, 0)), "Q": np.array([[0.0]]),
               "Rth": np.zeros((0, 0)), "S": np.zeros((1, 0)), "PT": np.array([[3.8147e-06]])},
         seed=0, batch=None)          # fields ~1e-6: the reference needs a tiny atol
@example(data={"A": np.array([[-1.0]]), "B": np.zeros((1, 0)), "Q": np.array([[0.0]]),
               "Rth": np.zeros((0, 0)), "S": np.zeros((1, 0)), "PT": np.array([[1.42e-14]])},
         seed=0, batch=None)          # fields ~1e-14
def test_lq_all_fields_equal_closed_form_and_adjoint(data, seed, batch):
    """Every closure (`CLOSURES`) on each example, against one closed form and one
    adjoint reference per example (the examples are the same for every closure)."""
    rng = np.random.default_rng(seed)
    N, M = data["B"].shape
    x = rng.uniform(-1, 1, (N,) if batch is None else (batch, N))
    w = rng.uniform(-1, 1, M)
    depths = np.array([-0.25, -0.9, -1.7])
    pb = lq_problem(**data)
    ctrl = Constant(w) if M else None
    closed = [lq_closed_form(**data, x=x, w=w, p=p) for p in depths]
    closed = {k: np.stack([c[k] for c in closed]) for k in FIELDS}
    # the reference's absolute tolerance below the smallest field's scale: the fields can
    # be tiny (a terminal weight of 1e-14 was drawn), where atol=1e-12 alone would let the
    # reference, not the imbedding, miss the 1e-7 relative target
    scales = [np.abs(closed[k]).max() for k in ("value", "adjoint", "param_grad")
              if closed[k].size and np.abs(closed[k]).max() > 0]
    ref = solve_adjoint(pb, x, depths, control=ctrl, rtol=1e-10,
                        atol=1e-12 * min([1.0] + scales))
    for opts in CLOSURES:
        res = solve_imbedding(pb, x, depths, control=ctrl, **opts, **TIGHT)
        assert res.success, (opts, res.message)
        assert_fields_close(res, closed, 1e-7, what=f"{opts}: imbedding vs closed form: ")
        assert_fields_close(res, ref, 1e-7, what=f"{opts}: imbedding vs adjoint: ")


def test_lq_piecewise_constant_control_matches_adjoint():
    rng = np.random.default_rng(3)
    N, M = 3, 2
    data = dict(A=-np.eye(N) + 0.2 * rng.normal(size=(N, N)), B=rng.normal(size=(N, M)),
                Q=np.eye(N), Rth=np.eye(M), S=0.1 * rng.normal(size=(N, M)), PT=2 * np.eye(N))
    pb = lq_problem(**data)
    ctrl = PiecewiseConstant([-2.0, -1.2, -0.5, 0.0], rng.normal(size=(3, M)))
    depths = [-1.9, -1.2, -0.7, -0.5, -0.1]
    x = rng.normal(size=N)
    ref = solve_adjoint(pb, x, depths, control=ctrl, **TIGHT)
    for opts in CLOSURES:
        res = solve_imbedding(pb, x, depths, control=ctrl, **opts, **TIGHT)
        assert_fields_close(res, ref, 1e-7, what=f"{opts}: ")


# -- nonlinear problems: the jet's O(s^3) truncation -----------------------------------
def pendulum():
    fns = pendulum_functions()
    return fns.problem(), Constant([0.4, 0.2]), np.array([0.8, -0.3])


def vanderpol():
    fns = vanderpol_functions()
    return fns.problem(), Constant([1.0, 0.3]), np.array([0.9, 0.4])


def pendulum_quadratic_terminal():
    """Pendulum with a quadratic terminal loss: D^3 T = 0, so the adjoint is O(s^3) too."""
    def f(t, z, th):
        return np.stack([z[..., 1], -np.sin(z[..., 0]) - 0.2 * z[..., 1]], -1)

    def T(z):
        return 0.5 * (z[..., 0] - 0.3) ** 2 + 0.25 * z[..., 1] ** 2

    return BolzaProblem(f, terminal_loss=T, vectorized=True), None, np.array([0.8, -0.4])


S = 0.05 * 2.0 ** np.arange(4)     # depths s = q - p from 0.05 to 0.4


# one sweep and one reference per (problem, tolerances) for the module, read by the
# tests below (a result is never edited)
@cache
def jet_errors(make, **kw):
    """The jet's true errors at the depths `S`. The error law and the estimate are under
    test, not the verdict: the estimate alone judges (`ratio_test=False`), since the
    ratio test, default without `tol` too, refuses Van der Pol's s = 0.2 and 0.4 at order
    1 (d_1 / d_0 is 1.05 and 1.37 there, though the errors are 0.14 and 0.71 of 10%)."""
    pb, ctrl, x = make()
    kw.setdefault("ratio_test", False)
    res = solve_imbedding(pb, x, -S, control=ctrl, **kw)
    ref = solve_adjoint(pb, x, -S, control=ctrl, rtol=1e-12, atol=1e-14)
    assert res.success and ref.success
    err = {k: np.abs(res[k] - ref[k]).reshape(S.size, -1).max(1, initial=0.0) for k in FIELDS}
    return res, err


def slope(err):
    return np.polyfit(np.log(S), np.log(err), 1)[0]


@pytest.mark.parametrize("make", [pendulum, vanderpol])
def test_jet1_error_is_third_order_in_depth(make):
    _, err = jet_errors(make, rtol=1e-11, atol=1e-13)
    for k in ("z", "value"):
        assert 2.5 <= slope(err[k]) <= 3.5, (k, slope(err[k]), err[k])


@pytest.mark.parametrize("make", [pendulum, vanderpol])
def test_jet1_adjoint_is_second_order_when_terminal_loss_is_not_quadratic(make):
    """V is carried to order 2, so D^3 T(x) != 0 is dropped from the start: the adjoint's
    error is O(s^2) (documented in "Choosing a closure")."""
    _, err = jet_errors(make, rtol=1e-11, atol=1e-13)
    for k in ("adjoint", "depth_grad"):    # dJ/dp = -(Lam . Phi + R) inherits Lam's order
        assert 1.5 <= slope(err[k]) <= 2.5, (k, slope(err[k]))


def test_jet1_adjoint_is_third_order_for_quadratic_terminal_loss():
    """With D^3 T = 0 the dropped V_3 starts at 0: z, adjoint and dJ/dp are O(s^3), and the
    value, integrated once more, O(s^4)."""
    _, err = jet_errors(pendulum_quadratic_terminal, rtol=1e-11, atol=1e-13)
    for k in ("z", "adjoint", "depth_grad"):
        assert 2.5 <= slope(err[k]) <= 3.5, (k, slope(err[k]))
    assert 3.5 <= slope(err["value"]) <= 4.5, slope(err["value"])


@pytest.mark.parametrize("make", [pendulum, vanderpol])
def test_tighter_tolerance_does_not_remove_the_closure_error(make):
    _, loose = jet_errors(make, rtol=1e-6, atol=1e-9)
    _, tight = jet_errors(make, rtol=1e-11, atol=1e-13)
    for k in ("z", "value", "adjoint"):
        assert tight[k][-1] > 1e3 * 1e-11 * 1e2       # the error is the closure's, not the solver's
        np.testing.assert_allclose(loose[k][-1], tight[k][-1], rtol=0.05)


@pytest.mark.parametrize("make", [pendulum, vanderpol, pendulum_quadratic_terminal])
def test_error_estimate_is_within_factor_two_of_the_error(make):
    """Documented factor: for depths s <= 0.4, 0.5 <= estimate / error <= 2."""
    res, err = jet_errors(make, rtol=1e-11, atol=1e-13)
    for k in ("z", "value", "adjoint"):
        est = res.error_estimate[k].reshape(S.size, -1).max(1, initial=0.0)
        ratio = est / err[k]
        assert np.all((0.5 <= ratio) & (ratio <= 2.0)), (k, ratio)


def test_error_estimate_is_zero_for_affine_dynamics():
    rng = np.random.default_rng(0)
    data = dict(A=-np.eye(2) + 0.3 * rng.normal(size=(2, 2)), B=np.ones((2, 1)), Q=np.eye(2),
                Rth=np.eye(1), S=np.zeros((2, 1)), PT=np.eye(2))
    res = solve_imbedding(lq_problem(**data), [0.3, -0.2], [-1.0, -2.0], control=Constant([1.0]),
                          **TIGHT)
    for k in ("z", "value", "adjoint", "param_grad"):
        assert np.abs(res.error_estimate[k]).max() < 1e-9


# -- finite differences of J in x, w, p --------------------------------------------------
def fd(fun, u, h):
    u = np.asarray(u, float)
    g = np.empty(u.size)
    for i in range(u.size):
        e = np.zeros(u.size)
        e[i] = h
        g[i] = (fun(u + e) - fun(u - e)) / (2 * h)
    return g


@cache            # read by both closures' parametrisations below
def jet_at(make, p):
    pb, ctrl, x = make()
    return solve_imbedding(pb, x, [p], control=ctrl, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("make", [pendulum, vanderpol])
@pytest.mark.parametrize("opts", [dict(closure="jet"), dict(closure="stencil")])
def test_gradients_are_finite_differences_of_the_value(make, opts):
    """At depth s = 0.2 the closure error (~1e-5) is far above the FD error (~1e-8):
    depth_grad is the exact p-derivative of the swept value (the sweep is an ODE in p);
    adjoint and param_grad equal the FD gradient of the swept value within the closure's
    own error (3 x the jet's estimate + 1e-6)."""
    pb, ctrl, x = make()
    p = -0.2
    kw = dict(rtol=1e-11, atol=1e-13, **opts)
    jet = jet_at(make, p)                 # the jet's solve at p (closure="jet" is the default)
    res = jet if opts["closure"] == "jet" else solve_imbedding(pb, x, [p], control=ctrl, **kw)
    # the stencil has no estimate of its own; its truncation is the jet-1 one (docs): the
    # jet's estimate judges both
    est = jet.error_estimate
    tol = 1e-6 + 3 * max(np.abs(est.adjoint).max(), np.abs(est.param_grad).max())
    h = 1e-5
    # the points x +- h e_i in one batched solve, p +- h as two depths of one sweep
    X = np.concatenate([x + h * np.eye(x.size), x - h * np.eye(x.size)])
    Jx = solve_imbedding(pb, X, [p], control=ctrl, **kw).value[0]
    Jp = solve_imbedding(pb, x, [p + h, p - h], control=ctrl, **kw).value

    def J_w(ww):
        return solve_imbedding(pb, x, [p], control=ctrl.with_params(ww), **kw).value[0]

    np.testing.assert_allclose(res.adjoint[0], (Jx[:x.size] - Jx[x.size:]) / (2 * h), atol=tol)
    np.testing.assert_allclose(res.param_grad[0], fd(J_w, ctrl.w, h), atol=tol)
    np.testing.assert_allclose(res.depth_grad[0], (Jp[0] - Jp[1]) / (2 * h), rtol=1e-6, atol=1e-7)


def test_depth_gradient_is_not_the_papers_recursion():
    """docs/theory.md, "The imbedded fields": dz/dt = 0.7 z, T = z^2/2, q = 0, x = 1.3, p = -1."""
    pb = BolzaProblem(lambda t, z, th: 0.7 * z, terminal_loss=lambda z: 0.5 * float(z @ z))
    res = solve_imbedding(pb, [1.3], [-1.0], **TIGHT)
    exact = -0.7 * 1.3 ** 2 * np.exp(1.4)                # d/dp of 1/2 x^2 e^{2a(q-p)}
    assert res.depth_grad[0] == pytest.approx(exact, rel=1e-8)
    assert res.depth_grad[0] == pytest.approx(-4.797, abs=5e-4)
    assert abs(res.depth_grad[0] + 8.155) > 3


# -- conventions ---------------------------------------------------------------------------
def test_depth_order_and_batch_shapes():
    pb, ctrl, x = pendulum()
    inc = np.array([-1.0, -0.6, -0.2, 0.0])
    a = solve_imbedding(pb, x, inc, control=ctrl)
    b = solve_imbedding(pb, x, inc[::-1], control=ctrl)
    for k in FIELDS:
        np.testing.assert_allclose(a[k], b[k][::-1], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(a.depths, inc)
    assert a.z.shape == (4, 2) and a.value.shape == (4,) and a.param_grad.shape == (4, 2)
    # the depth p = q is the trivial network
    np.testing.assert_allclose(a.z[-1], x)
    xs = np.stack([x, x + 0.1, x - 0.2])
    c = solve_imbedding(pb, xs, inc, control=ctrl)
    assert c.z.shape == (4, 3, 2) and c.value.shape == (4, 3) and c.depth_grad.shape == (4, 3)
    assert c.error_estimate.z.shape == (4, 3, 2)
    single = solve_imbedding(pb, xs[1], inc, control=ctrl)
    np.testing.assert_allclose(c.value[:, 1], single.value, rtol=1e-6)


def test_sweep_work_does_not_grow_with_the_number_of_depths():
    pb, ctrl, x = pendulum()
    few = solve_imbedding(pb, x, np.linspace(0, -1, 8), control=ctrl)
    many = solve_imbedding(pb, x, np.linspace(0, -1, 128), control=ctrl)
    assert many.nfev <= 1.1 * few.nfev
    # the per-depth loop's work grows with the depths (the ensemble's calls do not: it
    # solves every depth as a row of one vectorised solve)
    ref_few = solve_adjoint(pb, x, np.linspace(0, -1, 8), control=ctrl, strategy="per_depth")
    ref_many = solve_adjoint(pb, x, np.linspace(0, -1, 32), control=ctrl,
                             strategy="per_depth")
    assert ref_many.nfev > 3 * ref_few.nfev


@pytest.mark.parametrize("method", ["RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA"])
def test_every_scipy_method(method):
    rng = np.random.default_rng(1)
    data = dict(A=-np.eye(2) + 0.3 * rng.normal(size=(2, 2)), B=np.ones((2, 1)), Q=np.eye(2),
                Rth=np.eye(1), S=np.zeros((2, 1)), PT=np.eye(2))
    x, w = np.array([0.5, -0.4]), np.array([0.3])
    res = solve_imbedding(lq_problem(**data), x, [-0.5, -1.0], control=Constant(w),
                          method=method, rtol=1e-9, atol=1e-11)
    assert res.success and res.method == method
    want = lq_closed_form(**data, x=x, w=w, p=-1.0)
    for k in FIELDS:
        np.testing.assert_allclose(res[k][1], want[k], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method, order", [("euler", 1), ("midpoint", 2), ("rk4", 4)])
def test_fixed_step_methods_converge_at_their_order(method, order):
    """diffrax-style: log-log slope of the error against the step, within 0.3 of the order
    (on an LQ problem, where the closure is exact and only the integrator errs)."""
    rng = np.random.default_rng(2)
    data = dict(A=-np.eye(2) + 0.3 * rng.normal(size=(2, 2)), B=np.ones((2, 1)), Q=np.eye(2),
                Rth=np.eye(1), S=np.zeros((2, 1)), PT=np.eye(2))
    x, w = np.array([0.5, -0.4]), np.array([0.3])
    want = lq_closed_form(**data, x=x, w=w, p=-1.0)
    steps = np.array([0.1, 0.05, 0.025])
    errs = []
    for h in steps:
        res = solve_imbedding(lq_problem(**data), x, [-1.0], control=Constant(w), method=method,
                              step=h)
        errs.append(abs(res.value[0] - want["value"]) + np.abs(res.adjoint[0] - want["adjoint"]).max())
    got = np.polyfit(np.log(steps), np.log(errs), 1)[0]
    assert abs(got - order) <= 0.3, (got, errs)


def test_jet_order_two_is_exact_for_a_quadratic_flow():
    """dz1/dt = z2^2, dz2/dt = 1: z(q) = [x1 + s x2^2 + s^2 x2 + s^3/3, x2 + s]; order 2 is
    exact, order 1 misses s^3/3."""
    pb = BolzaProblem(lambda t, z, th: np.stack([z[..., 1] ** 2, np.ones_like(z[..., 0])], -1),
                      terminal_loss=lambda z: 0.5 * (z[..., 0] ** 2 + z[..., 1] ** 2),
                      vectorized=True,
                      derivatives={"f_z": lambda t, z, th: np.stack(
                          [np.stack([0 * z[..., 0], 2 * z[..., 1]], -1), 0 * z], -2)})
    x, s = np.array([0.4, -0.7]), 0.8
    exact = [x[0] + s * x[1] ** 2 + s ** 2 * x[1] + s ** 3 / 3, x[1] + s]
    two = solve_imbedding(pb, x, [-s], order=2, estimate_error=False, **TIGHT)
    one = solve_imbedding(pb, x, [-s], order=1, estimate_error=False, **TIGHT)
    np.testing.assert_allclose(two.z[0], exact, rtol=1e-7)
    assert one.z[0][0] - exact[0] == pytest.approx(-s ** 3 / 3, rel=1e-6)


def test_crop_is_the_papers_approximation_not_exact():
    """eq. (21) replaces Z_1 grad Phi by grad Phi: even for dz/dt = a z it is not exact
    (Z_1 = 1 + a s instead of e^(a s), so z has error a^3 s^3 x / 6), where jet-1 is."""
    a = -0.8
    pb = BolzaProblem(lambda t, z, th: a * z, terminal_loss=lambda z: 0.5 * float(z @ z))
    s = np.array([0.1, 0.2, 0.4])
    res = solve_imbedding(pb, [1.0], -s, closure="crop", **TIGHT)
    np.testing.assert_allclose(res.z[:, 0] - np.exp(a * s), -(a * s) ** 3 / 6, rtol=0.15)
    jet = solve_imbedding(pb, [1.0], -s, closure="jet", **TIGHT)
    np.testing.assert_allclose(jet.z[:, 0], np.exp(a * s), rtol=1e-9)
    assert res.error_estimate is None and res.closure == "crop"


def test_result_repr_is_readable():
    pb, ctrl, x = pendulum()
    text = repr(solve_imbedding(pb, x, [-0.5, -1.0], control=ctrl))
    for key in ("message", "success", "depths", "z", "value", "adjoint", "param_grad",
                "depth_grad", "nfev", "error_estimate"):
        assert f"{key}:" in text
    assert isinstance(solve_imbedding(pb, x, [-0.5], control=ctrl), invimbed.ImbeddingResult)
