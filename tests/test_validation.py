"""Every bad input named in the core issue raises a documented, readable error."""

import numpy as np
import pytest

import invimbed
from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_adjoint, solve_imbedding

SOLVERS = [solve_imbedding, solve_adjoint]


def decay(t, z, th):
    return -z


def half_square(z):
    return 0.5 * float(z @ z)


@pytest.fixture
def problem():
    return BolzaProblem(decay, terminal_loss=half_square)


@pytest.mark.parametrize("solver", SOLVERS)
def test_dynamics_wrong_shape(solver):
    pb = BolzaProblem(lambda t, z, th: np.zeros(3), terminal_loss=half_square)
    with pytest.raises(ValueError, match=r"`x` has N = 2 entries, but `dynamics` returned shape "
                                         r"\(3,\).*shape \(2,\)"):
        solver(pb, [1.0, 2.0], [-1.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_terminal_loss_not_scalar(solver):
    pb = BolzaProblem(decay, terminal_loss=lambda z: z)
    with pytest.raises(ValueError, match=r"`terminal_loss` must return a scalar.*shape \(2,\)"):
        solver(pb, [1.0, 2.0], [-1.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_running_loss_not_scalar(solver):
    pb = BolzaProblem(decay, running_loss=lambda t, z, th: np.ones(4))
    with pytest.raises(ValueError, match=r"`running_loss` must return a scalar.*\(4,\)"):
        solver(pb, [1.0, 2.0], [-1.0])


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("x, match", [
    (np.ones((2, 2, 2)), r"`x` must have shape \(N,\) or \(B, N\), but got an array of shape \(2, 2, 2\)"),
    ([1.0, np.nan], r"`x` must be finite.*nan"),
    ([1.0, np.inf], r"`x` must be finite"),
    ([], r"`x` must not be empty"),
])
def test_bad_x(problem, solver, x, match):
    with pytest.raises(ValueError, match=match):
        solver(problem, x, [-1.0])


def test_x_not_numbers(problem):
    with pytest.raises(TypeError, match=r"`x` must be array_like of real numbers, but got 'abc'"):
        solve_imbedding(problem, "abc", [-1.0])


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("depths, match", [
    ([-1.0, -0.5, -0.7], r"`depths` must be strictly monotone"),
    ([-1.0, -1.0], r"`depths` must be strictly monotone"),
    ([-1.0, 0.5], r"every depth in `depths` must be <= q = 0.0.*max\(depths\) = 0.5"),
    ([[-1.0, -0.5]], r"`depths` must be a non-empty 1-D array of depths, but got shape \(1, 2\)"),
    ([], r"`depths` must be a non-empty 1-D array"),
    ([-1.0, np.nan], r"`depths` must be finite"),
])
def test_bad_depths(problem, solver, depths, match):
    with pytest.raises(ValueError, match=match):
        solver(problem, [1.0], depths)


def test_unknown_closure_lists_valid(problem):
    with pytest.raises(ValueError, match=r"`closure` must be one of 'jet', 'stencil', 'crop', but got 'magic'"):
        solve_imbedding(problem, [1.0], [-1.0], closure="magic")


@pytest.mark.parametrize("solver", SOLVERS)
def test_unknown_method_lists_valid(problem, solver):
    with pytest.raises(ValueError, match=r"`method` must be one of 'RK45', 'RK23', 'DOP853', 'Radau', 'BDF', 'LSODA'.*but got 'RK99'"):
        solver(problem, [1.0], [-1.0], method="RK99")


def test_adjoint_rejects_fixed_step_methods(problem):
    with pytest.raises(ValueError, match=r"`method` must be one of .*but got 'rk4'"):
        solve_adjoint(problem, [1.0], [-1.0], method="rk4")


def test_fixed_step_needs_step(problem):
    with pytest.raises(ValueError, match=r"`step` is required for the fixed-step method 'rk4'"):
        solve_imbedding(problem, [1.0], [-1.0], method="rk4")


@pytest.mark.parametrize("bad", [0.0, -1e-3, np.inf])
def test_bad_step(problem, bad):
    with pytest.raises(ValueError, match=r"`step` must be a positive finite number"):
        solve_imbedding(problem, [1.0], [-1.0], method="euler", step=bad)


@pytest.mark.parametrize("name", ["rtol", "atol"])
def test_bad_tolerances(problem, name):
    with pytest.raises(ValueError, match=rf"`{name}` must be a positive finite number, but got -1"):
        solve_imbedding(problem, [1.0], [-1.0], **{name: -1})


@pytest.mark.parametrize("order, error, match", [
    (0, ValueError, r"`order` must be an integer >= 1, but got 0"),
    (1.5, TypeError, r"`order` must be an integer, but got 1.5"),
    ("2", TypeError, r"`order` must be an integer, but got '2'"),
    (True, TypeError, r"`order` must be an integer, but got True"),
])
def test_bad_order(problem, order, error, match):
    with pytest.raises(error, match=match):
        solve_imbedding(problem, [1.0], [-1.0], order=order)


def test_order_only_for_jet(problem):
    with pytest.raises(ValueError, match=r"`order` applies to closure='jet' only"):
        solve_imbedding(problem, [1.0], [-1.0], closure="stencil", order=2)


def test_unknown_difference(problem):
    with pytest.raises(ValueError, match=r"`difference` must be one of 'central', 'forward', but got 'backward'"):
        solve_imbedding(problem, [1.0], [-1.0], closure="stencil", difference="backward")


def test_finite_differences_refuse_high_jet_orders(problem):
    with pytest.raises(invimbed.DerivativeOrderError,
                       match=r"order 3 needs exact derivatives.*serves jets up to order 2"):
        solve_imbedding(problem, [1.0], [-1.0], order=3, estimate_error=False)
    # order 2 (with its estimate: fourth differences) is served
    res = solve_imbedding(problem, [1.0], [-1.0], order=2)
    assert res.success


@pytest.mark.parametrize("solver", SOLVERS)
def test_problem_type(solver):
    with pytest.raises(TypeError, match=r"`problem` must be an invimbed.BolzaProblem, but got"):
        solver(decay, [1.0], [-1.0])


def test_control_type(problem):
    with pytest.raises(TypeError, match=r"`control` must be None or an invimbed control"):
        solve_imbedding(problem, [1.0], [-1.0], control=[1.0, 2.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_piecewise_constant_outside_knots(solver):
    pb = BolzaProblem(lambda t, z, th: -z + th, terminal_loss=half_square)
    ctrl = PiecewiseConstant([-1.0, -0.5, 0.0], [[1.0], [2.0]])
    with pytest.raises(ValueError, match=r"t = -2.0, outside \[knots\[0\], knots\[-1\]\] = \[-1.0, 0.0\]"):
        solver(pb, [1.0], [-2.0, -0.5], control=ctrl)


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"`dynamics` must be callable, but got 3"):
        BolzaProblem(3)
    with pytest.raises(TypeError, match=r"`running_loss` must be callable"):
        BolzaProblem(decay, running_loss="R")
    with pytest.raises(TypeError, match=r"`terminal_loss` must be callable"):
        BolzaProblem(decay, terminal_loss=1.0)
    with pytest.raises(ValueError, match=r"`q` must be finite, but got nan"):
        BolzaProblem(decay, q=np.nan)
    with pytest.raises(TypeError, match=r"`q` must be a real number"):
        BolzaProblem(decay, q="zero")
    with pytest.raises(ValueError, match=r"derivative name 'f_x'"):
        BolzaProblem(decay, derivatives={"f_x": decay})
    with pytest.raises(ValueError, match=r"derivative names look like"):
        BolzaProblem(decay, derivatives={"fz": decay})
    with pytest.raises(TypeError, match=r"`derivatives\['f_z'\]` must be callable"):
        BolzaProblem(decay, derivatives={"f_z": 1})
    with pytest.raises(TypeError, match=r"`derivatives` must be a dict of callables"):
        BolzaProblem(decay, derivatives=[decay])
    with pytest.raises(ValueError, match=r"gives 'T_z' but `terminal_loss` is None"):
        BolzaProblem(decay, derivatives={"T_z": lambda z: z})


def test_control_constructor_errors():
    with pytest.raises(ValueError, match=r"`values` must have shape \(K, M\) with K = len\(knots\) - 1 = 2, but got shape \(3, 1\)"):
        PiecewiseConstant([0.0, 1.0, 2.0], [[1.0], [2.0], [3.0]])
    with pytest.raises(ValueError, match=r"`knots` must be strictly increasing"):
        PiecewiseConstant([0.0, 0.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"`w` must be finite"):
        Constant([np.nan])
    with pytest.raises(TypeError, match=r"`fn` must be callable"):
        invimbed.Control("theta", [1.0])


def _singular(t, z, th):
    # real for t >= -1 only: numpy returns NaN (with a warning) below
    with np.errstate(invalid="ignore"):
        return z * np.sqrt(t + 1.0)


@pytest.mark.parametrize("closure", ["jet", "stencil", "crop"])
@pytest.mark.parametrize("method, step", [("RK45", None), ("rk4", 0.01), ("disc", None)])
def test_non_finite_is_reported_not_returned_as_nan(closure, method, step):
    """The dynamics turn NaN below t = -1: the sweep must stop there and say where."""
    if closure == "stencil" and method == "disc":
        pytest.skip("the stencil closure has no discrete recursion")
    pb = BolzaProblem(_singular, terminal_loss=half_square)
    depths = np.linspace(0.0, -2.0, 41) if method == "disc" else [-0.5, -2.0]
    res = solve_imbedding(pb, [1.0], depths, closure=closure, method=method, step=step)
    assert res.success is False
    assert res.status != 0
    assert "depth p = " in res.message
    where = float(res.message.split("depth p = ")[1].split()[0].rstrip(".:,"))
    assert -1.1 <= where < -1.0
    # a depth before the failure was reached and is finite; deeper ones are NaN, not "success"
    shallow = 0 if method != "disc" else 10
    assert np.isfinite(res.z[shallow]).all() and np.isfinite(res.adjoint[shallow]).all()
    assert np.isnan(res.z[-1]).all() and np.isnan(res.value[-1])


def test_adjoint_blow_up_is_reported():
    """dz/dt = z^2 from x = 1 blows up at t = p + 1; the reference must say so."""
    pb = BolzaProblem(lambda t, z, th: z ** 2, terminal_loss=half_square)
    res = solve_adjoint(pb, [1.0], [-0.5, -2.0])
    assert res.success is False
    assert "depth p = -2" in res.message
    assert np.isfinite(res.value[0]) and np.isnan(res.value[1])


def test_blow_up_beyond_the_jet_is_flagged_by_its_error_estimate():
    """dz/dt = z^2 from x = 1 blows up at s = 1. The jet's fields are linear in p and stay
    finite, but its error estimate is large: the sweep is not a success there (status -2,
    a message naming the depth), and the fields are still returned (the adjoint reference
    fails there, see test_adjoint_blow_up_is_reported)."""
    pb = BolzaProblem(lambda t, z, th: z ** 2, terminal_loss=half_square)
    res = solve_imbedding(pb, [1.0], np.linspace(0.0, -2.0, 9))
    assert not res.success and res.status == -2
    assert "Not converged from depth p = " in res.message and "error estimate" in res.message
    where = float(res.message.split("depth p = ")[1].split(" ")[0].rstrip(","))
    assert -1.0 <= where < 0.0
    assert [w.code for w in res.warnings] == ["estimate_large"]
    assert np.all(np.isfinite(res.z))
    quiet = solve_imbedding(pb, [1.0], [-0.05])
    assert quiet.success and quiet.status == 0 and quiet.warnings == []
