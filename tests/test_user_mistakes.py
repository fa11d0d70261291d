"""Every user mistake gets a clear answer within seconds.

The mistakes a new user makes, one per case: wrong types, wrong values, wrong sizes,
misspelt keywords, missing controls, at every public entry point. Each case asserts the
exception type and that the message names the argument (``match=``); the numerical
troubles that could hang (NaN dynamics, a stiff problem with an explicit method) run
under a time limit and must end with ``success=False`` and a message saying where.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time

import numpy as np
import pytest

import invimbed
from invimbed import (BolzaProblem, Constant, Control, PiecewiseConstant, check_derivatives,
                      solve_adjoint, solve_imbedding)

X1 = [1.0]
X2 = [1.0, 0.5]
DEPTHS = [-0.5, -1.0]


# -- the problems the mistakes are made with -------------------------------------------
def half_square(z):
    return 0.5 * float(z @ z)


def decay(t, z, th):
    return -z


def driven(t, z, th):
    """Reads theta[0]: needs a control of size >= 1."""
    return -z + th[0]


def two_inputs(t, z, th):
    """Reads theta[1]: needs a control of size >= 2."""
    return -z + th[0] * th[1]


def oscillator(t, z, th):
    """Two states: an x of any other length is a mistake."""
    return np.array([z[1], -z[0]])


class Problems:
    """The problems, built on first use (sympy only for the symbolic ones)."""

    @property
    def decay(self):
        return BolzaProblem(decay, terminal_loss=half_square)

    @property
    def driven(self):
        return BolzaProblem(driven, terminal_loss=half_square)

    @property
    def two_inputs(self):
        return BolzaProblem(two_inputs, terminal_loss=half_square)

    @property
    def oscillator(self):
        return BolzaProblem(oscillator, terminal_loss=half_square)

    @property
    def vectorized_driven(self):
        return BolzaProblem(lambda t, z, th: -z + th[:, :1], vectorized=True,
                            terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1))

    @property
    def rate(self):
        """dz/dt = theta: the control's size is the state's."""
        return BolzaProblem(lambda t, z, th: th, terminal_loss=half_square)

    @property
    def vectorized_indexed(self):
        return BolzaProblem(lambda t, z, th: -z + th[:, 0][:, None], vectorized=True,
                            terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1))

    @property
    def sym(self):
        """from_sympy: two states (a, b), one control (u)."""
        sp = pytest.importorskip("sympy")
        t, a, b, u = sp.symbols("t a b u")
        return invimbed.from_sympy(t, [a, b], [u], [b, -a + u],
                                   terminal_loss=(a - 1) ** 2 / 2)

    def __call__(self, name):
        return getattr(self, name)


@pytest.fixture
def P():
    return Problems()


def raises(call, exc, match, P):
    with pytest.raises(exc, match=match):
        call(P)


def case(call, exc, match, id):
    return pytest.param(call, exc, match, id=id)


# -- a time limit for what could hang ----------------------------------------------------
class TimeLimitExceeded(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Fail if the block runs longer than ``seconds`` (SIGALRM: POSIX, main thread; the
    integrators loop in Python, so the alarm interrupts them)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        pytest.skip("the time limit needs SIGALRM in the main thread")

    def expire(signum, frame):
        raise TimeLimitExceeded(f"still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        yield
    except TimeLimitExceeded as exc:
        pytest.fail(str(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.perf_counter() - start < seconds


# -- solve_imbedding -------------------------------------------------------------------
def imb(problem="decay", x=X1, depths=DEPTHS, **kw):
    return lambda P: solve_imbedding(P(problem), x, depths, **kw)


IMBEDDING = [
    # types
    case(imb(rtol="1e-6"), TypeError, r"`rtol` must be a positive number.*'1e-6'", "rtol-str"),
    case(imb(atol=[1e-9]), TypeError, r"`atol` must be a positive number", "atol-list"),
    case(imb(estimate_error="no"), TypeError, r"`estimate_error` must be True or False", "estimate_error-str"),
    case(imb(ratio_test=1), TypeError, r"`ratio_test` must be True or False", "ratio_test-int"),
    case(imb(order=1.5), TypeError, r"`order` must be an integer, but got 1.5", "order-float"),
    case(imb(max_order="6"), TypeError, r"`max_order` must be an integer, but got '6'", "max_order-str"),
    case(imb(x=[1.0 + 1.0j]), TypeError, r"`x` must be real, but got complex", "x-complex"),
    case(imb(x="abc"), TypeError, r"`x` must be array_like of real numbers", "x-str"),
    case(imb(depths="abc"), TypeError, r"`depths` must be array_like of real numbers", "depths-str"),
    case(imb(method="rk4", step="0.1"), TypeError, r"`step` must be a positive number", "step-str"),
    case(imb(closure="stencil", delta="a"), TypeError, r"`delta` must be array_like", "delta-str"),
    case(imb(control=[0.5]), TypeError, r"`control` must be None or an invimbed control.*Constant\(\[0.5\]\)", "control-list"),
    case(imb(control=0.5), TypeError, r"`control` must be None or an invimbed control", "control-float"),
    case(lambda P: solve_imbedding(decay, X1, DEPTHS), TypeError, r"`problem` must be an invimbed.BolzaProblem", "problem-function"),
    # misspelt or foreign keywords
    case(imb(rtoll=1e-3), TypeError, r"'rtoll' \(did you mean 'rtol'\?\)", "rtoll"),
    case(imb(atoll=1e-3), TypeError, r"'atoll' \(did you mean 'atol'\?\)", "atoll"),
    case(imb(strategy="ensemble"), TypeError, r"solve_imbedding\(\) got unexpected keyword argument\(s\) 'strategy'", "adjoint-keyword"),
    case(imb(jac=lambda t, y: y), TypeError, r"'jac'", "solve_ivp-jac"),
    # options
    case(imb(max_steps=0), ValueError, r"`max_steps` must be a positive integer", "max_steps-zero"),
    case(imb(max_steps=1.5), TypeError, r"`max_steps` must be a positive integer", "max_steps-float"),
    case(imb(first_step="0.1"), TypeError, r"`first_step` must be a positive number", "first_step-str"),
    case(imb(first_step=-1.0), ValueError, r"`first_step` must be a positive number", "first_step-negative"),
    case(imb(min_step=-1.0), ValueError, r"`min_step` must be a non-negative number", "min_step-negative"),
    case(imb(step=0.1, max_step=0.2), ValueError, r"either `step` or `max_step`", "step-and-max_step"),
    case(imb(method="rk4", step=0.1, first_step=0.01), ValueError, r"`first_step` applies to scipy's adaptive methods \(.*\) only, but got method='rk4'", "first_step-fixed-method"),
    # values
    case(imb(rtol=-1.0), ValueError, r"`rtol` must be a positive finite number", "rtol-negative"),
    case(imb(x=[np.nan]), ValueError, r"`x` must be finite", "x-nan"),
    case(imb(x=np.ones((2, 2, 2))), ValueError, r"`x` must have shape \(N,\) or \(B, N\)", "x-3d"),
    case(imb(depths=[-1.0, 0.5]), ValueError, r"every depth in `depths` must be <= q", "depths-above-q"),
    case(imb(depths=[-1.0, -0.5, -0.7]), ValueError, r"`depths` must be strictly monotone", "depths-not-monotone"),
    case(imb(depths=[]), ValueError, r"`depths` must be a non-empty 1-D array", "depths-empty"),
    case(imb(method="RK99"), ValueError, r"`method` must be one of 'RK45'", "method-unknown"),
    case(imb(method="rk4"), ValueError, r"`step` is required for the fixed-step method 'rk4'", "fixed-step-without-step"),
    case(imb(closure="magic"), ValueError, r"`closure` must be one of 'jet'", "closure-unknown"),
    case(imb(order=2, closure="stencil"), ValueError, r"`order` applies to closure='jet' only", "order-with-stencil"),
    case(imb(tol="1e-3"), ValueError, r"`tol` must be a positive float or an \(rtol, atol\) pair", "tol-str"),
    case(imb(tol=(0.0, 0.0)), ValueError, r"`tol` must not be \(0, 0\)", "tol-zero"),
    case(imb(tol=1e-3, closure="stencil"), ValueError, r"`tol` needs the jet's error estimate", "tol-with-stencil"),
    case(imb(closure="stencil", delta=[1e-3, 1e-3]), ValueError, r"`delta` must be a float or an array of shape \(N,\) or \(B, N\) with N = 1", "delta-shape"),
    case(imb(closure="stencil", delta=-1e-3), ValueError, r"`delta` must be positive and finite", "delta-negative"),
    case(imb(delta=1e-3), ValueError, r"`delta` is the spacing of closure='stencil' only", "delta-with-jet"),
    case(imb(closure="stencil", difference="backward"), ValueError, r"`difference` must be one of 'central', 'forward'", "difference-unknown"),
    case(imb(backend="torch"), ValueError, r"`backend` must be one of 'numpy'", "backend-unknown"),
    case(imb(fallback="yes"), ValueError, r"`fallback` must be one of 'adjoint'", "fallback-unknown"),
    # x and control against the problem
    case(imb("oscillator", x=[1.0, 0.0, 3.0]), ValueError, r"`x` has N = 3 entries, but `dynamics` returned shape \(2,\): pass an x of length 2", "x-longer-than-dynamics"),
    case(imb("sym", x=[1.0, 0.0, 3.0], control=Constant([0.1])), ValueError, r"`x` must have N = 2 entries per input \(one per state symbol: a, b\), but got 3", "x-longer-than-symbols"),
    case(imb("driven"), ValueError, r"`control` is required: `dynamics` reads theta\[0\] \(IndexError: index 0 is out of bounds.*size 0\)", "control-missing"),
    case(imb("vectorized_driven"), ValueError, r"`control` is required: `dynamics` returned shape \(1, 0\) with no control.*right shape \(1, 1\) with 1", "control-missing-vectorized-slice"),
    case(imb("vectorized_indexed"), ValueError, r"`control` is required: `dynamics` reads theta\[\.\.\., 0\] \(IndexError: index 0 is out of bounds for axis 1 with size 0\)", "control-missing-vectorized-index"),
    case(imb("two_inputs", control=Constant([0.5])), ValueError, r"`control` has M = 1 value\(s\), but `dynamics` reads theta\[1\].*at least 2", "control-too-small"),
    case(imb("rate", control=Constant([0.5, 0.5])), ValueError, r"`control` has M = 2 value\(s\): `dynamics` returned shape \(2,\) with them, and the right shape \(1,\) with 1", "control-too-long"),
    case(imb("sym", x=X2), ValueError, r"`control` is required: the problem has 1 control symbol\(s\): u", "control-missing-sympy"),
    case(imb("sym", x=X2, control=Constant([0.1, 0.2])), ValueError, r"`control` must have M = 1 value\(s\) \(one per control symbol: u\), but it has 2", "control-size-sympy"),
    case(imb("sym", x=X2, control=PiecewiseConstant([-1.0, -0.5, 0.0], [[0.1, 0.2], [0.3, 0.4]])), ValueError, r"`control` must have M = 1 value\(s\)", "piecewise-size-sympy"),
    case(imb("driven", control=PiecewiseConstant([-0.5, 0.0], [0.5])), ValueError, r"outside \[knots\[0\], knots\[-1\]\].*extend the knots", "knots-do-not-cover-depths"),
    # what the user's functions return
    case(lambda P: solve_imbedding(BolzaProblem(lambda t, z, th: 1j * z), X1, DEPTHS), TypeError, r"`dynamics` must return real numbers, but returned complex", "dynamics-complex"),
    case(lambda P: solve_imbedding(BolzaProblem(decay, terminal_loss=lambda z: z), X2, DEPTHS), ValueError, r"`terminal_loss` must return a scalar", "terminal_loss-vector"),
    case(lambda P: solve_imbedding(BolzaProblem(decay, running_loss=lambda t, z, th: "R"), X1, DEPTHS), TypeError, r"`running_loss` must return real numbers", "running_loss-str"),
    case(lambda P: solve_imbedding(BolzaProblem(lambda t, z, th: np.ones((2, 2))), X2, DEPTHS), ValueError, r"`dynamics` must return an array of shape \(N,\)", "dynamics-2d"),
    # what the user's derivatives return: the key written, the shape of one sample
    case(lambda P: solve_imbedding(BolzaProblem(oscillator, derivatives={"f_z": lambda t, z, th: np.array([[0.0, 1.0]])}), X2, DEPTHS), ValueError, r"`derivatives\['f_z'\]` must return shape \(2, 2\) \(one sample: f \(N = 2\), z \(N = 2\)\), but it returned shape \(1, 2\)", "derivative-shape"),
    case(lambda P: solve_imbedding(BolzaProblem(lambda t, z, th: -z + th, derivatives={"f_theta": lambda t, z, th: np.ones((len(z), 1))}, vectorized=True), X1, DEPTHS, control=Constant([0.5])), ValueError, r"`derivatives\['f_theta'\]` must return shape \(B, 1, 1\) \(vectorized=True: the batch axis, then f \(N = 1\), theta \(M = 1\); B = 1 at this call\), but it returned shape \(1, 1\)", "derivative-shape-vectorized"),
    # contradictory options
    case(imb(order=9, max_order=6, tol=1e-3), ValueError, r"`order` \(9\) is above `max_order` \(6\).*pass max_order=9", "order-above-max_order"),
]


@pytest.mark.parametrize("call, exc, match", IMBEDDING)
def test_solve_imbedding(P, call, exc, match):
    raises(call, exc, match, P)


# -- solve_adjoint ---------------------------------------------------------------------
def adj(problem="decay", x=X1, depths=DEPTHS, **kw):
    return lambda P: solve_adjoint(P(problem), x, depths, **kw)


ADJOINT = [
    case(adj(rtoll=1e-3), TypeError, r"solve_adjoint\(\) got unexpected keyword argument\(s\) 'rtoll' \(did you mean 'rtol'\?\)", "rtoll"),
    case(adj(rtol="1e-6"), TypeError, r"`rtol` must be a positive number", "rtol-str"),
    case(adj(atol=0.0), ValueError, r"`atol` must be a positive finite number", "atol-zero"),
    case(adj(strategy="fast"), ValueError, r"`strategy` must be one of 'ensemble', 'per_depth'", "strategy-unknown"),
    case(adj(backend="cupy"), ValueError, r"`backend` must be one of 'numpy', 'numba'", "backend-unknown"),
    case(adj(method="rk4"), ValueError, r"`method` must be one of .*but got 'rk4'", "fixed-step-method"),
    case(adj(max_steps=0), ValueError, r"`max_steps` must be a positive integer", "max_steps-zero"),
    case(adj(max_steps="100"), TypeError, r"`max_steps` must be a positive integer", "max_steps-str"),
    case(adj(min_step=1e-6), TypeError, r"'min_step'", "min_step-not-taken"),
    case(adj(step=0.1), TypeError, r"'step'", "step-not-taken"),
    case(adj(closure="jet"), TypeError, r"'closure'", "imbedding-keyword"),
    case(adj("driven"), ValueError, r"`control` is required: `dynamics` reads theta\[0\]", "control-missing"),
    case(adj("sym", x=X2), ValueError, r"`control` is required: the problem has 1 control symbol", "control-missing-sympy"),
    case(adj("oscillator", x=[1.0]), ValueError, r"`x` has N = 1 entries, but `dynamics`", "x-shorter-than-dynamics"),
    case(adj(x=[[1.0 + 2.0j]]), TypeError, r"`x` must be real", "x-complex"),
    case(adj(control=Constant([1.0]), depths=[0.5]), ValueError, r"every depth in `depths` must be <= q", "depth-above-q"),
]


@pytest.mark.parametrize("call, exc, match", ADJOINT)
def test_solve_adjoint(P, call, exc, match):
    raises(call, exc, match, P)


# -- check_derivatives -----------------------------------------------------------------
def chk(problem="decay", x=X1, *args, **kw):
    return lambda P: check_derivatives(P(problem), x, *args, **kw)


CHECK = [
    case(chk("driven", X1, Constant([0.5])), TypeError, r"`theta` takes control values.*pass it as `control=`", "control-object-as-theta"),
    case(chk("driven", X1, [0.5], control=Constant([0.5])), TypeError, r"give either `theta`.*or `control`", "theta-and-control"),
    case(chk("driven"), ValueError, r"`theta` is required: `dynamics` reads theta\[0\]", "control-missing"),
    case(chk("sym", X2), ValueError, r"`theta` is required: the problem has 1 control symbol\(s\): u", "control-missing-sympy"),
    case(chk("sym", X2, control=Constant([0.1, 0.2])), ValueError, r"`control` must have M = 1 value\(s\)", "control-size-sympy"),
    case(chk("oscillator", [1.0, 0.0, 3.0]), ValueError, r"`x` has N = 3 entries, but `dynamics` returned shape \(2,\)", "x-longer-than-dynamics"),
    case(chk(t="now"), TypeError, r"`t` must be a real number", "t-str"),
    case(chk(tol="a"), TypeError, r"`tol` must be a positive number", "tol-str"),
    case(chk(order=0), ValueError, r"`order` must be an integer >= 1", "order-zero"),
    case(chk(contrl=Constant([1.0])), TypeError, r"'contrl'", "keyword-misspelt"),
    case(lambda P: check_derivatives(decay, X1), TypeError, r"`problem` must be an invimbed.BolzaProblem", "problem-function"),
]


@pytest.mark.parametrize("call, exc, match", CHECK)
def test_check_derivatives(P, call, exc, match):
    raises(call, exc, match, P)


def test_check_derivatives_takes_control_like_the_solvers(P):
    res = check_derivatives(P.driven, X1, control=Constant([0.5]))
    assert res.ok


# -- BolzaProblem, from_sympy ----------------------------------------------------------
def sympy_symbols():
    sp = pytest.importorskip("sympy")
    return sp, sp.symbols("t a b u")


def from_sympy_with(**kw):
    def call(P):
        sp, (t, a, b, u) = sympy_symbols()
        args = dict(t=t, z=[a, b], theta=[u], dynamics=[b, -a + u], terminal_loss=a ** 2)
        args.update({k: v(sp, t, a, b, u) if callable(v) else v for k, v in kw.items()})
        return invimbed.from_sympy(**args)
    return call


PROBLEM = [
    case(lambda P: BolzaProblem(3), TypeError, r"`dynamics` must be callable, but got 3", "dynamics-not-callable"),
    case(lambda P: BolzaProblem(decay, terminal_loss=1.0), TypeError, r"`terminal_loss` must be callable", "terminal_loss-not-callable"),
    case(lambda P: BolzaProblem(decay, q="0"), TypeError, r"`q` must be a real number, but got '0'", "q-str"),
    case(lambda P: BolzaProblem(decay, q=True), TypeError, r"`q` must be a real number, but got True", "q-bool"),
    case(lambda P: BolzaProblem(decay, q=np.nan), ValueError, r"`q` must be finite", "q-nan"),
    case(lambda P: BolzaProblem(decay, vectorized="yes"), TypeError, r"`vectorized` must be True or False", "vectorized-str"),
    case(lambda P: BolzaProblem(decay, autonomous=1), TypeError, r"`autonomous` must be True or False", "autonomous-int"),
    case(lambda P: BolzaProblem(decay, check_derivatives="no"), TypeError, r"`check_derivatives` must be True or False", "check_derivatives-str"),
    case(lambda P: BolzaProblem(decay, derivatives=[decay]), TypeError, r"`derivatives` must be a dict of callables", "derivatives-list"),
    case(lambda P: BolzaProblem(decay, derivatives={"f_x": decay}), ValueError, r"derivative name 'f_x'", "derivative-name"),
    case(lambda P: BolzaProblem(decay, derivatives={"f_z": 1}), TypeError, r"`derivatives\['f_z'\]` must be callable", "derivative-not-callable"),
    case(lambda P: solve_imbedding(BolzaProblem(lambda t, z, th: -t * z, autonomous=True), X1, DEPTHS), ValueError, r"`autonomous=True` was declared, but `dynamics` depends on t", "autonomous-wrong"),
    case(from_sympy_with(t=lambda sp, t, a, b, u: "t"), TypeError, r"`t` must be a sympy object, not a string", "sympy-string-symbol"),
    case(from_sympy_with(dynamics=lambda sp, t, a, b, u: [b]), ValueError, r"`dynamics` must hold N = 2 expressions", "sympy-too-few-expressions"),
    case(from_sympy_with(q="0"), TypeError, r"`q` must be a real number", "sympy-q-str"),
    case(from_sympy_with(compile="gcc"), ValueError, r"`compile`", "sympy-compile-unknown"),
    case(from_sympy_with(terminal_loss=lambda sp, t, a, b, u: a * u), ValueError, r"terminal_loss", "sympy-terminal-uses-control"),
    case(from_sympy_with(z=lambda sp, t, a, b, u: [a, a]), ValueError, r"symbol a appears twice \(as `z\[0\]` and as `z\[1\]`\)", "sympy-repeated-symbol"),
]


@pytest.mark.parametrize("call, exc, match", PROBLEM)
def test_problem_construction(P, call, exc, match):
    raises(call, exc, match, P)


# -- controls --------------------------------------------------------------------------
CONTROLS = [
    case(lambda P: Constant("a"), TypeError, r"`w` must be array_like of real numbers", "constant-str"),
    case(lambda P: Constant([1j]), TypeError, r"`w` must be real, but got complex", "constant-complex"),
    case(lambda P: Constant([np.nan]), ValueError, r"`w` must be finite", "constant-nan"),
    case(lambda P: Constant(np.ones((2, 2))), ValueError, r"`w` must be a scalar or a 1-D array", "constant-2d"),
    case(lambda P: PiecewiseConstant([0.0, 1.0, 2.0], [[1.0], [2.0], [3.0]]), ValueError, r"`values` must have shape \(K, M\) with K = len\(knots\) - 1 = 2", "piecewise-values-count"),
    case(lambda P: PiecewiseConstant([0.0, 0.0, 2.0], [1.0, 2.0]), ValueError, r"`knots` must be strictly increasing", "piecewise-knots-repeated"),
    case(lambda P: PiecewiseConstant([[0.0, 1.0]], [1.0]), ValueError, r"`knots` must be a 1-D array", "piecewise-knots-2d"),
    case(lambda P: PiecewiseConstant([0.0, 1.0], ["a"]), TypeError, r"`values` must be array_like of real numbers", "piecewise-values-str"),
    case(lambda P: Control("theta", [1.0]), TypeError, r"`fn` must be callable", "control-fn-not-callable"),
    case(lambda P: Control(lambda t, w: w[3], [1.0]), ValueError, r"`w` has n_w = 1 parameter\(s\), but `fn\(t, w\)` reads beyond them", "control-fn-reads-beyond-w"),
    case(lambda P: Control(lambda t, w: 1j * w, [1.0]), TypeError, r"control `fn\(t, w\)` must return real numbers", "control-fn-complex"),
    case(lambda P: Control(lambda t, w: w, [1.0], jac=lambda t, w: np.ones(3)).jacobian(0.0), ValueError, r"control `jac\(t, w\)` must return shape \(M, n_w\) = \(1, 1\)", "control-jac-shape"),
    case(lambda P: Control(lambda t, w: w, [1.0], breakpoints=[np.nan]), ValueError, r"`breakpoints` must be finite", "control-breakpoints-nan"),
]


@pytest.mark.parametrize("call, exc, match", CONTROLS)
def test_controls(P, call, exc, match):
    raises(call, exc, match, P)


# -- invimbed.dask ---------------------------------------------------------------------
def batch(x=((1.0,), (0.5,)), depths=DEPTHS, problem="decay", **kw):
    def call(P):
        pytest.importorskip("dask")
        import invimbed.dask as idask

        prob = P(problem) if isinstance(problem, str) else problem
        return idask.solve_batch(prob, np.asarray(x) if not isinstance(x, str) else x,
                                 depths, **{"client": None, **kw})
    return call


def _closed_client():
    """A distributed client, closed (distributed failed inside with an AttributeError
    on its missing scheduler, or "IOLoop is closed")."""
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                                dashboard_address=None)
    client.close()
    return client


DASK = [
    case(batch(solver="exact"), ValueError, r"`solver` must be one of 'imbedding', 'adjoint'", "solver-unknown"),
    case(batch(rtoll=1e-3), TypeError, r"'rtoll' \(did you mean 'rtol'\?\)", "rtoll"),
    case(batch(strategy="ensemble"), TypeError, r"'strategy'.* solve_imbedding does not take", "adjoint-keyword-for-imbedding"),
    case(batch(solver="adjoint", closure="jet"), TypeError, r"'closure'.* solve_adjoint does not take", "imbedding-keyword-for-adjoint"),
    case(batch(x=[1.0, 0.5]), ValueError, r"`x` must have shape \(B, N\)", "x-1d"),
    case(batch(x=[[1.0j]]), TypeError, r"`x` must be real", "x-complex"),
    case(batch(x=[[1.0], [np.nan]]), ValueError, r"`x` must be finite", "x-nan-row"),
    case(batch(chunk_size=0), ValueError, r"`chunk_size` must be a positive integer", "chunk_size-zero"),
    case(batch(as_dask="yes"), TypeError, r"`as_dask` must be True or False", "as_dask-str"),
    case(batch(problem=decay), TypeError, r"`problem` must be an invimbed.BolzaProblem", "problem-function"),
    case(batch(depths=[-1.0, -0.5, -0.7]), ValueError, r"`depths` must be strictly monotone", "depths-not-monotone"),
    case(lambda P: batch(client=_closed_client())(P), ValueError, r"`client` is closed.*pass an open client.*or client=None", "client-closed"),
]


@pytest.mark.parametrize("call, exc, match", DASK)
def test_dask_solve_batch(P, call, exc, match):
    raises(call, exc, match, P)


# -- the torch adapter -----------------------------------------------------------------
def nn_call(fn):
    def call(P):
        torch = pytest.importorskip("torch")
        import invimbed.nn as inn

        return fn(torch, inn)
    return call


NN = [
    case(nn_call(lambda torch, inn: inn.InImNet(0)), ValueError, r"`dim` must be a positive integer", "dim-zero"),
    case(nn_call(lambda torch, inn: inn.InImNet(2.5)), ValueError, r"`dim` must be a positive integer", "dim-float"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, jacobian="full")), ValueError, r"`jacobian` must be one of", "jacobian-unknown"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, jacobian="crop", backward="adjoint")), ValueError, r"backward='adjoint' needs jacobian='exact'", "adjoint-with-crop"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, p_min=1.0)), ValueError, r"`p_min` must be a finite negative number", "p_min-positive"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, step=0)), ValueError, r"`step` must be a finite positive number", "step-zero"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, depths=[0.0, 1.0])), ValueError, r"`depths` must be finite and strictly decreasing", "depths-increasing"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, shared="yes")), TypeError, r"`shared` must be True or False", "shared-str"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, materialize=1)), TypeError, r"`materialize` must be True or False", "materialize-int"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, phi="mlp")), TypeError, r"`phi` must be a callable", "phi-str"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, dropout=1.0)), ValueError, r"`dropout` must be in \[0, 1\)", "dropout-one"),
    case(nn_call(lambda torch, inn: inn.InImNet(2, inflation=math.nan)), ValueError, r"`inflation` must be a positive number", "inflation-nan"),
    case(nn_call(lambda torch, inn: inn.InImNet(2)(np.zeros((3, 2)))), TypeError, r"`x` must be a torch.Tensor", "x-numpy"),
    case(nn_call(lambda torch, inn: inn.InImNet(2)(torch.zeros(3, 4))), ValueError, r"`x` must have shape \(B, 2\)", "x-wrong-dim"),
    case(nn_call(lambda torch, inn: inn.imbedded_adjoint(inn.InImNet(2, p_min=-2.0), torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 5))), ValueError, r"`grad_T` must be a tensor of shape", "grad_T-shape"),
    case(nn_call(lambda torch, inn: inn.imbedded_adjoint(inn.InImNet(2), torch.zeros(3, 2), torch.zeros(3, 2), form="printed")), ValueError, r"`form` must be one of", "form-unknown"),
    # torch's "mat1 and mat2 must have the same dtype" from inside the first layer before
    case(nn_call(lambda torch, inn: inn.InImNet(2).float()(torch.zeros(3, 2, dtype=torch.float64))), TypeError, r"`x` has dtype torch.float64, but the model's parameters are torch.float32: convert the input, x.to\(torch.float32\), or the model, model.to\(torch.float64\) \(model.double\(\)\)", "x-float64-model-float32"),
    case(nn_call(lambda torch, inn: inn.imbedded_adjoint(inn.InImNet(2).float(), torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 2))), TypeError, r"`x` has dtype torch.float64, but the model's parameters are torch.float32", "adjoint-x-float64-model-float32"),
]


@pytest.mark.parametrize("call, exc, match", NN)
def test_nn_adapter(P, call, exc, match):
    raises(call, exc, match, P)


# -- optimal control, optimisation, optimal depth, learning ----------------------------
def lqr():
    return BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))


def regulated():
    return BolzaProblem(lambda t, z, u: -z + u, running_loss=lambda t, z, u: 0.5 * (z @ z + u @ u),
                        terminal_loss=lambda z: 0.5 * z @ z, q=1.0)


def pwc():
    return PiecewiseConstant(np.linspace(0.0, 1.0, 5), np.zeros(4))


def growth():
    return BolzaProblem(lambda t, z, th: 0.7 * z, terminal_loss=lambda z: 0.5 * (z[0] - 2.0) ** 2)


def opt(**kw):
    return lambda P: invimbed.solve_optimal(lqr(), X1, [-1.0], **{"n_controls": 1, **kw})


def resid(control="const", **kw):
    ctrl = Constant([0.0]) if control == "const" else control
    return lambda P: invimbed.optimality_residual(lqr(), X1, [-1.0], ctrl, **kw)


def optc(control="pwc", **kw):
    return lambda P: invimbed.optimize_control(regulated(), X1, pwc() if control == "pwc" else control, **kw)


def odep(p_range=(-2.0, 0.0), **kw):
    return lambda P: invimbed.optimal_depth(growth(), X1, p_range, **kw)


def fit(**kw):
    args = dict(dynamics=lambda t, z, w: w[0] * z, w0=[0.0], x=[1.0], depths=np.array([-1.0, -0.5]),
                y=np.exp(0.5 * np.array([1.0, 0.5]))[:, None], epochs=2)
    args.update(kw)
    return lambda P: invimbed.fit_endpoint_dynamics(**args)


OTHERS = [
    # solve_optimal
    case(opt(control=Constant([0.5])), TypeError, r"[`']control[`']", "solve_optimal-control-keyword"),
    case(opt(rtoll=1e-3), TypeError, r"'rtoll'", "solve_optimal-rtoll"),
    case(opt(rtol="1e-6"), TypeError, r"`rtol`", "solve_optimal-rtol-str"),
    case(opt(estimate_error="no"), TypeError, r"`estimate_error` must be True or False", "solve_optimal-estimate_error-str"),
    case(opt(n_controls=1.5), (TypeError, ValueError), r"`n_controls`", "solve_optimal-n_controls-float"),
    case(opt(control_affine="yes"), TypeError, r"`control_affine` must be True or False", "solve_optimal-control_affine-str"),
    case(opt(x_wrong=True), TypeError, r"'x_wrong'", "solve_optimal-unknown-keyword"),
    # optimality_residual
    case(resid(control=[0.0]), TypeError, r"`control`", "optimality_residual-control-list"),
    case(resid(rtoll=1e-3), TypeError, r"'rtoll'", "optimality_residual-rtoll"),
    case(resid(control=Constant([0.0, 1.0])), ValueError, r"`control`", "optimality_residual-control-size"),
    # optimize_control
    case(optc(control=None), TypeError, r"`control`", "optimize_control-control-none"),
    case(optc(gradient="magic"), ValueError, r"`gradient` must be one of", "optimize_control-gradient-unknown"),
    case(optc(progress="yes"), TypeError, r"`progress` must be True or False", "optimize_control-progress-str"),
    case(optc(rtoll=1e-3), TypeError, r"'rtoll'", "optimize_control-rtoll"),
    case(optc(p=2.0), ValueError, r"`p`", "optimize_control-p-above-q"),
    case(optc(trajectory_points=0), ValueError, r"`trajectory_points`", "optimize_control-trajectory_points-zero"),
    # optimal_depth
    case(odep(p_range=-1.0), (TypeError, ValueError), r"`p_range`", "optimal_depth-p_range-number"),
    case(odep(n=1), ValueError, r"`n`", "optimal_depth-n-one"),
    case(odep(rtoll=1e-3), TypeError, r"'rtoll'", "optimal_depth-rtoll"),
    case(odep(xtol="a"), TypeError, r"`xtol`", "optimal_depth-xtol-str"),
    # fit_endpoint_dynamics
    case(fit(epochs=-1), ValueError, r"`epochs` must be an integer >= 0", "fit-epochs-negative"),
    case(fit(learning_rate="0.01"), TypeError, r"`learning_rate` must be a real number", "fit-learning_rate-str"),
    case(fit(optimizer="sgd"), ValueError, r"`optimizer` must be one of", "fit-optimizer-unknown"),
    case(fit(rtoll=1e-3), TypeError, r"'rtoll'", "fit-rtoll"),
    case(fit(w0=[1j]), TypeError, r"`w0`", "fit-w0-complex"),
    case(fit(y=np.ones((3, 1))), ValueError, r"`y`", "fit-y-shape"),
    case(fit(progress="yes"), TypeError, r"`progress` must be True or False", "fit-progress-str"),
]


@pytest.mark.parametrize("call, exc, match", OTHERS)
def test_control_and_learning(P, call, exc, match):
    raises(call, exc, match, P)


# -- numerical trouble: an answer within seconds, never a hang -------------------------
LIMIT = 30.0


def nan_dynamics(t, z, th):
    return z * np.nan


def nan_below(t, z, th):
    """Finite for t >= -0.5, NaN below."""
    return -z if t >= -0.5 else z * np.nan


def stiff(t, z, th):
    return -1e6 * z


def robertson(t, y, th):
    """Robertson's chemical kinetics: stiff, components from 1 down to 3e-5."""
    a, b, c = y
    return np.array([-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b * b, 3e7 * b * b])


