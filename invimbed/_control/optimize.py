"""`optimize_control`: direct optimisation of an open-loop control (docs/optimization.md).

`optimize_control` minimises the exact ``J(w; p, x)`` over the parameters ``w`` of an
open-loop control with ``scipy.optimize.minimize``. The objective and the reported
``fun`` always come from `solve_adjoint` (the ensemble, exact to the tolerances); the
gradient ``dJ/dw`` comes from the same exact solve (``gradient="adjoint"``, default) or
from one imbedding sweep (``gradient="imbedding"``, eq. (32)), whose accuracy is then
estimated at the solution and reported. Its companion for the depth is
`invimbed._control.depth.optimal_depth`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import Bounds, OptimizeResult, minimize

from .._core.reference.adjoint import solve_adjoint
from .._core.problem.open_loop import OpenLoopControl
from .._core.derivatives import DerivativeOrderError
from .._core.sweep.imbedding import solve_imbedding
from .._core.problem.bolza import BolzaProblem
from .._core.results.families import ControlResult
from .._core.results.status import Status
from .._core.inputs.validation import as_bool, as_int, as_real, as_state, check_choice, describe
from .._progress import ProgressBar
from .options import SolverFailure, split_solve_kwargs

#: ``scipy.optimize.minimize`` methods that use no gradient (``jac`` is not passed).
GRADIENT_FREE = ("nelder-mead", "powell", "cobyla", "cobyqa")
#: Methods that accept ``bounds``.
BOUNDED = ("nelder-mead", "l-bfgs-b", "tnc", "slsqp", "powell", "trust-constr", "cobyla",
           "cobyqa")
#: The methods of ``scipy.optimize.minimize`` (any case).
MINIMIZE_METHODS = ("nelder-mead", "powell", "cg", "bfgs", "newton-cg", "l-bfgs-b", "tnc",
                    "cobyla", "cobyqa", "slsqp", "trust-constr", "dogleg", "trust-ncg",
                    "trust-exact", "trust-krylov")
#: The default tolerance of the exact solve, against which gradient errors are judged.
DEFAULT_RTOL = float(inspect.signature(solve_adjoint).parameters["rtol"].default)


def _mean_grad(param_grad: np.ndarray, n_params: int) -> np.ndarray:
    """The batch mean of one depth's ``param_grad`` (shape (n_w,) or (B, n_w))."""
    return np.mean(np.reshape(param_grad, (-1, n_params)), axis=0)


