"""Every failure message of the solvers, written once.

The sweep (any integrator, any backend) and the adjoint reference report numerical
failure through these functions, so that the same trouble reads the same wherever it
happens. A message always says *where* (depth, input, time) and *what to do*.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Per-row status codes of the ensemble integrator (`integrators.ensemble.integrate_rows`).
RUNNING, DONE, UNDERFLOW, NONFINITE, MAX_STEPS = 1, 0, -1, -2, -3

#: ``h |lambda|`` above which a Dormand-Prince step is limited by stability, not accuracy
#: (the method's stability boundary on the negative real axis is about 3.3).
STIFF_H_LAMBDA = 2.0


def sweep_stopped(exc: Any, *, fixed_step: bool) -> str:
    """The message of a sweep stopped by a non-finite value (`NonFiniteError` ``exc``)."""
    remedy = "reduce `step`, or request shallower depths" if fixed_step else \
        "or request shallower depths"
    return (f"Integration stopped: {exc}. The fields blew up; check the dynamics and losses "
            f"near that depth, {remedy}.")


def row_failure_reason(code: int, max_steps: int, h_lambda: float) -> str:
    """What a per-row failure code of the ensemble means, with the remedy."""
    if code == MAX_STEPS:
        if h_lambda > STIFF_H_LAMBDA:
            return (f"more than max_steps = {max_steps} steps; the problem looks stiff "
                    f"(h|lambda| = {h_lambda:.2g} at the last step, the explicit method's "
                    f"stability limit): use method='Radau' or 'BDF'")
        return f"more than max_steps = {max_steps} steps; increase `max_steps`"
    if code == NONFINITE:
        return "the dynamics or the running loss is not finite there"
    if code == UNDERFLOW:
        return ("the step size fell below the spacing of floating-point numbers (a "
                "singularity or a finite-time blow-up of the solution)")
    return f"failure code {code}"


def row_failure(batched: bool, where: str, depth: float, b: int, t: float, reason: str,
                count: int, total: int) -> str:
    """The message of a result with failed (depth, input) rows, naming the first one."""
    inp = f"input x[{b}]" if batched else "the input x"
    return (f"The {where} failed for depth p = {depth:.10g} and {inp} at t = {t:.10g}: "
            f"{reason}. {count} of {total} (depth, input) rows failed; the others are "
            f"exact to the tolerances.")


def empty_fields(n: int, B: int, N: int, nw: int) -> dict[str, np.ndarray]:
    """Result fields of ``n`` depths and ``B`` inputs, NaN until a row succeeds."""
    return {"z": np.full((n, B, N), np.nan), "value": np.full((n, B), np.nan),
            "adjoint": np.full((n, B, N), np.nan), "param_grad": np.full((n, B, nw), np.nan),
            "depth_grad": np.full((n, B), np.nan), "nsteps": np.zeros((n, B), dtype=np.int64)}
