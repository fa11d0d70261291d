"""No hangs, no scipy-internal exceptions: numerical trouble ends the sweep with a message.

Every case that could hang runs under a time limit (`time_limit`, SIGALRM), so that a
regression fails here instead of stalling the suite. Covered:

* a stiff problem on an explicit method stops early, says "stiff" and names Radau/BDF;
* dynamics that are NaN from the first evaluation stop at once, naming the depth;
* the step budget ``max_steps`` (adaptive and fixed-step) ends the sweep with a message;
* a non-finite value inside scipy's own linear algebra is reported, not raised;
* the stencil's default spacing keeps stiff chemical kinetics where they are defined;
* the fixed-step loop, written once for every array namespace, returns the numbers
  it returned before to 1e-14.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import numpy as np
import pytest

from invimbed import BolzaProblem, PiecewiseConstant, solve_imbedding
from invimbed._core.closures.stencil import StencilClosure, default_spacing
from invimbed._core.integrators import integrate_fixed, integrate_scipy
from invimbed._core.integrators.fixed import run_schedule
from invimbed._core.integrators.schedule import fixed_schedule
from problems import pendulum_functions


@contextmanager
def time_limit(seconds: int):
    """Fail (instead of hanging) if the block runs longer than ``seconds``."""
    if not hasattr(signal, "SIGALRM"):   # pragma: no cover - Windows
        yield
        return

    def hang(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def quadratic_T(z):
    return 0.5 * np.sum(z**2, axis=1)


STIFF = BolzaProblem(lambda t, z, th: -1e6 * z, terminal_loss=quadratic_T, vectorized=True)


# -- stiffness ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["RK45", "RK23", "DOP853"])
def test_stiff_problem_on_an_explicit_method_stops_early_and_says_stiff(method):
    """dz/dt = -1e6 z: RK45 would need about 1e6 steps at the stability limit. The last
    25 steps at the limit project past max_steps, so the sweep stops after a few hundred
    evaluations, naming the implicit methods."""
    start = time.perf_counter()
    with time_limit(60):
        res = solve_imbedding(STIFF, [1.0], [-1.0, -0.5], method=method)
    elapsed = time.perf_counter() - start
    assert elapsed < 30, f"{method} took {elapsed:.1f} s"
    assert not res.success and res.status == -1
    assert "stiff" in res.message and "Radau" in res.message and "BDF" in res.message
    assert "p = " in res.message and "max_steps = 10000" in res.message
    assert res.nfev < 5_000


def test_the_stiff_problem_is_solved_by_radau():
    """The remedy the message names works."""
    with time_limit(60):
        res = solve_imbedding(STIFF, [1.0], [-1.0, -0.5], method="Radau")
    assert res.success, res.message
    np.testing.assert_allclose(res.z, 0.0, atol=1e-6)


def test_a_non_stiff_sweep_is_not_stopped_for_stiffness():
    """A long, non-stiff sweep at tight tolerance takes many steps and still succeeds."""
    osc = BolzaProblem(lambda t, z, th: np.stack([z[:, 1], -z[:, 0]], axis=1),
                       terminal_loss=quadratic_T, vectorized=True)
    with time_limit(60):
        res = solve_imbedding(osc, [1.0, 0.0], [-20.0, -10.0], rtol=1e-9, atol=1e-12)
    assert res.success, res.message


# -- non-finite values -------------------------------------------------------------------
NAN = BolzaProblem(lambda t, z, th: np.full_like(z, np.nan), terminal_loss=quadratic_T,
                   vectorized=True)


@pytest.mark.parametrize("method", ["RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA",
                                    "euler", "rk4", "disc"])
def test_dynamics_nan_from_the_first_evaluation_stop_at_once(method):
    """The first evaluation (p = q = 0) is checked too: scipy's first-step selection never
    sees the NaN, nothing loops on it."""
    with time_limit(30):
        res = solve_imbedding(NAN, [1.0], [-1.0, -0.5], method=method, step=0.1)
    assert not res.success and res.status == -1
    if method != "disc":
        assert "first evaluation" in res.message and "depth q = 0" in res.message
        assert res.nfev == 1
    assert "p = " in res.message
    assert np.isnan(res.z).all()


SQRT = BolzaProblem(lambda t, z, th: z * np.sqrt(t + 0.5), terminal_loss=quadratic_T,
                    vectorized=True, derivatives="finite-differences")  # as backend='cupy'


@pytest.mark.parametrize("method", ["RK45", "Radau", "rk4"])
def test_dynamics_nan_part_way_name_the_depth_and_keep_the_depths_before(method):
    """f is NaN below t = -0.5: the sweep stops there, names the depth, and keeps the
    shallower depths."""
    with time_limit(30):
        with np.errstate(invalid="ignore"):
            res = solve_imbedding(SQRT, [1.0], [-1.0, -0.25], method=method, step=0.01)
    assert not res.success and res.status == -1
    p = float(res.message.split("p = ")[1].split()[0].rstrip(".,"))
    assert -0.52 < p <= -0.5
    assert np.isnan(res.z[0]).all() and np.isfinite(res.z[1]).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_overflow_inside_radau_is_reported_not_raised():
    """Finite but huge derivatives overflow in Radau's Newton iteration, where scipy
    raises 'array must not contain infs or NaNs': the solve stops with a message."""
    def rhs(p, y, piece=None):
        return np.array([1e300 * np.tanh(y[0]), y[1]])

    with time_limit(30):
        out = integrate_scipy(rhs, np.array([1.0, 1.0]), 0.0, np.array([-1.0]), np.empty(0),
                              lambda a, b: None, method="Radau")
    assert not out.success
    assert "Newton iteration of Radau" in out.message and "p = " in out.message


def test_other_value_errors_of_the_dynamics_still_reach_the_user():
    def rhs(p, y, piece=None):
        raise ValueError("the user's own mistake")

    with pytest.raises(ValueError, match="the user's own mistake"):
        integrate_scipy(rhs, np.array([1.0]), 0.0, np.array([-1.0]), np.empty(0),
                        lambda a, b: None, method="Radau")


# -- the step budget ---------------------------------------------------------------------
OSC = BolzaProblem(lambda t, z, th: np.stack([z[:, 1], -z[:, 0]], axis=1),
                   terminal_loss=quadratic_T, vectorized=True)


@pytest.mark.parametrize("method", ["RK45", "Radau", "LSODA"])
def test_max_steps_exhausted_ends_the_sweep_with_a_message(method):
    with time_limit(30):
        res = solve_imbedding(OSC, [1.0, 0.0], [-5.0, -1e-3], method=method, max_steps=5)
    assert not res.success and res.status == -1
    assert "more than max_steps = 5 steps; increase `max_steps`" in res.message
    assert "p = " in res.message


def test_max_steps_of_the_fixed_step_grid():
    """A tiny `step` would mean a billion steps: the grid stops at max_steps, keeps
    the depths it reached, and says how many steps the grid needs."""
    def rhs(p, y, piece=None):
        return -y

    depths = np.array([-1e-6, -1.0])
    with time_limit(30):
        out = integrate_fixed(rhs, np.array([1.0]), 0.0, depths, np.empty(0),
                              lambda a, b: None, method="euler", step=1e-9, max_steps=2_000)
    assert not out.success
    assert "needs 1000000000 steps, more than max_steps = 2000" in out.message
    assert "increase `step` or `max_steps`" in out.message
    assert np.isfinite(out.ys[0]).all() and np.isnan(out.ys[1]).all()
    assert out.nfev == 2_000


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                        (True, TypeError), ("100", TypeError)])
def test_max_steps_is_validated(bad, error):
    with pytest.raises(error, match="`max_steps` must be a positive integer"):
        integrate_scipy(lambda p, y, piece=None: -y, np.array([1.0]), 0.0, np.array([-1.0]),
                        np.empty(0), lambda a, b: None, max_steps=bad)
    with pytest.raises(error, match="`max_steps` must be a positive integer"):
        integrate_fixed(lambda p, y, piece=None: -y, np.array([1.0]), 0.0, np.array([-1.0]),
                        np.empty(0), lambda a, b: None, step=0.1, max_steps=bad)


# -- the stencil's spacing ---------------------------------------------------------------
def robertson(t, y, th):
    return np.array([-0.04 * y[0] + 1e4 * y[1] * y[2],
                     0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                     3e7 * y[1] ** 2])


def test_default_spacing_is_relative_with_a_floor():
    x = np.array([[0.98, 3e-5, 0.02, 0.0, -250.0]])
    np.testing.assert_allclose(default_spacing(x), [[9.8e-4, 1e-5, 2e-5, 1e-5, 0.25]])
    from invimbed._core.setup.arguments import prepare
    from invimbed._core.integrators import ALL_METHODS

    prob = BolzaProblem(lambda t, z, th: -z, terminal_loss=quadratic_T, vectorized=True)
    setup = prepare(prob, x, [-1.0], None, "RK45", 1e-6, 1e-9, None, ALL_METHODS)
    clo = StencilClosure(setup.provider, setup.control, setup.x, setup.q)
    np.testing.assert_array_equal(clo.delta, default_spacing(x))
    pts = clo.points[0]
    # a stencil point never changes the sign of a component larger than 1e-5
    big = np.abs(x[0]) > 1e-5
    assert np.all(np.sign(pts[:, big]) == np.sign(x[0, big]))


def test_robertson_kinetics_with_the_stencil_and_radau():
    """A stencil spacing of 1e-3 would put a stencil point at a negative concentration
    (x2 = 3e-5), where Radau raises scipy's ValueError: the solve returns within seconds."""
    problem = BolzaProblem(robertson, terminal_loss=lambda z: 0.5 * z @ z)
    x = [0.98, 3e-5, 0.02]
    for method in ("Radau", "BDF"):
        with time_limit(60):
            res = solve_imbedding(problem, x, [-1.0, -0.1], closure="stencil", method=method)
        assert res.success or ("p = " in res.message), res.message
        assert res.success, res.message