def optimize_control(problem: BolzaProblem, x: Any, control: OpenLoopControl, *,
                     p: float | None = None, gradient: str = "adjoint",
                     method: str | Callable = "L-BFGS-B", bounds: Any = None,
                     options: dict | None = None, callback: Callable | None = None,
                     progress: bool = False, trajectory_points: int = 201,
                     **solve_kwargs: Any) -> ControlResult:
    r"""Minimise the exact ``J(w; p, x)`` over the parameters ``w`` of an open-loop control.

    ``scipy.optimize.minimize`` on ``w -> J(w; p, x)``; the value is always the exact
    ``J`` of `solve_adjoint`, and ``dJ/dw`` comes from the same solve or from the sweep's
    ``param_grad`` (eq. (32)). Details: docs/optimization.md, "optimize_control in detail".

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The input; for a batch the objective is the mean of ``J`` over the inputs.
    control : Constant, PiecewiseConstant or Control
        The control family and the starting point ``w0 = control.w``.
    p : float, optional
        The depth, ``p < q`` (default ``control.knots[0]``, otherwise ``problem.q - 1``).
    gradient : {"adjoint", "imbedding"}, default "adjoint"
        ``dJ/dw`` exact from the value's solve, or from one sweep per evaluation (the
        closure's error estimated at the solution, with a warning above ``rtol``).
    method : str or callable, default "L-BFGS-B"
        Any ``scipy.optimize.minimize`` method (gradient-free ones get the value only).
    bounds : sequence of (low, high) pairs, one pair, or scipy.optimize.Bounds, optional
        Bounds on ``w``; a single pair applies to every parameter.
    options : dict, optional
        Passed to ``minimize`` (e.g. ``{"maxiter": 200, "gtol": 1e-10}``).
    callback : callable ``callback(intermediate_result)``, optional
        Called after each iteration; returning ``True`` stops (``status`` -4,
        `invimbed.Status.STOPPED`).
    progress : bool, default False
        Show a progress bar.
    trajectory_points : int, default 201
        Number of times in the returned trajectory.
    **solve_kwargs
        Solver settings (``rtol``, ``atol``, ``solver_method``, ``closure``, ...), split
        between the exact solve and the sweep; an unknown keyword raises ``TypeError``.

    Returns
    -------
    ControlResult
        scipy's (``x = w*``, ``fun`` = the exact ``J(w*)``, ``jac``, ``success``, ...) plus
        ``control`` (``control.with_params(w*)``), ``jac_exact``, ``gradient_exact``,
        ``gradient_error``, ``warnings``, ``trajectory``, ``nsolve``. ``status`` is an
        `invimbed.Status`: 0 where scipy reports success, -2 where it stopped short
        (scipy's own code in ``solver_status``), -4 where ``callback`` stopped it, -1
        where a solve failed (which ends the optimisation, with the solver's message):
        `ControlResult.STATUS_CODES` (docs/results-and-status.md). The notes are in
        ``warnings``, not in ``message``.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments; the message names the argument.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(
    ...     lambda t, z, u: -z + u, running_loss=lambda t, z, u: 0.5 * (z @ z + u @ u),
    ...     terminal_loss=lambda z: 0.5 * z @ z, q=1.0)
    >>> control = invimbed.PiecewiseConstant(np.linspace(0, 1, 5), np.zeros(4))
    >>> res = invimbed.optimize_control(problem, [1.0], control)
    >>> bool(res.success), res.control.values.shape, res.gradient_exact
    (True, (4, 1), True)
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    if not isinstance(control, OpenLoopControl):
        raise TypeError("`control` must be an invimbed control (Constant, PiecewiseConstant, "
                        f"Control) whose parameters are optimised, but got {describe(control)}")
    if control.n_params == 0:
        raise ValueError("`control` has no parameters to optimise (n_params = 0)")
    check_choice(gradient, "gradient", ("adjoint", "imbedding"))
    if not (isinstance(method, str) or callable(method)):
        raise TypeError(f"`method` must be a scipy.optimize.minimize method name or a "
                        f"callable, but got {describe(method)}")
    if isinstance(method, str) and method.lower() not in MINIMIZE_METHODS:
        raise ValueError(f"`method` must be a scipy.optimize.minimize method (one of "
                         f"{', '.join(map(repr, MINIMIZE_METHODS))}, any case) or a callable, "
                         f"but got {method!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"`options` must be a dict, but got {describe(options)}")
    if callback is not None and not callable(callback):
        raise TypeError(f"`callback` must be callable, but got {describe(callback)}")
    trajectory_points = as_int(trajectory_points, "trajectory_points", minimum=2)
    progress = as_bool(progress, "progress")
    exact_kw, sweep_kw, sweep_only = split_solve_kwargs(solve_kwargs, "optimize_control",
                                                        "solver_method")
    for key in ("rtol", "atol"):    # read here too (the error scale, the trajectory)
        if key in solve_kwargs:
            as_real(solve_kwargs[key], key, positive=True)
    xb, batched = as_state(x, None, "x")
    p = _default_depth(problem, control) if p is None else as_real(p, "p")
    if p >= problem.q:
        raise ValueError(f"`p` must be < q = {problem.q} (at p = q the loss does not depend "
                         f"on the control), but got p = {p}")
    lo = getattr(control, "knots", None)
    if lo is not None and not (lo[0] - 1e-12 * max(1.0, abs(lo[0])) <= p):
        raise ValueError(f"`p` = {p} is below the control's first knot {lo[0]}: the control "
                         f"must cover [p, q]")
    method_name = method.lower() if isinstance(method, str) else None
    use_jac = method_name not in GRADIENT_FREE
    scipy_bounds = _as_bounds(bounds, control.n_params)
    if scipy_bounds is not None and method_name is not None and method_name not in BOUNDED:
        raise ValueError(f"`bounds` are not supported by method={method!r}; use one of "
                         f"'L-BFGS-B', 'TNC', 'SLSQP', 'trust-constr', 'Powell', 'Nelder-Mead'")

    warnings: list[str] = []
    if gradient == "adjoint" and sweep_only:
        one = len(sweep_only) == 1
        warnings.append(f"{', '.join(sweep_only)} appl{'ies' if one else 'y'} to "
                        f"gradient='imbedding' only and {'was' if one else 'were'} not used: "
                        f"the value and the gradient are exact (solve_adjoint)")
    use_sweep = gradient == "imbedding" and use_jac
    if gradient == "imbedding" and not use_jac:
        warnings.append(f"method={method!r} uses no gradient: no imbedding sweep was run")
    check_estimate = as_bool(sweep_kw.pop("estimate_error", True), "estimate_error")
    sweep_kw["estimate_error"] = False          # estimated once, at the solution
    rtol = float(exact_kw.get("rtol", DEFAULT_RTOL))
    n_w = control.n_params
    state: dict[str, Any] = {"nfev": 0, "nsolve": 0, "last_good": None, "failure": None,
                             "cache": {}, "g0_exact": None}

    def exact_solve(w: np.ndarray) -> tuple[float, np.ndarray]:
        res = solve_adjoint(problem, x, [p], control=control.with_params(w), **exact_kw)
        state["nfev"] += int(res.nfev)
        state["nsolve"] += 1
        for note in res.get("warnings", []):
            if note not in warnings:
                warnings.append(note)
        if not res.success:
            state["failure"] = (w.copy(), "exact solve (solve_adjoint)", res.message)
            raise SolverFailure(res.message)
        return float(np.mean(res.value[0])), _mean_grad(res.param_grad[0], n_w)

    def sweep_solve(w: np.ndarray, **extra: Any):
        kw = {**sweep_kw, **extra}
        res = solve_imbedding(problem, x, [p], control=control.with_params(w), **kw)
        state["nfev"] += int(res.nfev)
        state["nsolve"] += 1
        # status -2 (not converged): finite fields whose approximation the result reports
        # through `gradient_error`; only a failed integration stops the optimiser
        if not res.success and res.status != Status.NOT_CONVERGED:
            state["failure"] = (w.copy(), "imbedding sweep (solve_imbedding)", res.message)
            raise SolverFailure(res.message)
        return res

    def evaluate(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(J, the optimiser's gradient, the exact gradient)`` at ``w``."""
        key = w.tobytes()
        if key in state["cache"]:
            return state["cache"][key]
        value, g_exact = exact_solve(w)
        grad = _mean_grad(sweep_solve(w).param_grad[0], n_w) if use_sweep else g_exact
        out = (value, grad, g_exact)
        state["cache"] = {key: out}   # keep the last one only
        state["last_good"] = (w.copy(),) + out
        if state["g0_exact"] is None:
            state["g0_exact"] = g_exact
        return out

    def fun(w):
        value, grad, _ = evaluate(np.asarray(w, dtype=float))
        return (value, grad) if use_jac else value

    bar = ProgressBar(progress, (options or {}).get("maxiter"), "optimize_control")
    nit = [0]
    stopped = [False]

    def scipy_callback(intermediate_result):
        nit[0] += 1
        w = np.asarray(intermediate_result.x, dtype=float)
        cached = state["cache"].get(w.tobytes())
        if cached is None and state["last_good"] is not None:
            cached = state["last_good"][1:]
        value = float(getattr(intermediate_result, "fun", np.nan)) if cached is None else cached[0]
        bar.update(nit[0], value)
        if callback is not None:
            info = OptimizeResult(x=w.copy(), fun=value, nit=nit[0],
                                  control=control.with_params(w))
            if cached is not None and use_jac:
                info["jac"] = cached[1].copy()
            if callback(info) is True:
                stopped[0] = True
                raise StopIteration

    w0 = np.asarray(control.w, dtype=float).copy()
    final = None
    try:
        # the first solve validates what the solvers read (errors name the argument) and
        # is cached for scipy's first call
        evaluate(w0)
        res = minimize(fun, w0, jac=True if use_jac else None, method=method,
                       bounds=scipy_bounds, options=options, callback=scipy_callback)
        # `fun` is the exact J at the returned x (a cache hit unless the method returned
        # a point it did not evaluate last)
        final = evaluate(np.asarray(res.x, dtype=float))
        code = (Status.STOPPED if stopped[0] else
                Status.SUCCESS if res.success else Status.NOT_CONVERGED)
        fields = dict(res, solver_status=int(res.status), status=code, success=code.success)
    except SolverFailure:
        w_fail, which, msg = state["failure"]
        good = state["last_good"]
        w_best = good[0] if good is not None else w0
        fields = dict(x=w_best, success=False, status=Status.FAILED, nit=nit[0],
                      solver_status=None, nfev=state["nsolve"],
                      message=f"The {which} failed at w = "
                              f"{np.array2string(w_fail, precision=6, threshold=8)}: {msg}")
        final = good[1:] if good is not None else None
    finally:
        bar.close()
    w_opt = np.asarray(fields["x"], dtype=float)
    if final is None:
        fields.update(fun=np.nan, jac=None, jac_exact=None)
    else:
        fields.update(fun=final[0], jac=final[1].copy(), jac_exact=final[2].copy())
    fields.update(control=control.with_params(w_opt), p=p, gradient=gradient)

    gradient_error: float | None = 0.0
    if gradient == "imbedding" and use_jac:
        gradient_error = None
        if not check_estimate:
            warnings.append("the imbedding gradient's error was not estimated "
                            "(estimate_error=False): it is not known to be exact")
        elif final is not None:
            try:
                chk = sweep_solve(w_opt, estimate_error=True)
            except DerivativeOrderError as exc:
                warnings.append(f"the imbedding gradient's error could not be estimated "
                                f"({exc}): it is not known to be exact")
            except SolverFailure as exc:
                warnings.append(f"the imbedding gradient's error could not be estimated "
                                f"(the check sweep failed: {exc}): it is not known to be exact")
            else:
                if chk.error_estimate is None:
                    warnings.append(f"the imbedding gradient's error could not be estimated "
                                    f"(closure={chk.closure!r} has no error estimate): it is "
                                    f"not known to be exact")
                else:
                    err = np.mean(np.abs(np.reshape(chk.error_estimate.param_grad[0],
                                                    (-1, n_w))), axis=0)
                    scale = max(np.max(np.abs(state["g0_exact"])), np.max(np.abs(final[2])))
                    e = float(np.max(err))
                    gradient_error = e / scale if scale > 0 else (0.0 if e == 0 else np.inf)
        if gradient_error is not None and gradient_error > rtol:
            warnings.append(
                f"the imbedding gradient is approximate (estimated relative error "
                f"{gradient_error:.1g} > rtol = {rtol:g}): `fun` is the exact J at `x`, but "
                f"`x` was found with an approximate gradient and is not an exact stationary "
                f"point of J (max |jac_exact| = {np.max(np.abs(final[2])):.2g} there); use "
                f"gradient='adjoint' for the exact optimum")
    elif gradient == "imbedding":
        gradient_error = None
    if final is None:                           # nothing was evaluated
        gradient_error = None
    tr_rtol = float(solve_kwargs.get("rtol", 1e-8))
    tr_atol = float(solve_kwargs.get("atol", 1e-10))
    return ControlResult(
        fields, gradient_error=gradient_error,
        gradient_exact=bool(final is not None and (gradient == "adjoint" or (
            use_jac and gradient_error is not None and gradient_error <= rtol))),
        warnings=warnings, nfev_solver=state["nfev"], nsolve=state["nsolve"],
        trajectory=forward_trajectory(problem, xb, batched, fields["control"], p,
                                      trajectory_points, rtol=min(tr_rtol, 1e-8),
                                      atol=min(tr_atol, 1e-10)))


