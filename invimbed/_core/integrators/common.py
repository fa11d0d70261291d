"""Pieces shared by the depth integrators."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..inputs.validation import as_positive_int

#: Default step budget of every integrator (`integrate_scipy`, `integrate_fixed`) and of
#: `solve_adjoint`: enough for any non-stiff sweep at the default tolerances, and few
#: enough that a stiff problem on an explicit method ends within seconds.
DEFAULT_MAX_STEPS = 10_000

#: Fixed-step grids: the number of steps is known before the first one, so a grid of up
#: to this many steps runs whole by default, and a finer one is refused before any work
#: (a ``step`` far too small for the depth range), unless ``max_steps`` is given.
DEFAULT_GRID_STEPS = 1_000_000


def check_max_steps(max_steps: Any) -> int | None:
    """``max_steps`` as an int (None passes through), or an error naming it."""
    return None if max_steps is None else as_positive_int(max_steps, "max_steps")


class NonFiniteError(ArithmeticError):
    """A right-hand side or state became non-finite at depth ``p``."""

    def __init__(self, p: float, what: str = "right-hand side") -> None:
        super().__init__(f"non-finite value in the {what} at depth p = {p:.10g}")
        self.p = p


@dataclass
class Outcome:
    """What an integrator returns: states at the requested depths and its bookkeeping."""

    ys: np.ndarray                    # (n, size), NaN where not reached
    nfev: int = 0
    success: bool = True
    message: str = "The sweep reached every requested depth."
    failed_at: float | None = None
    extra: dict = field(default_factory=dict)


class CountingRHS:
    """Counts evaluations and turns non-finite values into `NonFiniteError`.

    Every evaluation an adaptive solver makes goes through it: the first one at ``p = q``,
    scipy's first-step selection, the finite-difference Jacobians of Radau and BDF and
    their Newton iterations. So a non-finite state or derivative ends the solve where it
    appears, before scipy's step-size control can loop on it."""

    def __init__(self, rhs: Callable[[float, np.ndarray, Any], np.ndarray]) -> None:
        self.rhs = rhs
        self.nfev = 0

    def __call__(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        # a vectorized right-hand side (scipy's ``vectorized=True``): one per column
        self.nfev += 1 if y.ndim == 1 else y.shape[1]
        if not np.isfinite(y).all():
            raise NonFiniteError(p, "imbedded fields")
        dy = self.rhs(p, y, piece)
        if not np.isfinite(dy).all():
            raise NonFiniteError(p)
        return dy


def segments(q: float, p_min: float, breakpoints: np.ndarray) -> list[tuple[float, float]]:
    """Intervals ``(a, b)``, ``a > b``, from ``q`` down to ``p_min``, split at breakpoints."""
    inner = sorted((float(b) for b in breakpoints if p_min < b < q), reverse=True)
    ends = [q] + inner + [p_min]
    return [(ends[i], ends[i + 1]) for i in range(len(ends) - 1) if ends[i] > ends[i + 1]]


class SolverSteps:
    """The one loop over a scipy ``OdeSolver`` (``solve_ivp``'s), with a step budget.

    Iterating steps the solver while it runs and yields ``t_old`` (where the step
    began) after each step that did not fail, the last one included. The loop ends with
    `end` set: ``"finished"`` (``t_bound`` reached), ``"max_steps"`` (``steps`` reached
    ``max_steps`` before a step; the solver is where the budget ran out) or ``"failed"``
    (scipy's own failure, its text in `message`); it stays None where the caller broke
    out. ``steps`` counts on from the ``steps`` given, so that one budget can span
    several solvers. Exceptions of the right-hand side pass through."""

    def __init__(self, solver: Any, max_steps: int, steps: int = 0) -> None:
        self.solver = solver
        self.max_steps = max_steps
        self.steps = steps
        self.end: str | None = None
        self.message: str | None = None

    def __iter__(self):
        solver = self.solver
        while solver.status == "running":
            if self.steps >= self.max_steps:
                self.end = "max_steps"
                return
            t_old = solver.t
            message = solver.step()
            self.steps += 1
            if solver.status == "failed":
                self.end, self.message = "failed", message
                return
            yield t_old
        self.end = "finished"
