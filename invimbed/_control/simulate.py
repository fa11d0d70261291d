"""`simulate`: the closed loop of a feedback (or an open-loop control), and its true cost.

A control law is only as good as the cost it achieves when it is applied. `simulate`
integrates ``dz/dt = f(t, z, u)`` from ``z(q - h) = x`` to ``q`` with ``u = feedback(t, z)``
(or ``u = theta(t)`` for an open-loop control) and returns the trajectory and the cost
``J = int R dt + T(z(q))`` (eq. (4); docs/optimal-control.md, "Closed loop"). Every
(horizon, input) pair is one row: with ``"RK45"`` or ``"RK23"`` all rows run in one
vectorised solve of the exact ensemble (`invimbed._core.integrators.ensemble`, each row
with its own adaptive steps); with another scipy method one ``solve_ivp``-style solve per
horizon, batched over the inputs. `solve_optimal` checks its value ``V`` with the same
rows (`run_rows`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.optimize import OptimizeResult

from .._core.reference.adjoint import _solve as solve_budgeted
from .._core.problem.open_loop import OpenLoopControl
from .._core.results.failures import DONE, NONFINITE, row_failure, row_failure_reason
from .._core.integrators import DEFAULT_MAX_STEPS, SCIPY_METHODS
from .._core.integrators.ensemble import ENSEMBLE_METHODS, TABLEAUX, integrate_rows
from .._core.problem.bolza import BolzaProblem
from .._core.results.results import ImbeddingResult
from .._core.results.status import row_status
from .._core.inputs.validation import (as_float_array, as_int, as_ivp_options, as_state,
                                       check_choice, check_positive, describe,
                                       require_finite)

#: ``theta_of(t (k,), z (k, N), rows (k,), piece) -> (k, M)``: the control of rows ``rows``.
RowControl = Callable[[np.ndarray, np.ndarray, np.ndarray, Any], np.ndarray]

#: Keyword options of `simulate` beyond its named arguments.
OPTIONS = ("first_step", "max_step", "max_steps")


class SimulationResult(OptimizeResult):
    """The closed loop of `simulate`: a dict with attribute access.

    A scalar ``horizon`` gives the arrays without the horizon axis; an unbatched ``x``
    (shape (N,)) without the input axis ``B``.

    Attributes
    ----------
    horizon : ndarray, shape (n,), or float
        The horizons ``h``; each row runs from ``t = q - h`` to ``q``.
    t : ndarray, shape (n, n_points) or (n_points,)
        The times of the saved trajectory points (``n_points`` equally spaced from
        ``q - h`` to ``q``).
    z : ndarray, shape (n, [B,] n_points, N)
        The state along the closed loop.
    control : ndarray, shape (n, [B,] n_points, M)
        The control applied there.
    cost : ndarray, shape (n, [B])
        The true cost ``J = int_(q - h)^q R dt + T(z(q))``.
    running_cost, terminal_cost : ndarray, shape (n, [B])
        Its two parts.
    success : bool
        Whether every row reached ``q`` with finite values.
    status : int
        0 on success, -1 otherwise (`invimbed.STATUS`).
    message : str
        What happened; on failure it names the first failed row and why.
    nfev : int
        Right-hand-side evaluations (vectorised calls).
    nsteps : ndarray of int, shape (n, [B])
        Attempted steps per row.
    method, strategy : str
        The integrator, and ``"ensemble"`` or ``"solve_ivp"``.
    """

    __repr__ = ImbeddingResult.__repr__
    __str__ = ImbeddingResult.__repr__


def simulate(problem: BolzaProblem, x: Any, control: Any, horizon: Any, *,
             method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
             n_points: int = 101, **options: Any) -> SimulationResult:
    """Simulate the closed loop of a feedback (or an open-loop control) and its true cost.

    Integrates ``dz/dt = f(t, z, u)``, ``z(q - h) = x``, to ``t = q`` with
    ``u = control(t, z)`` and returns the trajectory and ``J = int R dt + T(z(q))``
    (eq. (4)), the cost the control actually achieves. Details: docs/optimal-control.md,
    "simulate in detail".

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The initial state(s), at ``t = q - h``.
    control : callable, OpenLoopControl or the result of `solve_optimal`
        A feedback ``u = control(t, z)`` (``t`` (k, 1), ``z`` (k, N) -> (k, M)), an
        open-loop control, or a `solve_optimal` result (its ``policy``).
    horizon : float or array_like, shape (n,)
        ``h = q - t_0 >= 0``.
    method : str, default "RK45"
        ``"RK45"``, ``"RK23"`` (one ensemble solve of every row) or any other
        `scipy.integrate.solve_ivp` method (one solve per horizon).
    rtol, atol : float
        Tolerances of the solve (scipy's meaning, per row).
    n_points : int, default 101
        Trajectory points saved per row (at least 2).
    **options
        ``first_step``, ``max_step``, ``max_steps`` (default 10,000).

    Returns
    -------
    SimulationResult
        ``t``, ``z``, ``control``, ``cost``, ``running_cost``, ``terminal_cost``,
        ``success``, ``status``, ``message``, ``nfev``, ``nsteps``, ``method``,
        ``strategy``. A row that fails has NaN fields, ``success`` False, and the message
        names it.

    Raises
    ------
    TypeError
        An argument of the wrong type, an unknown keyword, naming it.
    ValueError
        Bad values: a negative horizon, a control of the wrong size, a feedback that
        returns the wrong shape, a `solve_optimal` result without a feedback.

    Examples
    --------
    The optimal feedback of ``dz/dt = u``, ``R = (z^2 + u^2)/2`` on an infinite horizon,
    ``u = -z``, costs ``x^2 (1 - e^(-2h)) / 2`` over a horizon ``h``:

    >>> import numpy as np, invimbed
    >>> pb = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
    >>> sim = invimbed.simulate(pb, [1.0], lambda t, z: -z, 2.0, rtol=1e-10, atol=1e-12)
    >>> round(float(sim.cost), 8), round(float(0.5 * (1 - np.exp(-4.0))), 8)
    (0.49084218, 0.49084218)
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got "
                        f"{describe(problem)}")
    xb, batched = as_state(x, None, "x")
    h = as_float_array(horizon, "horizon")
    scalar = h.ndim == 0
    h = np.atleast_1d(h)
    if h.ndim != 1 or h.size == 0:
        raise ValueError(f"`horizon` must be a number or a non-empty 1-D array, but got shape "
                         f"{h.shape}")
    require_finite(h, "horizon")
    if np.any(h < 0):
        raise ValueError(f"`horizon` must be >= 0 (the loop runs from q - horizon to q), but "
                         f"got {np.array2string(h, threshold=8)}")
    check_choice(method, "method", SCIPY_METHODS)
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    n_points = as_int(n_points, "n_points", minimum=2)
    opts = as_ivp_options(options, "simulate", OPTIONS,
                          suggest=("method", "rtol", "atol", "n_points"))
    q = problem.q
    B, N = xb.shape
    n = h.size
    t0 = np.repeat(q - h, B)                              # row r = (horizon r // B, input r % B)
    x0 = np.tile(xb, (n, 1))
    theta_of, M, stops, pieces = _row_control(problem, control, xb, q - h.max(), q)
    provider = problem.provider(N, M)
    out = run_rows(provider, q, t0, x0, theta_of, method=method, rtol=rtol, atol=atol,
                   options=opts, n_points=n_points, stops=stops, pieces=pieces)
    failure = _failure_message(out, t0, batched, B, opts.get("max_steps", DEFAULT_MAX_STEPS))
    status = row_status(out["status"])

    def arrange(a: np.ndarray) -> np.ndarray:
        a = a.reshape((n, B) + a.shape[1:])
        a = a if batched else a[:, 0]
        return a[0] if scalar else a

    t = np.linspace(q - h, q, n_points, axis=1)
    return SimulationResult(
        horizon=float(h[0]) if scalar else h, t=t[0] if scalar else t,
        z=arrange(out["z"]), control=arrange(out["control"]), cost=arrange(out["cost"]),
        running_cost=arrange(out["running_cost"]), terminal_cost=arrange(out["terminal_cost"]),
        success=status.success, status=status,
        message=("The closed loop reached t = q for every horizon and input."
                 if failure is None else failure),
        nfev=int(out["nfev"]), nsteps=arrange(out["nsteps"]), method=method,
        strategy="ensemble" if method in ENSEMBLE_METHODS else "solve_ivp")


