"""Every failure message of the solvers, written once.

The sweep (any integrator, any backend) and the adjoint reference report numerical
failure through these functions, so that the same trouble reads the same wherever it
happens. A message always says *where* (depth, input, time) and *what to do*.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .status import RowCode

#: Per-row codes of the ensemble integrator (`integrators.ensemble.integrate_rows`): the
#: `RowCode` table, as plain integers.
RUNNING, DONE, UNDERFLOW, NONFINITE, MAX_STEPS = (int(RowCode.RUNNING), int(RowCode.DONE),
                                                  int(RowCode.UNDERFLOW),
                                                  int(RowCode.NONFINITE),
                                                  int(RowCode.MAX_STEPS))

#: ``h |lambda|`` above which an explicit step is taken as limited by stability, not
#: accuracy. The stability boundaries on the negative real axis are about 2.5 (RK23),
#: 3.3 (RK45) and 6 (DOP853); one threshold below all three is conservative for the
#: message only, since a sweep is stopped as stiff only when the steps still needed at
#: that size exceed ``max_steps`` as well.
STIFF_H_LAMBDA = 2.0


def sweep_stopped(exc: Any, *, fixed_step: bool) -> str:
    """The message of a sweep stopped by a non-finite value (`NonFiniteError` ``exc``)."""
    remedy = "reduce `step`, or request shallower depths" if fixed_step else \
        "or request shallower depths"
    return (f"Integration stopped: {exc}. The fields blew up; check the dynamics and losses "
            f"near that depth, {remedy}.")


def first_evaluation(exc: Any, q: float) -> str:
    """The message of a sweep whose very first evaluation (at ``p = q``) is not finite."""
    return (f"Integration stopped: {exc}, at the first evaluation. The dynamics, running "
            f"loss or terminal loss (or a derivative of them) is not finite at the input x "
            f"and depth q = {q:.10g}; check them there.")


def budget_exhausted(p: float, max_steps: int, h_lambda: float = 0.0) -> str:
    """The message of an adaptive sweep that took ``max_steps`` steps and stopped at depth
    ``p``; ``h_lambda`` is Shampine's ``h |lambda|`` of the last steps of an explicit
    method (0 for the others): at the stability limit the message says the problem looks
    stiff and names the implicit methods."""
    return (f"Integration stopped at depth p = {p:.10g}: "
            f"{row_failure_reason(MAX_STEPS, max_steps, h_lambda)}.")


def stiff_stop(p: float, max_steps: int, h_lambda: float, projected: int) -> str:
    """The message of an explicit adaptive sweep stopped early at depth ``p``: its last
    steps sat at the stability limit (``h |lambda|``), and at that step size it would need
    about ``projected`` steps in all, more than ``max_steps``."""
    return (f"Integration stopped at depth p = {p:.10g}: {looks_stiff(h_lambda)}; at this "
            f"step size the sweep needs about {projected} steps, more than max_steps = "
            f"{max_steps}: {IMPLICIT_REMEDY}.")


def looks_stiff(h_lambda: float) -> str:
    """What an explicit method's steps at the stability limit say (Shampine's estimate
    ``h_lambda`` above `STIFF_H_LAMBDA`): the words of every stiff failure."""
    return (f"the problem looks stiff (h|lambda| = {h_lambda:.2g} on the last steps, the "
            f"explicit method's stability limit, so the step size cannot grow)")


def raised_budget(p: float, budget: int, collapsed: float = 0.0) -> str:
    """The message of a raised order's sweep stopped at depth ``p``: it took the
    ``budget`` of steps the order loop allows it (`invimbed._core.sweep.orders.RAISE_STEPS`
    times the steps of the starting order's sweep), or (``collapsed`` > 0) its steps
    shrank so far that it would take more than ``collapsed`` times that."""
    why = (f"its steps collapsed: at their size it would take more than {collapsed:g} "
           f"times the {budget} steps" if collapsed else f"it took the {budget} steps")
    return (f"Integration stopped at depth p = {p:.10g}: {why} a raised order may take (a "
            f"multiple of the starting order's steps); its jets are too stiff for this "
            f"method there")


def grid_exhausted(p: float, max_steps: int, needed: int, step: float) -> str:
    """The message of a fixed-step sweep whose grid needs more than ``max_steps`` steps:
    it took the first ``max_steps`` and stopped at depth ``p``."""
    return (f"Integration stopped at depth p = {p:.10g}: the grid of `step` = {step:.6g} "
            f"needs {needed} steps, more than max_steps = {max_steps}; increase `step` or "
            f"`max_steps`.")


def step_collapsed(p: float, message: str, *, explicit: bool) -> str:
    """The message of an adaptive solver that failed at depth ``p`` with scipy's
    ``message`` (its step size fell below the spacing of floating-point numbers)."""
    why = ("the problem looks stiff there (use method='Radau' or 'BDF'), or its solution "
           "has a singularity or a finite-time blow-up" if explicit else
           "the solution has a singularity or a finite-time blow-up there; request "
           "shallower depths")
    return f"Integration failed at depth p = {p:.10g}: {message.rstrip('.')}: {why}."


def below_min_step(p: float, h: float, min_step: float, *, explicit: bool) -> str:
    """The message of an adaptive sweep whose step size ``h`` fell below the user's
    ``min_step`` at depth ``p``."""
    return step_collapsed(p, f"the step size {h:.3g} fell below `min_step` = {min_step:.3g}",
                          explicit=explicit)


def solver_failed(p: float, message: str) -> str:
    """The message of an adaptive solver that failed at depth ``p`` for another reason."""
    return f"Integration failed at depth p = {p:.10g}: {message}"


#: The remedy for a stiff problem where the caller takes scipy's implicit methods.
IMPLICIT_REMEDY = "use method='Radau' or 'BDF'"


def row_failure_reason(code: int, max_steps: int, h_lambda: float,
                       stiff_remedy: str = IMPLICIT_REMEDY) -> str:
    """What a per-row failure code of the ensemble means, with the remedy; a caller
    without the implicit methods (`solve_ocp`) names its own ``stiff_remedy``."""
    if code == MAX_STEPS:
        if h_lambda > STIFF_H_LAMBDA:
            return (f"more than max_steps = {max_steps} steps at this step size; "
                    f"{looks_stiff(h_lambda)}: {stiff_remedy}")
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


def ensemble_failure(batched: bool, codes: np.ndarray, fwd_codes: np.ndarray,
                     row_depths: np.ndarray, t: np.ndarray, h_lambda: np.ndarray,
                     max_steps: int, B: int) -> str:
    """The message of an ensemble whose rows did not all succeed: the first failed row
    (``r = depth index * B + input``), which pass failed, where and why
    (`row_failure_reason`), and how many rows failed. ``codes`` is each row's last
    `RowCode` (its backward pass's where the forward pass reached ``q``), ``fwd_codes``
    the forward pass's; ``t`` and ``h_lambda`` are each row's last time and Shampine
    estimate in the pass that failed. Whether the rows failed is `row_status`'s answer."""
    bad = np.flatnonzero(codes != DONE)
    r = int(bad[0])
    fwd_failed = fwd_codes[r] != DONE
    reason = row_failure_reason(int(codes[r]), max_steps, float(h_lambda[r]))
    return row_failure(batched, "forward solve" if fwd_failed else "backward adjoint solve",
                       float(row_depths[r]), r % B, float(t[r]), reason, bad.size, codes.size)


def empty_fields(n: int, B: int, N: int, nw: int) -> dict[str, np.ndarray]:
    """Result fields of ``n`` depths and ``B`` inputs, NaN until a row succeeds."""
    return {"z": np.full((n, B, N), np.nan), "value": np.full((n, B), np.nan),
            "adjoint": np.full((n, B, N), np.nan), "param_grad": np.full((n, B, nw), np.nan),
            "depth_grad": np.full((n, B), np.nan), "nsteps": np.zeros((n, B), dtype=np.int64)}
