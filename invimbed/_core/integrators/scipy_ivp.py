"""The sweep with scipy's ``OdeSolver`` classes, stopping at control breakpoints.

No solve here can run without end or end in a scipy-internal exception:

- every evaluation goes through `CountingRHS`, which stops the solve on a non-finite
  state or derivative (the first evaluation at ``p = q`` included);
- a non-finite value scipy meets inside its own linear algebra (Radau's and BDF's Newton
  iterations, where finite but huge derivatives overflow) ends the solve the same way;
- a step size below ``min_step`` ends the solve for every method (scipy's solvers other
  than LSODA would ignore the option with a warning);
- the sweep takes at most ``max_steps`` steps. An explicit method whose last
  ``STIFF_WINDOW`` steps all sat at its stability limit (Shampine's ``h |lambda|`` test)
  stops as soon as the steps left at that size would exceed the budget: a stiff problem
  ends after a few dozen steps, not ``max_steps``. Then, and when its step size
  collapses, the message says the problem looks stiff and names Radau and BDF.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.integrate import BDF, DOP853, LSODA, RK23, RK45, Radau

from ..results.failures import (STIFF_H_LAMBDA, below_min_step, budget_exhausted,
                                first_evaluation, raised_budget, solver_failed,
                                step_collapsed, stiff_stop, sweep_stopped)
from .common import (DEFAULT_MAX_STEPS, CountingRHS, NonFiniteError, Outcome, SolverSteps,
                     check_max_steps, segments)
from .rules import STIFF_WINDOW, stiff_run, stiff_stops
from .tableau import TABLEAUX

#: scipy's solver classes by method name (registered in `invimbed._core.integrators.methods`).
SOLVERS = {"RK45": RK45, "RK23": RK23, "DOP853": DOP853, "Radau": Radau, "BDF": BDF,
           "LSODA": LSODA}
#: The explicit Runge--Kutta methods (those with a tableau): their step is bounded by
#: stability on stiff problems.
EXPLICIT = tuple(name for name in SOLVERS if name in TABLEAUX)
#: What scipy's linear algebra raises on a non-finite matrix or right-hand side.
_SCIPY_NONFINITE = "must not contain infs or NaNs"


def h_lambda(solver: Any) -> float:
    """Shampine's estimate of ``h |lambda|`` for the last step of an explicit Runge--Kutta
    ``solver``: ``|h| ||f(y_new) - f(y_S)|| / ||y_new - y_S||`` with ``y_S`` the point of
    the last stage (at ``c = 1`` for RK45 and DOP853, where the estimate is Shampine's
    own). Near the method's stability boundary (about 3.3 for RK45) the step is limited
    by stability, not accuracy: the problem is stiff for it."""
    K, A = getattr(solver, "K", None), getattr(solver, "A", None)
    y_old, h = getattr(solver, "y_old", None), getattr(solver, "h_previous", None)
    if K is None or A is None or y_old is None or h is None:
        return 0.0
    s = int(solver.n_stages) - 1
    y_s = y_old + h * (K[:s].T @ A[s, :s])
    den = float(np.linalg.norm(solver.y - y_s))
    num = float(np.linalg.norm(K[-1] - K[s]))
    return abs(h) * num / den if den > 0 and np.isfinite(num) else 0.0


def stiff_step(solver: Any, run: int, steps: int, end: float,
               max_steps: int) -> tuple[int, float, bool]:
    """After an accepted step of the explicit scipy ``solver`` (``steps`` taken so far,
    towards ``end``): ``(run, h_lambda, stop)``, the consecutive steps at the stability
    limit (`rules.stiff_run`), Shampine's estimate of this step (`h_lambda`) and whether
    the solve stops as stiff (`rules.stiff_stops`, the rule of the ensemble's rows too)."""
    hl = h_lambda(solver)
    run = int(stiff_run(run, hl, STIFF_H_LAMBDA))
    stop = bool(stiff_stops(run, STIFF_WINDOW, steps, abs(float(solver.t) - end),
                            float(solver.h_abs), float(solver.h_previous), max_steps))
    return run, hl, stop


#: A raised order's sweep (``raise_budget``) is also stopped once `COLLAPSE_WINDOW`
#: consecutive steps, after `COLLAPSE_START` of the budget, each project at their size
#: more than `COLLAPSE` times the budget: steps collapsed by orders of magnitude, not a
#: stiff transient still growing out (on Robertson's kinetics with BDF, order 4 projected
#: 17 times its budget a tenth of the way in and finished within it; order 5 went on at
#: steps of 1e-9 and more for minutes).
COLLAPSE, COLLAPSE_START, COLLAPSE_WINDOW = 100, 0.1, 50


def _projected(solver: Any, steps: int, p_min: float) -> float:
    """The steps a sweep would take in all at the size of its current step."""
    return steps + abs(float(solver.t) - p_min) / max(float(solver.h_abs), 1e-300)


def integrate_scipy(rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                    breakpoints: np.ndarray, piece_of: Callable[[float, float], Any],
                    method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                    max_steps: int = DEFAULT_MAX_STEPS, dense_output: bool = False,
                    ys: Any = None, raise_budget: int | None = None,
                    **options: Any) -> Outcome:
    """Integrate ``dy/dp = rhs(p, y)`` from ``q`` down to ``depths_desc[-1]`` in one sweep.

    This is ``solve_ivp``'s loop over one of its ``OdeSolver`` classes, kept here so that a
    failure part-way keeps every depth reached before it. The states at the requested
    depths come from the solver's dense output, so the work does not grow with the
    number of depths; the sweep is restarted only where the control jumps
    (``breakpoints``). At most ``max_steps`` steps are taken in all (see the module
    docstring for how a solve ends). With ``dense_output`` the continuous extension of
    every accepted step is kept: ``outcome.extra["steps"]`` is ``(ts, interpolants)``, the
    step ends from ``q`` down and each step's scipy ``DenseOutput``, as
    `scipy.integrate.OdeSolution` takes them (`invimbed._core.sweep.dense`).
    ``ys`` receives the state of depth ``i`` as
    ``ys[i] = y`` (default: an array (n, size), NaN where not reached, returned as
    ``Outcome.ys``; `invimbed._core.sweep.memory.DepthSink` keeps only the fields).
    ``raise_budget`` (the order loop's raised orders, `invimbed._core.sweep.orders`) ends
    the sweep after that many steps, or earlier where its steps collapsed (`COLLAPSE`),
    saying so: a raised order on a stiff problem whose high-order jets grow too fast
    stops instead of creeping on for minutes towards a non-finite value.
    """
    max_steps = check_max_steps(max_steps)
    counting = CountingRHS(rhs)
    n = depths_desc.size
    ys = np.full((n, y0.size), np.nan) if ys is None else ys
    y = y0.copy()
    out = Outcome(ys=ys)
    for i, p in enumerate(depths_desc):
        if p == q:
            ys[i] = y0
    p_min = float(depths_desc[-1])
    steps = 0
    stiffness = 0.0         # Shampine's h|lambda| of the last step (explicit methods)
    run = 0                 # consecutive steps at the stability limit
    collapsed = 0           # consecutive steps projecting far beyond `raise_budget`
    explicit = method in EXPLICIT
    step_ends, interpolants = [float(q)], []
    for a, b in segments(q, p_min, breakpoints):
        piece = piece_of(a, b)
        want = [(i, float(p)) for i, p in enumerate(depths_desc) if b <= p < a]

        def fun(p, yy, _piece=piece):
            return counting(p, yy, _piece)

        opts = dict(options)
        if "first_step" in opts and opts["first_step"] is not None:
            opts["first_step"] = min(float(opts["first_step"]), a - b)
        # scipy's solvers other than LSODA ignore `min_step` with a warning: kept here
        min_step = float(opts.pop("min_step", 0.0) if method != "LSODA" else 0.0)
        solver = None
        try:
            try:
                solver = SOLVERS[method](fun, a, y, b, rtol=rtol, atol=atol, **opts)
                loop = SolverSteps(solver, max_steps, steps)
                for t_old in loop:
                    steps = loop.steps
                    t_new = solver.t
                    if min_step and solver.status == "running" and solver.h_abs < min_step:
                        out.success = False
                        out.failed_at = float(t_new)
                        out.message = below_min_step(out.failed_at, float(solver.h_abs),
                                                     min_step, explicit=explicit)
                    passed = [(i, p) for i, p in want
                              if t_new <= p < t_old or (p == t_new == b)]
                    interp = solver.dense_output() if passed or dense_output else None
                    # the solver's dense output: the work does not grow with the depths
                    for i, p in passed:
                        ys[i] = solver.y if p == t_new else interp(p)
                    if not np.all(np.isfinite(solver.y)):
                        raise NonFiniteError(float(t_new), "imbedded fields")
                    if dense_output and t_new != t_old:
                        step_ends.append(float(t_new))
                        interpolants.append(interp)
                    if not out.success:
                        break
                    if raise_budget is not None:
                        far = (steps > COLLAPSE_START * raise_budget and
                               _projected(solver, steps, p_min) > COLLAPSE * raise_budget)
                        collapsed = collapsed + 1 if far else 0
                        if steps >= raise_budget or collapsed >= COLLAPSE_WINDOW:
                            out.success = False
                            out.failed_at = float(solver.t)
                            out.message = raised_budget(
                                out.failed_at, raise_budget,
                                COLLAPSE if collapsed >= COLLAPSE_WINDOW else 0.0)
                            break
                    if explicit:
                        run, stiffness, stop = stiff_step(solver, run, steps, p_min, max_steps)
                        if stop:
                            h = max(float(solver.h_abs), abs(float(solver.h_previous)))
                            projected = steps + int(np.ceil(abs(solver.t - p_min) / h))
                            out.success = False
                            out.failed_at = float(solver.t)
                            out.message = stiff_stop(out.failed_at, max_steps, stiffness,
                                                     projected)
                            break
                steps = loop.steps
                if loop.end == "max_steps":
                    out.success = False
                    out.failed_at = float(solver.t)
                    out.message = budget_exhausted(
                        out.failed_at, max_steps, stiffness if run >= STIFF_WINDOW else 0.0)
                elif loop.end == "failed":
                    out.success = False
                    out.failed_at = float(solver.t)
                    out.message = (step_collapsed(out.failed_at, loop.message, explicit=explicit)
                                   if "step size" in str(loop.message) else
                                   solver_failed(out.failed_at, loop.message))
            except ValueError as exc:
                if _SCIPY_NONFINITE not in str(exc):
                    raise
                where = float(solver.t) if solver is not None else a
                raise NonFiniteError(where, f"Newton iteration of {method} (finite but huge "
                                            f"derivatives overflowed)") from None
        except NonFiniteError as exc:
            out.success = False
            out.failed_at = exc.p
            first = exc.p == q and counting.nfev <= 1
            out.message = (first_evaluation(exc, q) if first else
                           sweep_stopped(exc, fixed_step=False))
        if not out.success:
            break
        y = solver.y.copy()
    out.nfev = counting.nfev
    out.extra["nsteps"] = steps
    if dense_output:
        out.extra["steps"] = (np.array(step_ends), interpolants)
    return out