def says_where(res):
    assert res.success is False and res.status != 0
    assert "depth p = " in res.message or "t = " in res.message, res.message


@pytest.mark.parametrize("solve", [
    pytest.param(lambda pb: solve_adjoint(pb, X1, DEPTHS), id="adjoint-ensemble"),
    pytest.param(lambda pb: solve_adjoint(pb, X1, DEPTHS, strategy="per_depth"), id="adjoint-per_depth"),
    pytest.param(lambda pb: solve_adjoint(pb, X1, DEPTHS, method="Radau"), id="adjoint-radau"),
    pytest.param(lambda pb: solve_imbedding(pb, X1, DEPTHS), id="imbedding-rk45"),
    pytest.param(lambda pb: solve_imbedding(pb, X1, DEPTHS, method="Radau"), id="imbedding-radau"),
    pytest.param(lambda pb: solve_imbedding(pb, X1, DEPTHS, closure="stencil", method="BDF"), id="imbedding-stencil-bdf"),
])
def test_nan_from_the_first_evaluation_ends_the_solve(solve):
    problem = BolzaProblem(nan_dynamics, terminal_loss=half_square)
    with time_limit(LIMIT):
        try:
            res = solve(problem)
        except ValueError as exc:     # or refused at the first point, naming the dynamics
            assert "`dynamics`" in str(exc)
            return
    says_where(res)
    assert "finite" in res.message


