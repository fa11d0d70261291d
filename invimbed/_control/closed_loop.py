"""What the closed-loop sweeps of `solve_optimal` share: their failure and their integration.

Both sweeps, the HJB sweep of the jet (`invimbed._control.feedback`) and the Riccati
sweep of linear-quadratic problems (`invimbed._control.riccati`), integrate a plain
right-hand side in the depth from ``q`` down to the deepest requested depth, with the
core's integrators, and both can meet a point where Theorem 3's minimisation has no
answer (docs/theory.md, "Optimality"). That failure is an `OptimalityError`; it ends the
sweep but keeps every depth reached before it.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from .._progress import ProgressBar

from .._core.integrators import NonFiniteError, Outcome
from .._core.integrators import integrate as integrate_integrators
from .._core.inputs.validation import SOLVE_IVP_OPTIONS, as_ivp_options

#: The keyword arguments the closed-loop solvers pass on to the integrator.
OPTIONS = SOLVE_IVP_OPTIONS + ("max_steps",)


class OptimalityError(ArithmeticError):
    """The pointwise minimisation of the Hamiltonian failed (not convex, no convergence).

    Raised at depth ``p`` inside a closed-loop sweep. `solve_optimal` does not let it
    escape: it ends the sweep there and returns a result with ``success=False`` whose
    fields at the depths reached before ``p`` are kept (not NaN); the result's
    ``optimality_error`` is this exception, with those depths and fields attached.

    Attributes
    ----------
    p : float
        The depth at which the minimisation failed.
    depths : ndarray, shape (k,)
        The requested depths reached before the failure, in the order they were given
        (empty when none was reached, or before the sweep has filled them in).
    fields : dict of str to ndarray
        The result's fields at those depths (``z``, ``value``, ``adjoint``,
        ``feedback``, ``feedback_jacobian``, ``depth_grad``), each with the depth axis
        first and ``depths.size`` rows, shaped as in the result.
    """

    def __init__(self, p: float, message: str, depths: Any = None,
                 fields: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(f"{message} at depth p = {p:.10g}")
        self.p = p
        self.depths = np.empty(0) if depths is None else np.asarray(depths, dtype=float)
        self.fields = {} if fields is None else dict(fields)

    def keep_reached(self, result: Any, keys: tuple[str, ...]) -> None:
        """Attach the depths of ``result`` (a result's draft, in the user's order)
        whose fields are finite, and those fields (``keys``)."""
        n = np.size(result.depths)
        value = np.reshape(np.asarray(result.value, dtype=float), (n, -1))
        reached = np.all(np.isfinite(value), axis=1)
        self.depths = np.asarray(result.depths, dtype=float)[reached]
        self.fields = {k: np.asarray(result[k])[reached] for k in keys if k in result}


class TimeBudgetSpent(ArithmeticError):
    """A sweep's time budget (``max_time``) ran out at depth ``p``."""

    def __init__(self, p: float, max_time: float, elapsed: float) -> None:
        super().__init__(f"the time budget max_time = {max_time:.6g} s was spent "
                         f"({elapsed:.3g} s) at depth p = {p:.10g}")
        self.p = p


class SweepBudget:
    """The time budget and the progress display of one closed-loop sweep.

    `tick` is called at every right-hand-side evaluation with its depth: past ``max_time``
    seconds since construction it raises `TimeBudgetSpent` (the sweep then ends there
    and keeps every depth reached, like any failure); with ``progress`` it shows the depth
    reached and the share of the depth range covered, at most once a second
    (`invimbed._progress.ProgressBar`)."""

    def __init__(self, max_time: float | None, progress: bool, q: float, p_min: float,
                 desc: str = "solve_optimal") -> None:
        self.max_time = max_time
        self.start = self.last = time.perf_counter()
        self.q, self.span = q, max(q - p_min, np.finfo(float).tiny)
        self.bar = ProgressBar(progress, None, desc, label="share of the depths done")
        self.reports = 0

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def tick(self, p: float) -> None:
        now = time.perf_counter()
        if self.max_time is not None and now - self.start > self.max_time:
            raise TimeBudgetSpent(p, self.max_time, now - self.start)
        if self.bar.enabled and (self.reports == 0 or now - self.last >= 1.0):
            self.reports += 1
            self.last = now
            self.bar.update(self.reports, min(1.0, (self.q - p) / self.span))

    def close(self) -> None:
        self.bar.close()


