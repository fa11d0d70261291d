"""Vectorised functions at per-row times: the contract, its check, and the fallback.

A batch whose rows are at different times (every row of the ensemble
`invimbed.solve_adjoint` runs from its own depth; the depth gradients of every depth at
once) reaches a ``vectorized=True`` function in one call, with ``t`` an array of shape
``(B,)``: ``t[b]`` is the time of row ``b``, so ``t`` broadcasts against ``z[:, 0]``
(shape ``(B,)``). Where the rows share one time, ``t`` is a float.

The contract is checked at the first call with per-row times, on a few of its rows:
the call with ``t`` as an array must give what one call per time gives. A function that
raises there, returns another shape, or other values (``math.sin(t)``, ``float(t)``,
``if t < c``, ``t * z`` with ``t`` of shape ``(B,)`` against ``z`` of shape ``(B, N)``)
is then called once per distinct time, and every result of the problem says so in a
`SolverWarning` (code ``"scalar_time"``) naming the function and what to change.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..results.results import SolverWarning

#: How many rows (at distinct times) the check evaluates.
CHECK_ROWS = 3
#: Relative agreement (of the largest value) asked of the array call and the per-time
#: calls: both evaluate the same expressions; only a summation order may differ.
CHECK_RTOL = 1e-12

WARNING_CODE = "scalar_time"


def check_rows(t: np.ndarray) -> np.ndarray:
    """Up to `CHECK_ROWS` rows of ``t`` at distinct times, the first of each time."""
    _, first = np.unique(np.asarray(t), return_index=True)
    return np.sort(first)[:CHECK_ROWS]


def array_time_failure(call: Callable, t: np.ndarray, z: Any, theta: Any, xp: Any) -> str | None:
    """Why ``call(t, z, theta)`` with ``t`` an array of per-row times is not what one call
    per time gives, on a few rows of the batch (None if it is).

    ``call`` is the batched user function; ``t`` (B,) holds at least two distinct times.
    An exception of a call with a float ``t`` propagates: it is the function's own error.
    """
    rows = check_rows(t)
    ts = np.asarray(t)[rows]
    zs, ths = z[rows], theta[rows]
    single = [xp.asarray(call(float(ts[k]), zs[k:k + 1], ths[k:k + 1]), dtype=xp.float64)
              for k in range(rows.size)]
    expected = (rows.size,) + tuple(single[0].shape[1:])
    if any(tuple(s.shape) != (1,) + expected[1:] for s in single):
        return None     # per-time calls disagree among themselves: the shape checks' job
    ref = xp.concatenate(single, axis=0)
    try:
        with np.errstate(all="ignore"):
            out = xp.asarray(call(xp.asarray(ts), zs, ths), dtype=xp.float64)
    except Exception as exc:  # noqa: BLE001 - any failure means: scalar t only
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"with t an array of shape ({rows.size},) it raised {type(exc).__name__}: {text}"
    if tuple(out.shape) != expected:
        return (f"with t an array of shape ({rows.size},) it returned shape "
                f"{tuple(out.shape)}, where one call per time gives {expected}")
    scale = float(xp.max(xp.abs(ref))) if ref.size else 0.0
    finite = xp.isfinite(ref)
    same_nan = bool(xp.all(xp.isfinite(out) == finite))
    gap = float(xp.max(xp.abs(xp.where(finite, out - ref, 0.0)))) if ref.size else 0.0
    if not same_nan or gap > CHECK_RTOL * max(scale, np.finfo(float).tiny):
        return (f"with t an array of shape ({rows.size},) it returned values that differ "
                f"from one call per time by up to {gap:.3g} (largest value {scale:.3g})")
    return None


def per_distinct_time(call: Callable, t: np.ndarray, z: Any, theta: Any, xp: Any) -> Any:
    """``call`` once per distinct time of ``t`` (B,), each with a float ``t`` and the rows
    at that time; the results put back in row order."""
    times, inverse = np.unique(np.asarray(t), return_inverse=True)
    out = None
    for k, tk in enumerate(times):
        rows = np.flatnonzero(inverse == k)
        part = xp.asarray(call(float(tk), z[rows], theta[rows]), dtype=xp.float64)
        if out is None:
            out = xp.empty((z.shape[0],) + tuple(part.shape[1:]))
        out[rows] = part
    return out


class TimeContract:
    """Per problem: which vectorised functions passed the check, which take a scalar
    ``t`` only (and why)."""

    def __init__(self) -> None:
        self.checked: set[str] = set()
        self.scalar_only: dict[str, str] = {}

    def accepts_array(self, name: str, call: Callable, t: np.ndarray, z: Any, theta: Any,
                      xp: Any) -> bool:
        """Whether the function ``name`` takes per-row times: checked at its first call
        with per-row times, then remembered."""
        if name not in self.checked:
            reason = array_time_failure(call, t, z, theta, xp)
            if reason is not None:
                self.scalar_only[name] = reason
            self.checked.add(name)
        return name not in self.scalar_only

    def warnings(self) -> list[SolverWarning]:
        """One `SolverWarning` per function that takes a scalar ``t`` only."""
        return [SolverWarning(WARNING_CODE, _message(name, why))
                for name, why in self.scalar_only.items()]


def _message(name: str, why: str) -> str:
    return (f"`{name}` takes a scalar t only ({why}), so it was called once per distinct "
            f"time of the rows (up to one call per row) instead of once per batch: with "
            f"vectorized=True, t is a float where the rows share one time and an array of "
            f"shape (B,), one time per row, where they do not. Write it with array "
            f"operations on t (np.sin(t), not math.sin(t) or float(t); "
            f"np.where(t < c, a, b), not `if t < c`; np.expand_dims(t, -1) * z, not t * z), "
            f"or pass autonomous=True if it does not depend on t")