def _row_control(problem: BolzaProblem, control: Any, xb: np.ndarray, t_lo: float,
                 q: float) -> tuple[RowControl, int, np.ndarray | None, Callable | None]:
    """``(theta_of, M, stops, pieces)`` for `run_rows` from the user's ``control``."""
    B = xb.shape[0]
    policy = control.get("policy") if isinstance(control, OptimizeResult) else control
    if isinstance(control, OptimizeResult) and policy is None:
        raise ValueError("`control` is a result without a feedback `policy` (solve_optimal "
                         "keeps one unless closed_loop=False); pass such a result, a feedback "
                         "callable u(t, z) or an open-loop control")
    if isinstance(policy, OpenLoopControl):
        ctrl = policy
        ctrl.theta(t_lo)                      # raises naming the range it covers
        ctrl.theta(q)
        problem.check_sizes(xb.shape[1], ctrl.size, control_given=True)
        stops = np.sort(ctrl.breakpoints[(ctrl.breakpoints > t_lo) & (ctrl.breakpoints < q)])

        def open_loop(t, z, rows, piece):
            return ctrl.theta_rows(t, piece)

        return open_loop, ctrl.size, stops, lambda lo, hi, rows: ctrl.pieces(lo, hi)
    if not callable(policy):
        raise TypeError(f"`control` must be a feedback callable u(t, z), an invimbed control "
                        f"or a solve_optimal result, but got {describe(control)}")
    inputs = getattr(policy, "inputs", None)
    if inputs is not None:                      # the sweep's feedback: one jet per input
        inputs = np.asarray(inputs, dtype=float)
        if inputs.shape != xb.shape or not np.allclose(inputs, xb, rtol=1e-12, atol=1e-14):
            raise ValueError(f"`control` is the feedback of solve_optimal, expanded around its "
                             f"input(s) of shape {inputs.shape}; `x` must be those inputs, but "
                             f"got {describe(xb)}")
    first = np.asarray(policy(np.full((B, 1), t_lo), xb.copy(), *(
        (np.arange(B),) if inputs is not None else ())), dtype=float)
    if first.ndim != 2 or first.shape[0] != B:
        raise ValueError(f"`control` (a feedback) must return shape (k, M) for z of shape "
                         f"(k, N), but returned shape {first.shape} for z of shape {xb.shape}")
    M = first.shape[1]
    problem.check_sizes(xb.shape[1], M, control_given=True)

    def closed_loop(t, z, rows, piece):
        args = (rows % B,) if inputs is not None else ()
        u = np.asarray(policy(np.asarray(t, dtype=float)[:, None], z, *args), dtype=float)
        if u.shape != (z.shape[0], M):
            raise ValueError(f"`control` (a feedback) must return shape (k, M) = "
                             f"{(z.shape[0], M)}, but returned shape {u.shape}")
        return u

    return closed_loop, M, None, None