@pytest.mark.parametrize("method", ["RK45", "Radau", "BDF"])
def test_nan_part_way_is_reported_at_its_depth(method):
    problem = BolzaProblem(nan_below, terminal_loss=half_square)
    with time_limit(LIMIT):
        res = solve_imbedding(problem, X1, [-0.25, -1.0], method=method)
    says_where(res)
    assert np.isfinite(res.z[0]).all() and np.isnan(res.z[1]).all()


@pytest.mark.parametrize("solve", [
    pytest.param(lambda pb: solve_imbedding(pb, X1, [-1.0]), id="imbedding-default"),
    pytest.param(lambda pb: solve_adjoint(pb, X1, [-1.0]), id="adjoint-default"),
])
def test_stiff_problem_with_an_explicit_method_answers(solve):
    """dz/dt = -1e6 z with the default RK45: either an answer or a failure that points to
    the implicit methods, within the limit."""
    problem = BolzaProblem(stiff, terminal_loss=half_square)
    with time_limit(LIMIT):
        res = solve(problem)
    if not res.success:
        assert "Radau" in res.message or "BDF" in res.message or "stiff" in res.message, \
            res.message


@pytest.mark.parametrize("solve", [
    pytest.param(lambda pb: solve_imbedding(pb, X1, [-1.0], max_steps=500), id="imbedding"),
    pytest.param(lambda pb: solve_adjoint(pb, X1, [-1.0], max_steps=500), id="adjoint"),
    pytest.param(lambda pb: solve_adjoint(pb, X1, [-1.0], max_steps=500, strategy="per_depth"), id="adjoint-per_depth"),
])
def test_step_budget_is_kept_and_named(solve):
    problem = BolzaProblem(stiff, terminal_loss=half_square)
    with time_limit(LIMIT):
        res = solve(problem)
    says_where(res)
    assert "max_steps" in res.message


