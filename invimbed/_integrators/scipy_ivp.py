"""The sweep with ``scipy.integrate.solve_ivp``, stopping at control breakpoints."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp

from .common import CountingRHS, NonFiniteError, Outcome, segments

SCIPY_METHODS = ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")


def integrate_scipy(rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                    breakpoints: np.ndarray, piece_of: Callable[[float, float], Any],
                    method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                    **options: Any) -> Outcome:
    """Integrate ``dy/dp = rhs(p, y)`` from ``q`` down to ``depths_desc[-1]`` in one sweep.

    The states at the requested depths come from the solver's dense output
    (``t_eval``), so the work does not grow with the number of depths; the sweep is
    restarted only where the control jumps (``breakpoints``).
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
        want = [(i, p) for i, p in enumerate(depths_desc) if b <= p < a]
        # the segment end is always evaluated: it starts the next segment
        t_eval = np.array(sorted({float(p) for _, p in want} | {b}, reverse=True))

        def fun(p, yy, _piece=piece):
            return counting(p, yy, _piece)

        try:
            sol = solve_ivp(fun, (a, b), y, method=method, t_eval=t_eval, rtol=rtol,
                            atol=atol, **options)
        except NonFiniteError as exc:
            out.success = False
            out.failed_at = exc.p
            out.message = (f"Integration stopped: {exc}. The fields blew up; check the "
                           f"dynamics and losses near that depth, or request shallower depths.")
            break
        reached = dict(zip(sol.t.tolist(), sol.y.T))
        for i, p in want:
            if float(p) in reached:
                ys[i] = reached[float(p)]
        if sol.status != 0:
            out.success = False
            out.failed_at = float(sol.t[-1]) if sol.t.size else a
            out.message = f"Integration failed at depth p = {out.failed_at:.10g}: {sol.message}"
            break
        y = sol.y[:, -1].copy()
    out.nfev = counting.nfev
    return out