def check_integrator_options(options: dict[str, Any], where: str, named: tuple[str, ...] = (),
                             control_hint: str | None = None) -> dict[str, Any]:
    """The integrator's options of a closed-loop entry point, validated: only `OPTIONS`
    (``first_step``, ``max_step``, ``min_step`` of `solve_ivp`, and ``max_steps``); any
    other keyword is a TypeError naming it, with the closest of ``named`` (the entry
    point's own keywords) and `OPTIONS` (``control`` gets ``control_hint``)."""
    if control_hint is not None and "control" in options:
        raise TypeError(f"`control` is not an argument of {where}(): {control_hint}")
    return as_ivp_options(options, where, OPTIONS, suggest=named)


def failed_outcome(setup: Any, size: int, exc: OptimalityError) -> Outcome:
    """The outcome of a sweep that failed before its first step (no depth reached)."""
    return Outcome(ys=np.full((setup.depths_desc.size, size), np.nan), success=False,
                   message=f"Optimal feedback failed: {exc}.", failed_at=exc.p,
                   extra={"optimality_error": exc})


def integrate(rhs: Callable, y0: np.ndarray, setup: Any, method: str, rtol: float,
              atol: float, step: float | None, options: dict[str, Any],
              grid: np.ndarray | None = None, budget: SweepBudget | None = None) -> Outcome:
    """Integrate ``dy/dp = rhs(p, y, piece)`` from ``q`` to every depth of ``setup``.

    With ``grid`` (depths, descending, holding every depth of ``setup``) the states are
    taken at the grid's depths as well: ``outcome.extra["grid"]`` is ``(grid, ys)``,
    and ``outcome.ys`` keeps the requested depths only. With ``budget`` every evaluation
    calls `SweepBudget.tick`: a spent time budget ends the sweep where it is, keeping the
    depths reached (``outcome.extra["time_budget"]`` is the `TimeBudgetSpent`).

    A scipy ``method`` takes ``step`` as its ``max_step`` (unless ``options`` gives one)
    and ``options`` (`OPTIONS`, checked by `check_integrator_options`); a fixed-step one
    takes ``step`` and ``max_steps``. An `OptimalityError` raised by ``rhs`` stops the sweep as a
    non-finite value does: the integrator keeps every depth reached before it, the
    outcome's message names the failure, and ``outcome.extra["optimality_error"]`` is
    the exception.
    """
    failures: list[OptimalityError] = []
    spent: list[TimeBudgetSpent] = []
    where = setup if grid is None else SimpleNamespace(q=setup.q, depths_desc=grid,
                                                       piece_of=setup.piece_of)

    def guarded(p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        try:
            if budget is not None:
                budget.tick(p)
            return rhs(p, y, piece)
        except OptimalityError as exc:
            # the integrators stop on a NonFiniteError and keep the depths reached
            failures.append(exc)
            raise NonFiniteError(exc.p, "feedback") from exc
        except TimeBudgetSpent as exc:
            spent.append(exc)
            raise NonFiniteError(exc.p, "time budget") from exc

    # a fixed-step method takes of the options only the step budget (`Method.integrate`)
    outcome = integrate_integrators(method, guarded, y0, where.q, where.depths_desc,
                                    np.empty(0), where.piece_of, rtol=rtol, atol=atol,
                                    step=step, options=options)
    if grid is not None:
        outcome.extra["grid"] = (grid, outcome.ys)
        outcome.ys = outcome.ys[np.searchsorted(-grid, -setup.depths_desc)]
    if spent:
        exc = spent[-1]
        outcome.success = False
        outcome.failed_at = exc.p
        outcome.message = (f"Stopped: {exc}. The depths above it are returned, those beyond "
                           f"are NaN; give a larger `max_time`, request shallower depths or "
                           f"a lower `order`.")
        outcome.extra["time_budget"] = exc
    if failures:
        exc = failures[-1]
        outcome.success = False
        outcome.message = f"Optimal feedback failed: {exc}."
        outcome.failed_at = exc.p
        outcome.extra["optimality_error"] = exc
    return outcome


def finish(result: Any, outcome: Outcome, keys: tuple[str, ...]) -> Any:
    """The draft ``result`` with the `OptimalityError` of ``outcome`` (None if none), which
    gets the depths it reached."""
    exc = outcome.extra.get("optimality_error")
    result = result.but(optimality_error=exc)
    if exc is not None:
        exc.keep_reached(result, keys)
    return result