# -- the fixed-step loop, written once -----------------------------------------------------
#: solve_imbedding(pendulum, X_REF, [-1, -0.5, -0.2], control=CTRL_REF, method="rk4",
#: step=0.07, estimate_error=False) and method="disc", computed with the earlier
#: fixed-step loop (before it was made namespace-generic).
X_REF = np.array([[0.4, -0.3], [1.1, 0.6]])
CTRL_REF = PiecewiseConstant([-1.0, -0.4, 0.0], [[0.2, 0.1], [-0.3, 0.05]])
BEFORE = {
    "rk4": (64, {
        "z": [[[0.11581366094715025, -0.31188589826857777], [1.3549267602794104, -0.18025644398630905]], [[0.2285804484061974, -0.4080719375029416], [1.2981348312942447, 0.1543831980409809]], [[0.33282604012040784, -0.3692239920941209], [1.201202784670757, 0.411148633113238]]],  # noqa: E501
        "value": [[0.09870511900113678, 0.9493647735809816], [0.060918961873180674, 0.5064681717353191], [0.02568173002223291, 0.3252952653471202]],  # noqa: E501
        "adjoint": [[[-0.09585846245558333, -0.31255308571940305], [1.404788676960571, 0.24223402674418884]], [[-0.16368601111427095, -0.1634089815217109], [0.9637309525535348, 0.11399421295762521]], [[-0.13232746703452705, -0.05535414844524706], [0.7055923430865476, 0.2942534440297894]]],  # noqa: E501
        "param_grad": [[[-0.16893528970433314, -0.038863464931219775, -0.06653447399417374, -0.008119840813292617], [-0.06621338853227118, 0.037230232292204506, -0.32389522071163657, 0.0007497890823408172]], [[-0.01783231323293804, -0.0035491290173170426, -0.0643962261465123, -0.008487290592981395], [0.016558766341662624, -0.0024599218016564867, -0.060897929113773785, 0.021789204855276766]], [[0.0, 0.0, -0.02208835616533677, -0.0009591279046867237], [0.0, 0.0, 0.05328985371115192, -0.021783871481791867]]],  # noqa: E501
        "depth_grad": [[-0.08757756065047959, -0.9554059693806847], [-0.07020562186761248, -0.7948915150028861], [-0.11968258725185749, -0.3815065595116791]],  # noqa: E501
    }),
    "disc": (3, {
        "z": [[[0.06248053639165327, -0.45744035596280613], [1.4661593452832329, -0.27999812659262413]], [[0.223864407835364, -0.4896923530965557], [1.341057066770197, 0.10564494681693748]], [[0.34, -0.3769002697736593], [1.2200000000000002, 0.4137419266757837]]],  # noqa: E501
        "value": [[0.12345239420705471, 0.857486958176223], [0.06140939645883878, 0.41126410014696774], [0.022827860470326717, 0.29589465864168113]],  # noqa: E501
        "adjoint": [[[-0.21861019723540226, -0.5019841907135049], [1.4584687756230172, -0.07782264630421766]], [[-0.24465582890795823, -0.2098511879416548], [0.9654462909577353, -0.05680893058127362]], [[-0.14749064544478127, -0.05890203007715286], [0.7055342884887873, 0.2758013264617347]]],  # noqa: E501
        "param_grad": [[[-0.1621103286860615, -0.043145861907753734, -0.0805863959248502, -0.010846825925655095], [-0.31806093599547997, 0.20421091557559662, -0.5718593045762679, 0.08609638558190824]], [[0.0, 0.0, -0.07570262193247135, -0.008120119169367272], [0.0, 0.0, -0.1759441482683489, 0.11807632980520484]], [[0.0, 0.0, -0.017968409711851735, 0.0007861994604526816], [0.0, 0.0, 0.03728915764377444, 0.0015466868022991798]]],  # noqa: E501
        "depth_grad": [[-0.13940009421698588, -1.2023585214687125], [-0.09080874033640579, -0.8834372119996872], [-0.12559570604802658, -0.39865600608791196]],  # noqa: E501
    }),
}