def test_stiff_problem_solved_by_radau():
    problem = BolzaProblem(stiff, terminal_loss=half_square)
    with time_limit(LIMIT):
        res = solve_imbedding(problem, X1, [-1.0], method="Radau")
    assert res.success, res.message


@pytest.mark.parametrize("method", ["Radau", "BDF", "RK45"])
def test_stencil_on_stiff_kinetics_never_leaks_a_scipy_error(method):
    """The stencil's spacing must not step outside where the problem makes sense: a
    clean result or success=False saying where, never scipy's "array must not contain
    infs or NaNs"."""
    problem = BolzaProblem(robertson, terminal_loss=lambda y: float(y[0]))
    x = [1.0, 3e-5, 0.0]
    with time_limit(LIMIT):
        res = solve_imbedding(problem, x, [-0.01, -0.02], closure="stencil", method=method,
                              max_steps=5000)
    if not res.success:
        says_where(res)


# -- functions that write into their arguments (issue 31) ------------------------------
# The case: the pendulum's dynamics scale z[1] in place before returning. At the
# first point z[1] = 0, so the write changes nothing there; before, the first call's
# check passed it, tracing failed, finite differences ran on the solver's own state and
# solve_adjoint returned success=True with z off by 0.4.
PENDULUM_AT_REST = [0.5, 0.0]


