"""`solve_ocp` and `OCPSolver`: optimal control by multiple shooting on the exact ensemble.

The transcription is `invimbed._control.ocp.shooting` (every shooting interval one row of one
ensemble solve, exact sensitivities), the constraints `invimbed._control.ocp.constraints`,
the NLP and our optimality check `invimbed._control.ocp.nlp`, the solvers
`invimbed._control.ocp.solvers`, the starts `invimbed._control.ocp.guess`. `OCPSolver`
checks the arguments and builds the NLP and its solver once; its `solve` runs it from an
initial state (warm-started from the last solution) and packs the result; `solve_ocp` is
one `OCPSolver` solved once (docs/optimization.md, "Optimal control problems").
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..._core.integrators.ensemble import ENSEMBLE_METHODS
from ..._core.problem.bolza import BolzaProblem
from ..._core.results.families import OCPResult
from ..._core.results.status import Status, deprecated_alias
from ..._core.setup.arguments import initial_state
from ..._core.setup.settings import Accuracy, Integrator, settle
from ..._core.inputs.validation import (as_float_array, as_int, as_positive_int, as_real,
                                        check_callable, check_choice, describe)
from .constraints import Defects, FinalState, Path, Terminal, as_pair, bounds_size
from .nlp import ShootingNLP
from .guess import _get, _initial_guess, moved
from .outcome import result_fields, runaway_horizon
from .second_order import has_exact_second_derivatives
from .solvers import HESSIANS, SOLVERS, have_ipopt, make_runner
from ..options import SolverFailure
from .shooting import Shooting
from .collocation import TRANSCRIPTIONS, Collocation, check_collocation
from .variational import ROW_BACKENDS, rows_backend

def __getattr__(name: str) -> Any:
    """``OCP_STATUS``, the deprecated alias of `OCPResult.STATUS_CODES` (as ints)."""
    if name == "OCP_STATUS":
        return deprecated_alias(name, {int(k): v for k, v in OCPResult.STATUS_CODES.items()})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def solve_ocp(problem: BolzaProblem, x: Any, *, p: float | None = None,
              intervals: int = 20, grid: Any = None, n_controls: int | None = None,
              control_bounds: Any = None, state_bounds: Any = None,
              path_constraints: Callable | None = None, path_points: int = 0,
              final_state: Any = None, terminal_equality: Callable | None = None,
              terminal_inequality: Callable | None = None, free_horizon: bool = False,
              horizon_bounds: Any = None, initial_guess: Any = None,
              solver: str = "auto", hessian: str = "auto", tol: float = 1e-6,
              constraint_tol: float = 1e-6,
              max_iter: int = 1000, solver_options: dict | None = None,
              callback: Callable | None = None, rtol: float = 1e-8, atol: float = 1e-10,
              method: str = "RK45", max_steps: int = 10_000,
              trajectory_points: int = 10, transcription: str = "shooting",
              collocation_degree: int = 3, accuracy: Accuracy | None = None,
              integrator: Integrator | None = None, backend: str = "auto") -> OCPResult:
    r"""Solve an optimal-control problem by multiple shooting with an NLP solver.

    Minimises ``J`` of eq. (4) from ``z(p) = x`` over controls constant on each interval
    of a grid on ``[p, q]``, all intervals one exact ensemble solve (compiled, for a
    `from_sympy` problem or one whose functions trace, where numba is installed:
    ``backend``; docs/optimization.md, "Compiled rows"). Details: docs/optimization.md, "solve_ocp in detail".

    Parameters
    ----------
    problem : BolzaProblem
        Its first derivatives are used: give them for exact gradients.
    x : array_like, shape (N,)
        The initial state ``z(p)``.
    p, intervals, grid : float, int (default 20), array_like (K + 1,), optional
        The start time ``p < q`` and ``K`` equal intervals, or the node times to ``q``.
    n_controls : int, optional
        ``M``, the control size, where nothing else tells it.
    control_bounds, state_bounds : (low, high), Bounds or array_like (M, 2), optional
        Bounds on ``u``, and on the state at the nodes (and at ``path_points``): a
        ``(low, high)`` pair, ``scipy.optimize.Bounds`` or one pair per variable; a
        2 x 2 array for two variables whose two readings differ is refused.
    path_constraints, path_points : callable ``g(t, z, u) -> array``, int (default 0)
        ``g <= 0`` at the nodes and at ``path_points`` times inside each interval.
    final_state, terminal_equality, terminal_inequality : optional
        ``z(q) = final_state`` (NaN entries free); ``h(z(q)) = 0``; ``h(z(q)) <= 0``
        (residuals: a bool result is refused).
    free_horizon, horizon_bounds : bool (default False), (low, high)
        Make ``H = q - p`` a decision variable (a free final time), within bounds.
    initial_guess : OptimizeResult or dict, optional
        A warm start: a previous result, or a dict of ``"states"``, ``"controls"``,
        ``"horizon"``, ``"times"`` (the guess's node times; without them a guess with
        ``K + 1`` nodes is taken node for node); other keys are refused.
    solver, hessian : str, default "auto", "auto"
        ``"ipopt"`` (``cyipopt``, the default where installed), ``"trust-constr"`` or
        ``"slsqp"``; IPOPT's Hessian of the Lagrangian: ``"exact"`` (second-order
        sensitivities, or the collocation's own; the default where the problem's
        derivatives are exact: `from_sympy`, traced, and always with collocation),
        ``"limited-memory"`` (L-BFGS; the default
        otherwise) or ``"finite-differences"`` (shooting; docs/optimization.md, "Which
        Hessian").
    tol, constraint_tol : float, default 1e-6
        The KKT tolerance of our check; the largest constraint violation accepted.
    max_iter, solver_options : int (default 1000), dict
        The NLP solver's iterations and options (IPOPT's, or scipy's ``options``).
    callback : callable ``callback(iteration, objective, infeasibility)``, optional
        Called after each iteration; returning ``True`` stops the solver.
    rtol, atol, method, max_steps, trajectory_points
        The ensemble's tolerances, method (``"RK45"``, ``"RK23"``), steps per interval,
        and points per interval in ``trajectory`` (1e-8, 1e-10, "RK45", 10000, 10).
    transcription, collocation_degree : str (default "shooting"), int (default 3)
        ``"shooting"`` (every interval integrated by the explicit ensemble, the state
        exact), or ``"collocation"``: Radau IIA collocation with ``collocation_degree``
        points per interval, implicit, for stiff intervals (a state within the method's
        order ``2 d - 1``; docs/optimal-control.md, "Stiff intervals").
    accuracy, integrator : Accuracy, Integrator, optional
        ``tol`` (one float here: the KKT tolerance), ``rtol``, ``atol``; ``method``,
        ``max_steps``, as objects (docs/method.md, "Settings as objects"). A keyword left
        at its default defers to the object; one that sets a field the object sets
        differently is a ValueError naming both.
    backend : {"auto", "numpy", "numba"}, default "auto"
        What integrates the shooting intervals: ``"numba"``, the compiled rows (the
        problem's sympy expressions, from `from_sympy` or traced from plain numpy
        functions, generated into one numba function per row and compiled: 1 to 15 s
        the first time, then cached on disk; docs/optimization.md, "Compiled rows");
        ``"numpy"``, the numpy ensemble (no compilation); ``"auto"``, the compiled rows
        where numba is installed and the problem's expressions compile, else numpy.
        ``"numba"`` where that is not possible is a ValueError saying why.

    Returns
    -------
    OCPResult
        ``success`` (our KKT check passed, never the solver's word alone), ``status``
        (an `invimbed.Status`, one of `OCPResult.STATUS_CODES`,
        docs/results-and-status.md: 0 optimal, -2 not optimal, -4
        stopped by ``callback``, -1 an interval's integration or a constraint's value
        failed), ``fun`` (``J``), ``times``, ``states``, ``controls``, ``control``,
        ``horizon``, ``kkt`` (scaled as IPOPT's own check: docs/optimization.md),
        ``hessian`` (IPOPT's Hessian, ``"auto"`` resolved; None for scipy's solvers),
        ``backend`` (the rows that ran, ``"numba"`` or ``"numpy"``),
        ``constraint_violation``, ``trajectory``, ...

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, naming the argument (an IPOPT option IPOPT refuses
        included).

    See Also
    --------
    OCPSolver : the same transcription built once, re-solved from new initial states
        with warm starts (model-predictive control).

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(          # x' = u, J = int u^2/2 + x^2/2
    ...     lambda t, z, u: u, lambda t, z, u: 0.5 * (u[:, 0]**2 + z[:, 0]**2),
    ...     q=1.0, vectorized=True, autonomous=True)
    >>> res = invimbed.solve_ocp(problem, [1.0], p=0.0, intervals=10, n_controls=1,
    ...                          solver="slsqp")
    >>> bool(res.success), res.controls.shape
    (True, (10, 1))
    """
    return OCPSolver(problem, x, p=p, intervals=intervals, grid=grid, n_controls=n_controls,
                     control_bounds=control_bounds, state_bounds=state_bounds,
                     path_constraints=path_constraints, path_points=path_points,
                     final_state=final_state, terminal_equality=terminal_equality,
                     terminal_inequality=terminal_inequality, free_horizon=free_horizon,
                     horizon_bounds=horizon_bounds, initial_guess=initial_guess,
                     solver=solver, hessian=hessian, tol=tol, constraint_tol=constraint_tol,
                     max_iter=max_iter, solver_options=solver_options, callback=callback,
                     rtol=rtol, atol=atol, method=method, max_steps=max_steps,
                     trajectory_points=trajectory_points, transcription=transcription,
                     collocation_degree=collocation_degree, accuracy=accuracy,
                     integrator=integrator, backend=backend).solve()


class OCPSolver:
    r"""An optimal-control problem transcribed once, to be solved again and again: the
    solver of a receding horizon (model-predictive control).

    The constructor does what `solve_ocp` does before it solves: it checks the
    arguments, generates the problem's derivative code, builds the multiple-shooting
    NLP (its variables, bounds, constraints and sparsity) and the NLP solver (IPOPT's
    problem and options). `solve` then solves from any initial state, by default
    warm-started from the last solution moved ``shift`` intervals on: the controls and
    node states, and with IPOPT the multipliers of the constraints and bounds
    (``warm_start_init_point``). ``solve_ocp(problem, x, **kw)`` is
    ``OCPSolver(problem, x, **kw).solve()``. Details: docs/optimization.md, "A solver
    built once: OCPSolver"; the paper's problem is eq. (4).

    Parameters
    ----------
    problem : BolzaProblem
        As in `solve_ocp`.
    x : array_like, shape (N,)
        An initial state: it sets the state size and is where `solve` starts while it
        is given no other.
    p, intervals, grid, n_controls, control_bounds, state_bounds, path_constraints, \
path_points, final_state, terminal_equality, terminal_inequality, free_horizon, \
horizon_bounds, initial_guess, solver, hessian, tol, constraint_tol, max_iter, \
solver_options, callback, rtol, atol, method, max_steps, trajectory_points, \
transcription, collocation_degree, accuracy, integrator, backend
        The keywords of `solve_ocp`, with its meanings and defaults. ``initial_guess``
        is the start of the first `solve` (and of every cold one).

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, naming the argument, as `solve_ocp`.

    Examples
    --------
    >>> import invimbed, sympy as sp
    >>> t, x, u = sp.symbols("t x u")           # x' = x (1 - x) + u, J = int x^2 + u^2
    >>> problem = invimbed.from_sympy(t, [x], [u], [x * (1 - x) + u], x**2 + u**2, q=1.0)
    >>> mpc = invimbed.OCPSolver(problem, [1.0], p=0.0, intervals=10, control_bounds=(-1, 1),
    ...                          solver="slsqp")
    >>> first = mpc.solve()                       # cold, from x = 1
    >>> second = mpc.solve([0.9])                 # from a new state, warm-started
    >>> bool(first.success and second.success), second.warm_start
    (True, True)
    """

    def __init__(self, problem: BolzaProblem, x: Any, *, p: float | None = None,
                 intervals: int = 20, grid: Any = None, n_controls: int | None = None,
                 control_bounds: Any = None, state_bounds: Any = None,
                 path_constraints: Callable | None = None, path_points: int = 0,
                 final_state: Any = None, terminal_equality: Callable | None = None,
                 terminal_inequality: Callable | None = None, free_horizon: bool = False,
                 horizon_bounds: Any = None, initial_guess: Any = None,
                 solver: str = "auto", hessian: str = "auto",
                 tol: float = 1e-6, constraint_tol: float = 1e-6,
                 max_iter: int = 1000, solver_options: dict | None = None,
                 callback: Callable | None = None, rtol: float = 1e-8, atol: float = 1e-10,
                 method: str = "RK45", max_steps: int = 10_000,
                 trajectory_points: int = 10, transcription: str = "shooting",
                 collocation_degree: int = 3, accuracy: Accuracy | None = None,
                 integrator: Integrator | None = None, backend: str = "auto") -> None:
        x0 = initial_state(problem, x, batch=False)[0][0]
        N, q = x0.size, problem.q
        tau, p0 = _grid(grid, p, intervals, q)
        K = tau.size - 1
        M = _control_size(problem, n_controls, control_bounds, initial_guess)
        problem.check_sizes(N, M)
        check_choice(solver, "solver", SOLVERS)
        check_choice(transcription, "transcription", TRANSCRIPTIONS)
        check_choice(hessian, "hessian", HESSIANS)
        check_choice(backend, "backend", ROW_BACKENDS)
        integrator = settle(Integrator, integrator, {"method": (method, "RK45"),
                                                     "max_steps": (max_steps, 10_000)},
                            argument="integrator", caller="solve_ocp",
                            unused=("step", "first_step", "max_step", "min_step"),
                            choices={"method": ENSEMBLE_METHODS})
        tol, accuracy = kkt_tolerance(settle(
            Accuracy, accuracy, {"tol": (tol, 1e-6), "rtol": (rtol, 1e-8),
                                 "atol": (atol, 1e-10)},
            argument="accuracy", caller="solve_ocp",
            unused=("max_order", "ratio_test", "fallback")))
        constraint_tol = as_real(constraint_tol, "constraint_tol", positive=True)
        rtol, atol, method = accuracy.rtol, accuracy.atol, integrator.method
        max_iter = as_positive_int(max_iter, "max_iter")
        max_steps = integrator.max_steps or 10_000
        trajectory_points = as_int(trajectory_points, "trajectory_points", minimum=2)
        path_points = as_int(path_points, "path_points", minimum=0)
        check_callable(path_constraints, "path_constraints", allow_none=True)
        check_callable(terminal_equality, "terminal_equality", allow_none=True)
        check_callable(terminal_inequality, "terminal_inequality", allow_none=True)
        check_callable(callback, "callback", allow_none=True)
        if not isinstance(free_horizon, (bool, np.bool_)):
            raise TypeError(f"`free_horizon` must be True or False, but got "
                            f"{describe(free_horizon)}")
        if horizon_bounds is not None and not free_horizon:
            raise ValueError("`horizon_bounds` is given but `free_horizon` is False: the "
                             "horizon is fixed; pass free_horizon=True to optimise it")
        if solver_options is not None and not isinstance(solver_options, dict):
            raise TypeError(f"`solver_options` must be a dict, but got "
                            f"{describe(solver_options)}")
        if solver == "ipopt" and not have_ipopt():
            raise ValueError("solver='ipopt' needs cyipopt: pip install \"invimbed[ipopt]\" "
                             "(the cyipopt-wheels wheel, IPOPT bundled), or cyipopt built against "
                             "a system IPOPT; or use solver='slsqp' or 'trust-constr'")
        name = ("ipopt" if have_ipopt() else "slsqp") if solver == "auto" else solver

        H0 = q - p0
        u_lo, u_hi = (as_pair(control_bounds, M, "control_bounds") if control_bounds is not None
                      else (np.full(M, -np.inf), np.full(M, np.inf)))
        x_lo, x_hi = (as_pair(state_bounds, N, "state_bounds") if state_bounds is not None
                      else (np.full(N, -np.inf), np.full(N, np.inf)))
        target = None
        if final_state is not None:
            target = as_float_array(final_state, "final_state")
            if target.shape != (N,):
                raise ValueError(f"`final_state` must have shape ({N},) (NaN for a free entry), "
                                 f"but got shape {target.shape}")
            if np.all(np.isnan(target)):
                raise ValueError("`final_state` has no entry that is not NaN")
        provider = problem.provider(N, M)
        self.backend = rows_backend(backend, provider, transcription)  # the rows that run
        if transcription == "collocation":
            if hessian == "auto":            # its own exact Hessian
                hessian = "exact"
            check_collocation(hessian, path_points)
            sh = Collocation(provider, x0, q, tau, horizon=H0, m=M,
                             degree=as_positive_int(collocation_degree, "collocation_degree"),
                             free_horizon=bool(free_horizon))
        else:
            hessian = _hessian_choice(hessian, provider)
            sh = Shooting(provider, x0, q, tau, free_horizon=bool(free_horizon),
                          horizon=H0, m=M, method=method, rtol=rtol, atol=atol,
                          max_steps=max_steps, backend=self.backend)
        self.hessian = hessian if name == "ipopt" else None
        S_guess, U_guess, H_guess = _initial_guess(initial_guess, sh, target, u_lo, u_hi)
        self.sh, self.target, self.u_bounds = sh, target, (u_lo, u_hi)
        self.initial_guess = initial_guess
        problem.check_shapes(float(sh.times(H_guess)[0]), x0[None, :], U_guess[0], control="u")

        lb = np.full(sh.n_vars, -np.inf)
        ub = np.full(sh.n_vars, np.inf)
        for k in range(K):
            lb[sh.u_index(k)], ub[sh.u_index(k)] = u_lo, u_hi
            lb[sh.s_index(k + 1)], ub[sh.s_index(k + 1)] = x_lo, x_hi
        if transcription == "collocation":            # the interior collocation states
            inner = sh.inner_positions()
            lb[inner], ub[inner] = np.resize(x_lo, inner.size), np.resize(x_hi, inner.size)
        if free_horizon:
            h_lo, h_hi = (as_pair(horizon_bounds, 1, "horizon_bounds")
                          if horizon_bounds is not None else
                          (np.array([1e-6 * H0]), np.array([np.inf])))
            if h_hi[0] <= 0:
                raise ValueError(f"`horizon_bounds` must allow a positive horizon, but got "
                                 f"high = {h_hi[0]}")
            lb[-1], ub[-1] = max(h_lo[0], 1e-12 * H0), h_hi[0]
        blocks = [Defects(sh)]
        if target is not None:
            blocks.append(FinalState(sh, target))
        for fn, eq, label in ((terminal_equality, True, "terminal_equality"),
                              (terminal_inequality, False, "terminal_inequality")):
            if fn is not None:
                blocks.append(Terminal(sh, fn, eq, label, S_guess[-1]))
        if path_constraints is not None:
            blocks.append(Path(sh, path_constraints, path_points, "path_constraints",
                               u_guess=U_guess[0]))
        if path_points and (np.any(np.isfinite(x_lo)) or np.any(np.isfinite(x_hi))):
            blocks.append(Path(sh, None, path_points, "state_bounds", nodes=False, lo=x_lo,
                               hi=x_hi))
        nlp = ShootingNLP(sh, blocks, lb, ub)
        if transcription == "shooting":
            sh.generate()
        self.nlp = nlp
        self.tol, self.constraint_tol = tol, constraint_tol
        self.trajectory_points = trajectory_points
        self._horizon_hint = free_horizon and horizon_bounds is None
        self._run = make_runner(name, nlp, tol=tol, constraint_tol=constraint_tol,
                                max_iter=max_iter, options=solver_options,
                                callback=callback, hessian=hessian)
        self._last: tuple | None = None        # (w, IPOPT's multipliers) of the last solve

    def solve(self, x: Any = None, *, initial_guess: Any = None, warm_start: bool = True,
              shift: int = 1) -> OCPResult:
        """Solve from the initial state ``x``, warm-started.

        Parameters
        ----------
        x : array_like, shape (N,), optional
            The initial state ``z(p)``; the last one given (at first the constructor's)
            without it.
        initial_guess : OptimizeResult or dict, optional
            A start as `solve_ocp` takes it; it replaces the warm start.
        warm_start : bool, default True
            Start from the last solution moved ``shift`` intervals on (with IPOPT,
            its multipliers too); False, or before any solution: a cold start (the
            constructor's ``initial_guess``, or the straight line to the target).
        shift : int, default 1
            Intervals to move the last solution on: the intervals that passed since
            it was found (0: the same window again).

        Returns
        -------
        OCPResult
            As `solve_ocp` returns it, with ``warm_start`` (whether this solve was
            warm-started).
        """
        if not isinstance(warm_start, (bool, np.bool_)):
            raise TypeError(f"`warm_start` must be True or False, but got "
                            f"{describe(warm_start)}")
        shift = as_int(shift, "shift", minimum=0)
        if x is not None:
            self.nlp.set_initial_state(_state(x, self.sh.n))
        nlp, sh = self.nlp, self.sh
        warm = None
        if initial_guess is None and warm_start and self._last is not None:
            w0, warm = moved(*self._last, nlp, shift)     # collocation's points too
        else:
            guess = self.initial_guess if initial_guess is None else initial_guess
            S, U, H = _initial_guess(guess, sh, self.target, *self.u_bounds)
            w0 = np.clip(sh.pack(S, U, H), nlp.lb, nlp.ub)
        try:
            nlp.objective(w0)
        except SolverFailure as exc:
            what = "the warm start (the last solution, moved on)" if warm is not None else (
                "the initial guess")
            raise ValueError(f"{what} cannot be integrated: {exc}; give a better "
                             f"`initial_guess`") from exc
        run = self._run(w0, warm)
        res = result_fields(nlp, run, self.tol, self.constraint_tol, self.trajectory_points)
        res["hessian"] = self.hessian
        res["backend"] = self.backend
        res["constraint_derivatives"] = {b.name: b.code.source for b in nlp.blocks
                                         if hasattr(b, "code")}
        res["warm_start"] = warm is not None or (initial_guess is None and warm_start
                                                 and self._last is not None)
        if self._horizon_hint:
            res["message"] += runaway_horizon(res, float(sh.unpack(w0)[2]), nlp.lb[-1])
        if res["status"] != Status.FAILED:
            mult = (None if run.bound_multipliers is None else
                    (run.multipliers[0], *run.bound_multipliers))
            self._last = (run.w, mult)
        return OCPResult(res)


def kkt_tolerance(accuracy: Accuracy) -> tuple[float, Accuracy]:
    """``(tol, accuracy)`` of `solve_ocp`: its ``tol`` is one KKT tolerance (a pair only
    with equal parts; default 1e-6), and the ensemble's ``rtol``, ``atol`` default to
    1e-8, 1e-10."""
    pair = accuracy.target or (1e-6, 1e-6)
    if pair[0] != pair[1] or pair[0] <= 0:
        raise ValueError(f"`tol` of solve_ocp is the KKT tolerance, one positive float, but "
                         f"got {accuracy.tol!r}")
    return pair[0], accuracy.with_tolerances(1e-8, 1e-10)


def _hessian_choice(hessian: str, provider) -> str:
    """The Hessian `run_solver` gets: ``"auto"`` resolved by the provider's exactness;
    ``"exact"`` refused where its second derivatives would be finite differences."""
    exact = has_exact_second_derivatives(provider)
    source = getattr(provider, "derivative_source", provider.name)
    if hessian == "auto":
        return "exact" if exact else "limited-memory"
    if hessian == "exact" and not exact:
        raise ValueError(
            f"`hessian='exact'` needs exact second derivatives of the dynamics and losses, "
            f"but this problem's derivatives are {source!r}; write it "
            f"with `invimbed.from_sympy` or in traceable numpy, or use "
            f"hessian='finite-differences' or 'limited-memory'")
    return hessian


def _state(x: Any, size: int | None) -> np.ndarray:
    """The initial state ``x``: one finite state of shape (N,), ``size`` where known."""
    x0 = as_float_array(x, "x")
    if x0.ndim != 1 or x0.size == 0 or (size is not None and x0.size != size):
        raise ValueError(f"`x` must be one initial state, shape "
                         f"({'N' if size is None else size},), but got shape {x0.shape}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("`x` must be finite")
    return x0


def _grid(grid: Any, p: Any, intervals: Any, q: float) -> tuple[np.ndarray, float]:
    """``(tau, p)``: the nodes as fractions of the horizon, and the start time."""
    if grid is not None:
        g = as_float_array(grid, "grid")
        if g.ndim != 1 or g.size < 2:
            raise ValueError(f"`grid` must be the node times, a 1-d array of at least 2, but "
                             f"got shape {g.shape}")
        if not np.all(np.isfinite(g)) or not np.all(np.diff(g) > 0):
            raise ValueError("`grid` must be finite and strictly increasing")
        if abs(g[-1] - q) > 1e-12 * max(1.0, abs(q)):
            raise ValueError(f"`grid` must end at the problem's q = {q}, but ends at {g[-1]}")
        if p is not None and abs(as_real(p, "p") - g[0]) > 1e-12 * max(1.0, abs(g[0])):
            raise ValueError(f"`p` = {p} and `grid[0]` = {g[0]} disagree; give one of them")
        return (g - g[0]) / (g[-1] - g[0]), float(g[0])
    if p is None:
        raise ValueError("`p` (the start time) is required unless `grid` is given")
    p = as_real(p, "p")
    if p >= q:
        raise ValueError(f"`p` must be < q = {q}, but got p = {p}")
    K = as_positive_int(intervals, "intervals")
    return np.linspace(0.0, 1.0, K + 1), p


def _control_size(problem: BolzaProblem, n_controls: Any, bounds: Any, guess: Any) -> int:
    prov = problem.derivative_provider
    if n_controls is not None:
        return as_positive_int(n_controls, "n_controls")
    if prov is not None and getattr(prov, "n_theta", None):
        return int(prov.n_theta)
    if guess is not None and _get(guess, "controls") is not None:
        return int(np.shape(_get(guess, "controls"))[-1])
    if bounds is not None and bounds_size(bounds) is not None:
        return bounds_size(bounds)
    raise ValueError("the control size M is unknown: pass `n_controls=M` (or "
                     "`control_bounds`, or an `initial_guess` with controls)")