@pytest.mark.parametrize("method,step", [("rk4", 0.07), ("disc", None)])
def test_fixed_step_numpy_path_is_unchanged(method, step):
    """Regression guard of the one fixed-step loop: the numbers of the earlier numpy loop,
    to 1e-14 relative (they agree to the last bit on the machine that recorded them)."""
    problem = pendulum_functions().problem()
    res = solve_imbedding(problem, X_REF, [-1.0, -0.5, -0.2], control=CTRL_REF, method=method,
                          step=step, estimate_error=False)
    nfev, fields = BEFORE[method]
    assert res.success and res.nfev == nfev
    for k, want in fields.items():
        want = np.asarray(want)
        err = np.max(np.abs(res[k] - want) / np.maximum(1.0, np.abs(want)))
        assert err <= 1e-14, f"{k}: {err:.3g}"


def test_the_schedule_loop_runs_on_the_array_namespace_of_its_state():
    """`run_schedule` computes with the namespace of the state it is given (numpy here;
    cupy on a GPU, where backend='cupy' calls it), with `array_api_strict` when installed."""
    sched = fixed_schedule(0.0, np.array([-1.0, -0.5]), np.empty(0), lambda a, b: None,
                           "rk4", 0.1)
    seen = {}

    def stage(k, s, p, y):
        return -y

    def record(d, y):
        seen[d] = y

    assert run_schedule(sched, np.ones(3), stage, record) is None
    # dy/dp = -y swept down from p = 0: y(p) = exp(-p)
    np.testing.assert_allclose(seen[0], np.exp(1.0), rtol=1e-6)
    np.testing.assert_allclose(seen[1], np.exp(0.5), rtol=1e-6)
    xps = pytest.importorskip("array_api_strict")
    from invimbed._core.runtime.namespace import array_namespace

    if array_namespace(xps.ones(3)) is np:
        pytest.skip("invimbed.array_namespace recognises numpy and cupy only")
    seen.clear()
    assert run_schedule(sched, xps.ones(3), stage, record) is None
    np.testing.assert_allclose(np.asarray(seen[0]), np.exp(1.0), rtol=1e-6)


