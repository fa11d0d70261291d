"""The step-size rules of the embedded Runge-Kutta pairs (scipy's ``RK45`` and ``RK23``),
written once for every backend.

Each rule is plain arithmetic on scalars or arrays: numpy applies it to every row of an
ensemble at once (`invimbed._core.integrators.ensemble`), numba compiles the same function
for the CPU kernels (`invimbed._backends._ensemble_parts` wraps it in ``njit``), and
numba-cuda can compile it as a device function (``numba.cuda.jit(device=True)``): it uses
only ``abs``, ``math``, comparisons, and the ufuncs ``np.minimum``/``np.maximum`` (NaN
propagates, as in numpy), allocates nothing and branches on nothing that an array could
hold.

The rules (scipy's ``RungeKutta._step_impl`` and ``select_initial_step``; Hairer, Norsett
& Wanner, II.4; docs/performance.md, "The compiled adaptive sweep"):

* the error of a step is measured entry by entry against
  ``atol + rtol max(|y|, |y_new|)`` (`error_scale`), and its RMS norm decides: below 1
  the step is accepted;
* after an accepted step the step grows by ``min(max_factor, safety norm^(-1/(k+1)))``,
  not above 1 right after a rejection (`grow_factor`); after a rejected one it shrinks by
  ``max(min_factor, safety norm^(-1/(k+1)))`` (`shrink_factor`);
* the first step (`first_guess`, `second_guess`) from the norms of ``y``, ``f`` and the
  difference of ``f`` over a trial step ``h0``, against the same scale at ``y``;
* an explicit method on a stiff problem stops early (`stiff_run`, `stiff_stops`): once
  ``STIFF_WINDOW`` consecutive accepted steps sat at its stability limit (Shampine's
  ``h |lambda|`` above ``STIFF_H_LAMBDA``) and the distance left at that step size
  needs more steps than the budget has left (docs/method.md, "The classical
  reference").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: scipy's constants of the step-size control.
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0

#: Consecutive accepted steps at the stability limit (``h |lambda| > STIFF_H_LAMBDA``,
#: `invimbed._core.results.failures.STIFF_H_LAMBDA`) after which an explicit method is
#: judged stiff, and stopped if the budget cannot carry it through (`stiff_stops`).
STIFF_WINDOW = 25

#: The smallest positive float: a zero error norm raised to the (negative) exponent gives
#: a finite factor above ``max_factor`` instead of a division by zero.
_TINY = 5e-324


def error_scale(y: Any, y_new: Any, rtol: float, atol: float) -> Any:
    """The scale an error is measured against, ``atol + rtol max(|y|, |y_new|)``, entry
    by entry (``error_scale(y, y, ...)`` is the first-step rule's ``atol + rtol |y|``)."""
    return atol + np.maximum(abs(y), abs(y_new)) * rtol


def grow_factor(norm: Any, rejected: Any, safety: float, max_factor: float,
                exponent: float) -> Any:
    """The step's factor after an accepted step: ``min(max_factor, safety
    norm^exponent)`` (``max_factor`` for a zero norm), not above 1 where the step before
    was rejected (``rejected`` a bool or a bool array; ``exponent = -1/(k+1)``)."""
    factor = np.minimum(max_factor, safety * np.maximum(norm, _TINY) ** exponent)
    return np.minimum(factor, max_factor - (max_factor - 1.0) * rejected)


def shrink_factor(norm: Any, safety: float, min_factor: float, exponent: float) -> Any:
    """The step's factor after a rejected step: ``max(min_factor, safety
    norm^exponent)``."""
    return np.maximum(min_factor, safety * norm ** exponent)


def first_guess(d0: float, d1: float, span: float) -> float:
    """The trial step ``h0`` of the first-step rule from ``d0 = ||y / scale||`` and
    ``d1 = ||f / scale||`` (RMS norms): ``0.01 d0 / d1``, 1e-6 where either is below
    1e-5; not beyond ``span``. (Scalars: the numpy ensemble applies the same rule with
    ``np.where``, `invimbed._core.integrators.ensemble._initial_step`.)"""
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    return np.minimum(h0, span)


def second_guess(d1: float, d2: float, h0: float, order: int, span: float) -> float:
    """The first step from ``d2 = ||(f(y + h0 f) - f) / scale|| / h0``:
    ``(0.01 / max(d1, d2))^(1/(order+1))`` (``max(1e-6, 1e-3 h0)`` where both norms are
    below 1e-15, ``h0`` where that is not finite), at most ``100 h0`` and ``span``."""
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = np.maximum(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / np.maximum(d1, d2)) ** (1.0 / (order + 1))
    if not math.isfinite(h1):
        h1 = h0
    return np.minimum(np.minimum(100 * h0, h1), span)


def stiff_run(run: Any, h_lambda: Any, limit: float) -> Any:
    """The consecutive accepted steps at the stability limit after one more accepted
    step of Shampine's estimate ``h_lambda``: ``run + 1`` where ``h_lambda > limit``,
    else 0 (integers, or integer arrays)."""
    return (run + 1) * (h_lambda > limit)


def stiff_stops(run: Any, window: int, steps: Any, distance: Any, h_next: Any,
                h_last: Any, max_steps: int) -> Any:
    """Whether an explicit method stops as stiff: its last ``window`` accepted steps
    (``run``, `stiff_run`) sat at the stability limit, and at the size of its steps
    (the larger of the next step ``h_next`` and the last one ``h_last``) the
    ``distance`` left needs more steps than the ``max_steps - steps`` the budget has
    left, i.e. ``steps + ceil(distance / h) > max_steps`` (written without ``ceil``:
    the same for an integer budget)."""
    h = np.maximum(h_next, abs(h_last))
    return (run >= window) & (distance / h > max_steps - steps)