def scaling_in_place(t, z, th):
    z[1] = 0.9 * z[1]
    return np.array([z[1], -np.sin(z[0]) + th[0]])


def scaled(t, z, th):
    """What `scaling_in_place` returns, without the write."""
    return np.array([0.9 * z[1], -np.sin(z[0]) + th[0]])


def _pendulum(dynamics, running=None, terminal=None, **kw):
    return BolzaProblem(dynamics, running or (lambda t, z, th: 0.5 * th[0] ** 2),
                        terminal or (lambda z: 0.5 * z[0] ** 2), q=1.0, **kw)


def _running_halving_z(t, z, th):
    z[1] = 0.5 * z[1]
    return 0.5 * th[0] ** 2 + z[1] ** 2


def _halving_terminal(z):
    z[1] = 0.5 * z[1]
    return 0.5 * z[0] ** 2


def _jacobian_halving_z(t, z, th):
    z[1] = 0.5 * z[1]
    return np.array([[0.0, 0.9], [-np.cos(z[0]), 0.0]])


def _solve_dask(problem, **kw):
    pytest.importorskip("dask")
    import invimbed.dask as idask

    return idask.solve_batch(problem, np.array([PENDULUM_AT_REST]), [0.0], client=None,
                             control=Constant([0.2]), **kw)


