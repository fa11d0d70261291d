"""`solve_ocp`: optimal control by multiple shooting on the exact ensemble.

The transcription is `invimbed._control.ocp.shooting` (every shooting interval one row of one
ensemble solve, exact sensitivities), the constraints `invimbed._control.ocp.constraints`,
the NLP and our optimality check `invimbed._control.ocp.nlp`, the solvers
`invimbed._control.ocp.solvers`. This module checks the arguments, builds the NLP, runs it
and packs the result (docs/optimization.md, "Optimal control problems").
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.optimize import OptimizeResult

from ..._core.problem.open_loop import PiecewiseConstant
from ..._core.integrators.ensemble import ENSEMBLE_METHODS
from ..._core.problem.bolza import BolzaProblem
from ..._core.results.status import Status
from ..._core.setup.arguments import initial_state
from ..._core.setup.settings import Accuracy, Integrator, settle
from ..._core.inputs.validation import (as_float_array, as_int, as_positive_int, as_real,
                                        check_callable, check_choice, describe)
from .constraints import Defects, FinalState, Path, Terminal, as_pair, bounds_size
from .nlp import ShootingNLP, kkt_check
from .solvers import HESSIANS, SOLVERS, have_ipopt, run_solver
from ..options import SolverFailure
from .shooting import Shooting

#: The `invimbed.Status` members a `solve_ocp` result's ``status`` can hold, ``{code:
#: meaning}``: the subset of `invimbed.STATUS` that `solve_ocp` returns, in its words.
OCP_STATUS = {int(code): text for code, text in (
    (Status.SUCCESS, "optimal: our check of the KKT residual and of the constraint violation "
                     "passed (`tol`, `constraint_tol`)"),
    (Status.NOT_CONVERGED, "not optimal: the NLP solver stopped (its status and message are "
                           "in `solver_status`, `solver_message`) at a point that fails our "
                           "KKT check; `kkt` and `constraint_violation` say by how much"),
    (Status.FAILED, "an evaluation failed: the integration of a shooting interval, or a "
                    "constraint function not finite (the message names the interval or "
                    "the node)"),
    (Status.STOPPED, "stopped: `callback` stopped the solver at a point that fails our KKT "
                     "check; `kkt` and `constraint_violation` say by how much"),
)}


def solve_ocp(problem: BolzaProblem, x: Any, *, p: float | None = None,
              intervals: int = 20, grid: Any = None, n_controls: int | None = None,
              control_bounds: Any = None, state_bounds: Any = None,
              path_constraints: Callable | None = None, path_points: int = 0,
              final_state: Any = None, terminal_equality: Callable | None = None,
              terminal_inequality: Callable | None = None, free_horizon: bool = False,
              horizon_bounds: Any = None, initial_guess: Any = None,
              solver: str = "auto", hessian: str = "limited-memory", tol: float = 1e-6, constraint_tol: float = 1e-6,
              max_iter: int = 1000, solver_options: dict | None = None,
              callback: Callable | None = None, rtol: float = 1e-8, atol: float = 1e-10,
              method: str = "RK45", max_steps: int = 10_000,
              trajectory_points: int = 10, accuracy: Accuracy | None = None,
              integrator: Integrator | None = None) -> OptimizeResult:
    r"""Solve an optimal-control problem by multiple shooting with an NLP solver.

    Minimises ``J`` of eq. (4) from ``z(p) = x`` over controls constant on each interval
    of a grid on ``[p, q]``, all intervals one exact ensemble solve. Details:
    docs/optimization.md, "solve_ocp in detail".

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
    solver, hessian : str, default "auto", "limited-memory"
        ``"ipopt"`` (``cyipopt``, the default where installed), ``"trust-constr"`` or
        ``"slsqp"``; IPOPT's Hessian by L-BFGS or ``"finite-differences"``.
    tol, constraint_tol : float, default 1e-6
        The KKT tolerance of our check; the largest constraint violation accepted.
    max_iter, solver_options : int (default 1000), dict
        The NLP solver's iterations and options (IPOPT's, or scipy's ``options``).
    callback : callable ``callback(iteration, objective, infeasibility)``, optional
        Called after each iteration; returning ``True`` stops the solver.
    rtol, atol, method, max_steps, trajectory_points
        The ensemble's tolerances, method (``"RK45"``, ``"RK23"``), steps per interval,
        and points per interval in ``trajectory`` (1e-8, 1e-10, "RK45", 10000, 10).
    accuracy, integrator : Accuracy, Integrator, optional
        ``tol`` (one float here: the KKT tolerance), ``rtol``, ``atol``; ``method``,
        ``max_steps``, as objects (docs/method.md, "Settings as objects"). A keyword left
        at its default defers to the object; one that sets a field the object sets
        differently is a ValueError naming both.

    Returns
    -------
    OptimizeResult
        ``success`` (our KKT check passed, never the solver's word alone), ``status``
        (an `invimbed.Status`, one of `OCP_STATUS`: 0 optimal, -2 not optimal, -4
        stopped by ``callback``, -1 an interval's integration or a constraint's value
        failed), ``fun`` (``J``), ``times``, ``states``, ``controls``, ``control``,
        ``horizon``, ``kkt`` (scaled as IPOPT's own check: docs/optimization.md),
        ``constraint_violation``, ``trajectory``, ...

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, naming the argument (an IPOPT option IPOPT refuses
        included).

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
    x0 = initial_state(problem, x, batch=False)[0][0]
    N, q = x0.size, problem.q
    tau, p0 = _grid(grid, p, intervals, q)
    K = tau.size - 1
    M = _control_size(problem, n_controls, control_bounds, initial_guess)
    problem.check_sizes(N, M)
    check_choice(solver, "solver", SOLVERS)
    check_choice(hessian, "hessian", HESSIANS)
    integrator = settle(Integrator, integrator, {"method": (method, "RK45"),
                                                 "max_steps": (max_steps, 10_000)},
                        argument="integrator", caller="solve_ocp",
                        unused=("step", "first_step", "max_step", "min_step"),
                        choices={"method": ENSEMBLE_METHODS})
    tol, accuracy = kkt_tolerance(settle(
        Accuracy, accuracy, {"tol": (tol, 1e-6), "rtol": (rtol, 1e-8), "atol": (atol, 1e-10)},
        argument="accuracy", caller="solve_ocp", unused=("max_order", "ratio_test", "fallback")))
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
        raise TypeError(f"`free_horizon` must be True or False, but got {describe(free_horizon)}")
    if horizon_bounds is not None and not free_horizon:
        raise ValueError("`horizon_bounds` is given but `free_horizon` is False: the horizon "
                         "is fixed; pass free_horizon=True to optimise it")
    if solver_options is not None and not isinstance(solver_options, dict):
        raise TypeError(f"`solver_options` must be a dict, but got {describe(solver_options)}")
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
    sh = Shooting(problem.provider(N, M), x0, q, tau, free_horizon=bool(free_horizon),
                  horizon=H0, m=M, method=method, rtol=rtol, atol=atol, max_steps=max_steps)
    S_guess, U_guess, H_guess = _initial_guess(initial_guess, sh, target, u_lo, u_hi)
    problem.check_shapes(float(sh.times(H_guess)[0]), x0[None, :], U_guess[0], control="u")

    lb = np.full(sh.n_vars, -np.inf)
    ub = np.full(sh.n_vars, np.inf)
    for k in range(K):
        lb[sh.u_index(k)], ub[sh.u_index(k)] = u_lo, u_hi
        lb[sh.s_index(k + 1)], ub[sh.s_index(k + 1)] = x_lo, x_hi
    if free_horizon:
        h_lo, h_hi = (as_pair(horizon_bounds, 1, "horizon_bounds")
                      if horizon_bounds is not None else (np.array([1e-6 * H0]), np.array([np.inf])))
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
    w0 = np.clip(sh.pack(S_guess, U_guess, H_guess), lb, ub)
    try:
        nlp.objective(w0)
    except SolverFailure as exc:
        raise ValueError(f"the initial guess cannot be integrated: {exc}; give a better "
                         f"`initial_guess`") from exc
    run = run_solver(name, nlp, w0, tol=tol, constraint_tol=constraint_tol,
                     max_iter=max_iter, options=solver_options, callback=callback,
                     hessian=hessian)
    res = _result(nlp, run, tol, constraint_tol, trajectory_points)
    if free_horizon and horizon_bounds is None:
        res["message"] += _runaway_horizon(res, H_guess, lb[-1])
    return res


def kkt_tolerance(accuracy: Accuracy) -> tuple[float, Accuracy]:
    """``(tol, accuracy)`` of `solve_ocp`: its ``tol`` is one KKT tolerance (a pair only
    with equal parts; default 1e-6), and the ensemble's ``rtol``, ``atol`` default to
    1e-8, 1e-10."""
    pair = accuracy.target or (1e-6, 1e-6)
    if pair[0] != pair[1] or pair[0] <= 0:
        raise ValueError(f"`tol` of solve_ocp is the KKT tolerance, one positive float, but "
                         f"got {accuracy.tol!r}")
    return pair[0], accuracy.with_tolerances(1e-8, 1e-10)


def _runaway_horizon(res: OptimizeResult, start: float, low: float) -> str:
    """A hint for a free horizon without `horizon_bounds` that ran away (ten times its
    start, or down to its default lower bound): nothing in the problem prices time."""
    H = float(res.horizon)
    if not (H >= 10 * start or H <= 10 * low) or (res.success and H > 10 * low):
        return ""
    grew = H >= 10 * start
    where = (f"grew from {start:.6g} to {H:.6g}" if grew else
             f"shrank from {start:.6g} to {H:.3g}, at its default lower bound {low:.3g}")
    return (f" The free horizon {where}: nothing in the problem prices time ("
            f"{'stretching' if grew else 'shrinking'} the horizon keeps lowering J), so it "
            f"runs to a bound; give `horizon_bounds=(low, high)`, or a cost of time.")


def _result(nlp: ShootingNLP, run, tol: float, constraint_tol: float,
            trajectory_points: int) -> OptimizeResult:
    sh = nlp.sh
    w = run.w
    S, U, H = sh.unpack(w)
    times = sh.times(H)
    res = OptimizeResult(x=w, states=S, controls=U.copy(), times=times, horizon=H,
                         p=float(times[0]), solver=run.solver, solver_status=run.solver_status,
                         solver_message=run.message, nit=run.nit)
    try:
        fun = nlp.objective(w)
        kkt = kkt_check(nlp, w, tol=tol, constraint_tol=constraint_tol,
                        multipliers=run.multipliers)
    except SolverFailure as exc:
        res.update(success=False, status=Status.FAILED, fun=np.nan, kkt=None,
                   constraint_violation=np.nan,
                   violations={}, message=f"{exc}. {run.message}", nsolve=nlp.n_solves,
                   nfev=nlp.nfev)
        return res
    res["fun"] = fun
    res["kkt"] = {"stationarity": kkt.stationarity, "complementarity": kkt.complementarity}
    res["constraint_violation"] = kkt.violation
    res["violations"] = nlp.violation_by_block(w)
    if run.failure is not None and not kkt.ok:
        res.update(success=False, status=Status.FAILED,
                   message=f"The solver stopped after {run.nit} iterations when {run.failure}. "
                           f"{run.message}")
    elif kkt.ok:
        res.update(success=True, status=Status.SUCCESS,
                   message=f"Optimal: KKT residual {max(kkt.stationarity, kkt.complementarity):.1e}"
                           f" <= tol = {tol:g}, constraint violation {kkt.violation:.1e} <= "
                           f"constraint_tol = {constraint_tol:g}. {run.message}")
    else:
        code = Status.STOPPED if run.stopped else Status.NOT_CONVERGED
        stop = "`callback` stopped the solver. " if run.stopped else ""
        res.update(success=False, status=code,
                   message=f"{stop}Not optimal: KKT residual (stationarity "
                           f"{kkt.stationarity:.1e}, "
                           f"complementarity {kkt.complementarity:.1e}; tol = {tol:g}), "
                           f"constraint violation {kkt.violation:.1e} (constraint_tol = "
                           f"{constraint_tol:g}) after {run.nit} iterations. {run.message}")
    res["control"] = PiecewiseConstant(times, U.copy())
    sol = nlp.solution(w)                       # cached, with its dense output
    res["defects"] = S[1:] - sol.F
    frac = np.linspace(0.0, 1.0, trajectory_points)
    tt, z, *_ = sh.interior(w, sol, frac)
    res["trajectory"] = OptimizeResult(t=tt.ravel(), z=z.reshape(-1, sh.n),
                                       u=np.repeat(U, trajectory_points, axis=0))
    res["nsolve"] = nlp.n_solves
    res["nfev"] = nlp.nfev
    return res


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


def _get(guess: Any, key: str) -> Any:
    if isinstance(guess, dict):
        return guess.get(key)
    return getattr(guess, key, None)


#: The keys of an `initial_guess` dict.
GUESS_KEYS = ("states", "controls", "horizon", "times")


def _guess_fractions(gt: Any, rows: int, nodes: int, sh: Shooting, what: str) -> np.ndarray:
    """The node fractions of a guess of ``rows`` nodes: its ``times`` as fractions of
    their span; without them this grid's own nodes where the guess has as many, and
    equally spaced fractions otherwise."""
    if gt is not None:
        if gt.size != rows:
            raise ValueError(f"`initial_guess['times']` has {gt.size} node times but "
                             f"`initial_guess['{what}']` has {nodes} rows (needs "
                             f"{rows} times)")
        return (gt - gt[0]) / (gt[-1] - gt[0])
    return sh.tau if rows == sh.K + 1 else np.linspace(0.0, 1.0, rows)


def _initial_guess(guess: Any, sh: Shooting, target: np.ndarray | None, u_lo: np.ndarray,
                   u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The start ``(S, U, H)``: the straight line to the target with controls 0 (clipped),
    or the warm start ``guess`` (a result or a dict of `GUESS_KEYS`) on this grid."""
    K, N, M = sh.K, sh.n, sh.m
    H = sh.horizon
    end = sh.x if target is None else np.where(np.isnan(target), sh.x, target)
    S = sh.x[None, :] + sh.tau[:, None] * (end - sh.x)[None, :]
    U = np.tile(np.clip(0.0, u_lo, u_hi), (K, 1))
    if guess is None:
        return S, U, H
    if not isinstance(guess, dict) and not hasattr(guess, "states"):
        raise TypeError(f"`initial_guess` must be a solve_ocp result or a dict with "
                        f"{', '.join(map(repr, GUESS_KEYS))}, but got {describe(guess)}")
    if isinstance(guess, dict) and not isinstance(guess, OptimizeResult):
        unknown = sorted(set(guess) - set(GUESS_KEYS), key=str)
        if unknown:
            raise ValueError(f"`initial_guess` has the unknown key(s) "
                             f"{', '.join(map(repr, unknown))}; the keys are "
                             f"{', '.join(map(repr, GUESS_KEYS))}")
    gH = _get(guess, "horizon")
    if gH is not None and sh.free_horizon:
        H = as_real(gH, "initial_guess['horizon']", positive=True)
    gS, gU = _get(guess, "states"), _get(guess, "controls")
    gt = _get(guess, "times")
    if gt is not None:
        gt = as_float_array(gt, "initial_guess['times']")
        if gt.ndim != 1 or gt.size < 2 or not np.all(np.isfinite(gt)) or not np.all(
                np.diff(gt) > 0):
            raise ValueError(f"`initial_guess['times']` must be the guess's node times, "
                             f"finite and strictly increasing, shape (K' + 1,), but got "
                             f"{describe(gt)}")
    if gS is not None:
        gS = as_float_array(gS, "initial_guess['states']")
        if gS.ndim != 2 or gS.shape[1] != N or gS.shape[0] < 2:
            raise ValueError(f"`initial_guess['states']` must have shape (K' + 1, {N}), but got "
                             f"shape {gS.shape}")
        gtau = _guess_fractions(gt, gS.shape[0], gS.shape[0], sh, "states")
        S = np.stack([np.interp(sh.tau, gtau, gS[:, i]) for i in range(N)], axis=1)
    if gU is not None:
        gU = as_float_array(gU, "initial_guess['controls']")
        if gU.ndim == 1 and M == 1:
            gU = gU[:, None]
        if gU.ndim != 2 or gU.shape[1] != M:
            raise ValueError(f"`initial_guess['controls']` must have shape (K', {M}), but got "
                             f"shape {gU.shape}")
        gtau = _guess_fractions(gt, gU.shape[0] + 1, gU.shape[0], sh, "controls")
        mid = 0.5 * (sh.tau[:-1] + sh.tau[1:])
        idx = np.clip(np.searchsorted(gtau, mid, side="right") - 1, 0, gU.shape[0] - 1)
        U = np.clip(gU[idx], u_lo, u_hi)
    return S, U, float(H)