def run_rows(provider, q: float, t0: np.ndarray, x0: np.ndarray, theta_of: RowControl, *,
             method: str, rtol: float, atol: float, options: dict, n_points: int = 0,
             stops: np.ndarray | None = None, pieces: Callable | None = None) -> dict:
    """Every row ``r`` from ``(t0[r], x0[r])`` to ``q`` under ``theta_of``.

    Returns a dict of arrays per row: ``cost``, ``running_cost``, ``terminal_cost`` (R,),
    ``nsteps`` (R,), ``status`` (R,) (`invimbed._core.results.failures` codes), ``t_end`` and
    ``h_lambda`` (where each row stopped, Shampine's estimate there), ``reason`` (R,
    object: a failure's text or None), with ``n_points > 0`` also ``z`` (R, n_points, N)
    and ``control`` (R, n_points, M) at ``n_points`` equally spaced times; and ``nfev``.
    """
    R, N = x0.shape
    max_steps = options.get("max_steps", DEFAULT_MAX_STEPS)

    def rhs(t, y, rows, piece):
        z = y[:, :N]
        th = theta_of(t, z, rows, piece)
        return np.concatenate([provider.derivative("f", t, z, th),
                               provider.derivative("R", t, z, th)[:, None]], axis=1)

    y0 = np.concatenate([x0, np.zeros((R, 1))], axis=1)
    y_end = np.full((R, N + 1), np.nan)
    status = np.full(R, DONE)
    t_end = np.full(R, q)
    h_lambda = np.zeros(R)
    nsteps = np.zeros(R, dtype=np.int64)
    reason = np.full(R, None, dtype=object)
    times = np.linspace(t0, q, n_points, axis=1) if n_points else np.empty((R, 0))
    traj = np.full((R, times.shape[1], N + 1), np.nan)
    if method in ENSEMBLE_METHODS:
        out = integrate_rows(rhs, t0, np.full(R, q), y0, tableau=TABLEAUX[method], rtol=rtol,
                             atol=atol, max_steps=max_steps, stops=stops, pieces=pieces,
                             first_step=options.get("first_step"),
                             max_step=options.get("max_step", np.inf), record=n_points > 0)
        y_end, status, t_end, h_lambda, nsteps = out.y, out.status, out.t, out.h_lambda, out.nsteps
        nfev = out.nfev
        for r in np.flatnonzero(status != DONE):
            reason[r] = row_failure_reason(int(status[r]), max_steps, float(h_lambda[r]))
        if n_points:
            moved = np.flatnonzero((status == DONE) & (t0 < q))
            if moved.size:
                k = times.shape[1]
                traj[moved] = out.dense(times[moved].ravel(),
                                        np.repeat(moved, k)).reshape(moved.size, k, N + 1)
    else:
        nfev = _per_start(rhs, q, t0, y0, method, rtol, atol, options, stops, pieces, times,
                          y_end, status, t_end, nsteps, reason, traj)
    still = t0 >= q                                       # zero horizon: z(q) = x
    y_end[still], status[still] = y0[still], DONE
    traj[still] = y0[still][:, None, :]
    res = {"running_cost": y_end[:, N], "nsteps": nsteps, "status": status, "t_end": t_end,
           "h_lambda": h_lambda, "reason": reason, "nfev": nfev}
    ok = status == DONE
    terminal = np.full(R, np.nan)
    if np.any(ok):
        terminal[ok] = provider.derivative("T", q, y_end[ok, :N], None)
    res["terminal_cost"] = terminal
    res["cost"] = res["running_cost"] + terminal
    if n_points:
        res["z"] = traj[..., :N]
        flat_t, flat_z = times.ravel(), traj[..., :N].reshape(-1, N)
        rows = np.repeat(np.arange(R), times.shape[1])
        good = np.all(np.isfinite(flat_z), axis=1)
        u = None
        if np.any(good):
            piece = None if pieces is None else pieces(flat_t[good], flat_t[good], rows[good])
            got = theta_of(flat_t[good], flat_z[good], rows[good], piece)
            u = np.full((flat_t.size, got.shape[1]), np.nan)
            u[good] = got
        M = provider.n_theta
        res["control"] = (np.full((R, times.shape[1], M), np.nan) if u is None
                          else u.reshape(R, times.shape[1], M))
    return res