def _user_derivatives():
    return dict(f_z=lambda t, z, th: np.array([[0.0, 0.9], [-np.cos(z[0]), 0.0]]),
                f_theta=lambda t, z, th: np.array([[0.0], [1.0]]))


WRITERS = [
    pytest.param(lambda: solve_adjoint(_pendulum(scaling_in_place), PENDULUM_AT_REST, [0.0],
                                       control=Constant([0.2])), "dynamics", id="adjoint-auto"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaling_in_place, derivatives="trace"),
                                       PENDULUM_AT_REST, [0.0],
                                       control=Constant([0.2])), "dynamics", id="adjoint-trace"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaling_in_place,
                                                 derivatives="finite-differences"),
                                       PENDULUM_AT_REST, [0.0], control=Constant([0.2])),
                 "dynamics", id="adjoint-finite-differences"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaling_in_place,
                                                 derivatives=_user_derivatives()),
                                       PENDULUM_AT_REST, [0.0], control=Constant([0.2])),
                 "dynamics", id="adjoint-user-derivatives"),
    pytest.param(lambda: solve_imbedding(_pendulum(scaling_in_place), PENDULUM_AT_REST, [0.0],
                                         control=Constant([0.2])), "dynamics", id="imbedding"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaled, running=_running_halving_z),
                                       PENDULUM_AT_REST, [0.0], control=Constant([0.2])),
                 "running_loss", id="running_loss"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaled, terminal=_halving_terminal),
                                       PENDULUM_AT_REST, [0.0], control=Constant([0.2])),
                 "terminal_loss", id="terminal_loss"),
    pytest.param(lambda: solve_adjoint(_pendulum(scaled, derivatives=dict(
        _user_derivatives(), f_z=_jacobian_halving_z)), PENDULUM_AT_REST, [0.0],
        control=Constant([0.2])), r"derivatives\['f_z'\]", id="user-derivative"),
    pytest.param(lambda: _solve_dask(_pendulum(scaling_in_place)), "dynamics", id="dask"),
    pytest.param(lambda: solve_adjoint(_pendulum(_njit(scaling_in_place)), PENDULUM_AT_REST,
                                       [0.0], control=Constant([0.2]), backend="numba"),
                 "dynamics", id="numba"),
]