def forward_trajectory(problem: BolzaProblem, xb: np.ndarray, batched: bool,
                       control: OpenLoopControl, p: float, points: int, *,
                       rtol: float = 1e-8, atol: float = 1e-10) -> OptimizeResult:
    """``z(t)`` on ``points`` times in ``[p, q]`` by a forward ``solve_ivp`` per smooth
    piece of the control (no step straddles a jump)."""
    B, N = xb.shape
    M = control.size
    q = problem.q
    prov = problem.provider(N, M)
    grid = np.linspace(p, q, points)
    ends = [p] + sorted(float(b) for b in control.breakpoints if p < b < q) + [q]
    z = np.full((points, B, N), np.nan)
    y = xb.ravel().copy()
    z[0] = xb
    ok, message = True, "forward solve reached q"
    for a, b in zip(ends[:-1], ends[1:]):
        piece = control.piece(0.5 * (a + b), a, b)

        def rhs(t, yy, piece=piece):
            th = np.broadcast_to(control.theta(t, piece), (B, M))
            return prov.derivative("f", t, yy.reshape(B, N), th).ravel()

        sel = (grid > a) & (grid <= b)
        sol = solve_ivp(rhs, (a, b), y, rtol=rtol, atol=atol, dense_output=True)
        if sol.status != 0:
            ok, message = False, f"forward solve failed at t = {sol.t[-1]:.6g}: {sol.message}"
            break
        if np.any(sel):
            z[sel] = sol.sol(grid[sel]).T.reshape(-1, B, N)
        y = sol.y[:, -1]
    theta = np.stack([control.theta(t, control.piece(t)) for t in grid])
    return OptimizeResult(t=grid, z=z if batched else z[:, 0], theta=theta, success=ok,
                          message=message)