def _per_start(rhs, q, t0, y0, method, rtol, atol, options, stops, pieces, times, y_end,
               status, t_end, nsteps, reason, traj) -> int:
    """The rows of each start time in one budgeted scipy solve per control piece (batched
    over the rows, a flattened state); fills the output arrays in place."""
    opts = dict(options)
    opts.setdefault("max_steps", DEFAULT_MAX_STEPS)
    S = y0.shape[1]
    nfev = 0
    for start in np.unique(t0[t0 < q]):
        rows = np.flatnonzero(t0 == start)
        inner = [] if stops is None else [float(b) for b in stops if start < b < q]
        ends = [float(start)] + inner + [q]
        y = y0[rows].ravel()
        for a, b in zip(ends[:-1], ends[1:]):
            piece = None if pieces is None else pieces(np.full(rows.size, a),
                                                       np.full(rows.size, b), rows)

            def fun(t, yy, _piece=piece):
                return rhs(np.full(rows.size, t), yy.reshape(rows.size, S), rows, _piece).ravel()

            fail, t_stop, y_new, sol, count, steps = solve_budgeted(
                fun, a, b, y, method, rtol, atol, opts, dense=times.shape[1] > 0)
            nfev += count
            nsteps[rows] += steps
            if fail is not None:
                status[rows], t_end[rows], reason[rows] = NONFINITE, t_stop, fail
                break
            if times.shape[1]:
                k = (times[rows[0]] >= a) & (times[rows[0]] <= b)
                vals = sol(times[rows[0], k]) if a < b else y[:, None]
                traj[rows[:, None], np.flatnonzero(k)[None, :]] = \
                    vals.T.reshape(k.sum(), rows.size, S).transpose(1, 0, 2)
            y = y_new
        else:
            y_end[rows] = y.reshape(rows.size, S)
    return nfev


def _failure_message(out: dict, t0: np.ndarray, batched: bool, B: int,
                     max_steps: int) -> str | None:
    """The message of the first failed row (`row_failure`), or None."""
    bad = np.flatnonzero(out["status"] != DONE)
    if not bad.size:
        return None
    r = int(bad[0])
    return row_failure(batched, "closed-loop simulation", float(t0[r]), r % B,
                       float(out["t_end"][r]), str(out["reason"][r]), bad.size,
                       out["status"].size)