def _njit(fn):
    return pytest.importorskip("numba").njit(fn)


@pytest.mark.parametrize("solve, name", WRITERS)
def test_a_write_into_the_arguments_is_refused_whatever_the_first_point(solve, name):
    """The write changes nothing at the first point (z[1] = 0); the seeded test points of
    the first call show it, on every path: refused, naming the function."""
    with pytest.raises(ValueError, match=rf"`{name}` modified its argument `z` in place "
                                         r"\(z\[1\] was .* at the test point"):
        solve()


def _clamping(t, z, th):
    """Writes into z only above 2, where neither the first point nor a test point is."""
    if z[0] > 2.0:
        z[0] = 2.0
    return np.array([z[0]]) + th[0]


def _clamped(t, z, th):
    return np.array([min(z[0], 2.0)]) + th[0]


def _clamping_vectorized(t, z, th):
    z[:, 0] = np.minimum(z[:, 0], 2.0)
    return z + th


def _clamped_vectorized(t, z, th):
    return np.minimum(z, 2.0) + th


def _growth_fields(dynamics, solve, **kw):
    """dz/dt = min(z, 2) + 0.1 from x = 1 over [-1, 0]: the state passes 2 at depth
    about -0.3 of the way, so a write into it above 2 would change the solution."""
    problem = BolzaProblem(dynamics, lambda t, z, th: 0.5 * z[..., 0] ** 2,
                           lambda z: 0.5 * z[..., 0] ** 2, **kw)
    res = solve(problem)
    assert res.success, res.message
    return np.concatenate([res.z.ravel(), res.value.ravel(), res.adjoint.ravel(),
                           res.param_grad.ravel()])