def test_xp_sweep_takes_the_numpy_sweeps_steps_and_messages():
    """backend='cupy''s sweep (run here with xp = numpy) uses the same loop: the same
    numbers, the same evaluations, the same failure message, the same budget."""
    from invimbed._backends._xp import sweep_xp
    from invimbed._core.setup.arguments import prepare
    from invimbed._core.integrators import ALL_METHODS

    kw = dict(closure="jet", order=1, method="rk4", step=0.01, difference="central",
              delta=None, estimate_error=True, backend="xp-numpy")
    with np.errstate(invalid="ignore"):
        setup = prepare(SQRT, [[1.0], [2.0]], [-1.0, -0.25, 0.0], None, "rk4", 1e-6, 1e-9,
                        0.01, ALL_METHODS)
        res = sweep_xp(setup, np, **kw)
        ref = solve_imbedding(SQRT, [[1.0], [2.0]], [-1.0, -0.25, 0.0], method="rk4",
                              step=0.01)
    assert (res.success, res.nfev, res.message) == (ref.success, ref.nfev, ref.message)
    np.testing.assert_array_equal(res.z, ref.z)
    setup = prepare(OSC, [1.0, 0.0], [-1.0, -0.5], None, "rk4", 1e-6, 1e-9, 1e-6,
                    ALL_METHODS)
    with time_limit(30):
        res = sweep_xp(setup, np, **dict(kw, step=1e-6), max_steps=50)
    assert not res.success and "more than max_steps = 50" in res.message
    assert res.nfev == 50 * 4


@pytest.mark.parametrize("method", ["RK45", "Radau", "BDF"])
def test_min_step_is_kept_by_every_method(method):
    """scipy's solvers other than LSODA ignore `min_step` with a warning; the sweep keeps
    it: a step below it ends the sweep with a message, and nothing is warned."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with time_limit(30):
            res = solve_imbedding(OSC, [1.0, 0.0], [-5.0], method=method, rtol=1e-10,
                                  atol=1e-12, min_step=0.5)
    assert not res.success and res.status == -1
    assert "fell below `min_step` = 0.5" in res.message and "p = " in res.message
