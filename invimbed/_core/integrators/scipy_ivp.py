"""The sweep with ``scipy.integrate.solve_ivp``, stopping at control breakpoints."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.integrate import BDF, DOP853, LSODA, RK23, RK45, Radau

from ..failures import sweep_stopped
from .common import CountingRHS, NonFiniteError, Outcome, segments

METHODS = {"RK45": RK45, "RK23": RK23, "DOP853": DOP853, "Radau": Radau, "BDF": BDF,
           "LSODA": LSODA}
SCIPY_METHODS = tuple(METHODS)


def integrate_scipy(rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                    breakpoints: np.ndarray, piece_of: Callable[[float, float], Any],
                    method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                    **options: Any) -> Outcome:
    """Integrate ``dy/dp = rhs(p, y)`` from ``q`` down to ``depths_desc[-1]`` in one sweep.

    This is ``solve_ivp``'s loop over one of its ``OdeSolver`` classes, kept here so that a
    failure part-way keeps every depth reached before it. The states at the requested
    depths come from the solver's dense output, so the work does not grow with the
    number of depths; the sweep is restarted only where the control jumps
    (``breakpoints``).
    """
    counting = CountingRHS(rhs)
    n = depths_desc.size
    ys = np.full((n, y0.size), np.nan)
    y = y0.copy()
    out = Outcome(ys=ys)
    for i, p in enumerate(depths_desc):
        if p == q:
            ys[i] = y0
    p_min = float(depths_desc[-1])
    for a, b in segments(q, p_min, breakpoints):
        piece = piece_of(a, b)
        want = [(i, float(p)) for i, p in enumerate(depths_desc) if b <= p < a]

        def fun(p, yy, _piece=piece):
            return counting(p, yy, _piece)

        try:
            solver = METHODS[method](fun, a, y, b, rtol=rtol, atol=atol, **options)
            while solver.status == "running":
                t_old = solver.t
                message = solver.step()
                if solver.status == "failed":
                    out.success = False
                    out.failed_at = float(solver.t)
                    out.message = f"Integration failed at depth p = {solver.t:.10g}: {message}"
                    break
                t_new = solver.t
                passed = [(i, p) for i, p in want if t_new <= p < t_old or (p == t_new == b)]
                if passed:
                    # the solver's dense output: the work does not grow with the depths
                    interp = solver.dense_output()
                    for i, p in passed:
                        ys[i] = solver.y if p == t_new else interp(p)
                if not np.all(np.isfinite(solver.y)):
                    raise NonFiniteError(float(t_new), "imbedded fields")
        except NonFiniteError as exc:
            out.success = False
            out.failed_at = exc.p
            out.message = sweep_stopped(exc, fixed_step=False)
        if not out.success:
            break
        y = solver.y.copy()
    out.nfev = counting.nfev
    return out