def _adjoint(**kw):
    return lambda pb: solve_adjoint(pb, [1.0], [-1.0], control=Constant([0.1]), rtol=1e-9,
                                    atol=1e-11, **kw)


def _numba_pair():
    numba = pytest.importorskip("numba")
    return numba.njit(_clamping), numba.njit(_clamped)


WRITES_MISSED = [
    pytest.param(lambda: (_clamping, _clamped), _adjoint(), {}, id="per-sample"),
    pytest.param(lambda: (_clamping_vectorized, _clamped_vectorized), _adjoint(),
                 dict(vectorized=True), id="vectorized"),
    pytest.param(lambda: (_clamping, _clamped), _adjoint(),
                 dict(derivatives=dict(f_theta=lambda t, z, th: np.ones((1, 1)))),
                 id="user-derivatives"),
    pytest.param(lambda: (_clamping, _clamped),
                 lambda pb: solve_imbedding(pb, [1.0], [-1.0], control=Constant([0.1]),
                                            rtol=1e-9, atol=1e-11), {}, id="imbedding"),
    pytest.param(_numba_pair, _adjoint(backend="numba"), {}, id="numba"),
    pytest.param(_numba_pair,
                 lambda pb: solve_imbedding(pb, [1.0], [-1.0], control=Constant([0.1]),
                                            rtol=1e-9, atol=1e-11, backend="numba"),
                 {}, id="numba-imbedding"),
    pytest.param(lambda: (_clamping, _clamped),
                 lambda pb: _solve_dask_growth(pb), {}, id="dask"),
]


def _solve_dask_growth(problem):
    pytest.importorskip("dask")
    import invimbed.dask as idask

    return idask.solve_batch(problem, np.array([[1.0], [1.0]]), [-1.0], client=None,
                             solver="adjoint", control=Constant([0.1]), rtol=1e-9,
                             atol=1e-11, chunk_size=1)


@pytest.mark.parametrize("pair, solve, kw", WRITES_MISSED)
def test_a_write_the_checks_miss_cannot_change_the_solution(pair, solve, kw):
    """Every solver calls the functions on copies: a write into z that no check sees
    (above 2 only) gives the solution of what the function returns, the same as the
    function written without it, to the last bits of the same solve."""
    writing, pure = pair()
    got = _growth_fields(writing, solve, **kw)
    want = _growth_fields(pure, solve, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


# -- results: a field the solve did not keep -------------------------------------------
def test_sol_without_dense_output_says_how_to_get_it():
    res = solve_imbedding(Problems().decay, X1, DEPTHS)
    assert not hasattr(res, "sol") and getattr(res, "sol", None) is None
    with pytest.raises(AttributeError, match=r"no `sol`: .* only with dense_output=True; "
                                             r"solve again with solve_imbedding\(\.\.\., "
                                             r"dense_output=True\)"):
        res.sol(-0.7)
    with pytest.raises(AttributeError, match=r"no field 'zz' \(did you mean 'z'\?\); its "
                                             r"fields are adjoint, "):
        res.zz


def test_numba_calls_a_function_that_cannot_write_as_it_is():
    """A per-sample function that compiles with read-only arguments cannot write: the
    kernels call it bare (no copies per call); one that writes gets the copying wrapper."""
    numba = pytest.importorskip("numba")
    from invimbed._backends._numba_functions import _compile_user, _on_copies

    def kernels_get(fn):      # what `function_tuple` passes the kernels for a user function
        return _on_copies(_compile_user(fn, ("f", 0, 0)), ("f", 0, 0))

    pure, writing = numba.njit(_clamped), numba.njit(_clamping)
    assert kernels_get(pure) is pure
    wrapped = kernels_get(writing)
    assert wrapped is not writing
    z, th = np.array([3.0]), np.array([0.1])
    assert wrapped(0.0, z, th)[0] == pytest.approx(2.1) and z[0] == 3.0