def _default_depth(problem: BolzaProblem, control: OpenLoopControl) -> float:
    knots = getattr(control, "knots", None)
    if knots is not None:
        return float(knots[0])
    return problem.q - 1.0


def _as_bounds(bounds: Any, n: int) -> Bounds | None:
    """Normalise ``bounds`` to ``scipy.optimize.Bounds`` (or None), checking feasibility."""
    if bounds is None:
        return None
    if isinstance(bounds, Bounds):
        lb = np.broadcast_to(np.asarray(bounds.lb, dtype=float), (n,))
        ub = np.broadcast_to(np.asarray(bounds.ub, dtype=float), (n,))
    else:
        try:
            pairs = [bounds] if np.ndim(np.array(bounds, dtype=object)) == 1 else bounds
            pairs = [tuple(pair) for pair in pairs]
            lb = np.array([-np.inf if pr[0] is None else pr[0] for pr in pairs], dtype=float)
            ub = np.array([np.inf if pr[1] is None else pr[1] for pr in pairs], dtype=float)
            if any(len(pr) != 2 for pr in pairs):
                raise ValueError
        except (TypeError, ValueError, IndexError) as exc:
            raise ValueError("`bounds` must be a (low, high) pair, a sequence of n_params such "
                             f"pairs or scipy.optimize.Bounds, but got {describe(bounds)}") from exc
        if lb.size == 1:
            lb, ub = np.repeat(lb, n), np.repeat(ub, n)
        if lb.size != n:
            raise ValueError(f"`bounds` must have one (low, high) pair per parameter "
                             f"(n_params = {n}) or a single pair, but got {lb.size} pairs")
    if np.any(np.isnan(lb)) or np.any(np.isnan(ub)):
        raise ValueError("`bounds` must not contain NaN")
    bad = np.flatnonzero(lb > ub)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"`bounds` are infeasible: low > high for parameter {i} "
                         f"({lb[i]} > {ub[i]})")
    return Bounds(np.array(lb, dtype=float), np.array(ub, dtype=float))
