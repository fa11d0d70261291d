"""The accuracy verdict: is the jet's answer within the tolerance, per depth and input?

`assess` applies the error estimate and the ratio test of the jet series
(docs/theory.md, "The jet closure"); `collect_results` turns its `Verdict` into
``success``, ``converged`` and warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


#: Relative error estimate above which a depth is not converged when no ``tol`` is given
#: (relative to ``max(1, |field|)``).
WARN_RELATIVE_ERROR = 0.1
#: The ratio test: successive differences of the jet series ``d_(K-1) = |F_K - F_(K-1)|``,
#: ``d_K = |F_(K+1) - F_K|`` (in units of the tolerance) must shrink by at least this
#: factor, ``d_K <= RATIO_MAX d_(K-1)``, for the estimate to be trusted.
RATIO_MAX = 0.8
#: Differences below this fraction of the tolerance are not tested for their ratio: the
#: series has converged to well within the tolerance (and the integrator's own noise,
#: not the closure, sets such small differences).
RATIO_FLOOR = 1e-2


@dataclass
class Verdict:
    """What `assess` finds, per depth (axis 0, as given) and input (axis 1)."""

    converged: np.ndarray        # (n, B) bool
    estimate: np.ndarray         # (n, B) largest estimate in units of the tolerance
    ratio: np.ndarray            # (n, B) d_K / d_(K-1) in units of the tolerance (NaN: none)
    refused: np.ndarray          # (n, B) refused by the ratio test
    warnings: list
    message: str

    @property
    def all_converged(self) -> bool:
        return bool(np.all(self.converged))


def _scale(field: np.ndarray, tol: tuple[float, float] | None) -> np.ndarray:
    if tol is None:
        return WARN_RELATIVE_ERROR * np.maximum(np.abs(field), 1.0)
    return tol[1] + tol[0] * np.abs(field)


def _weighted(diff: dict, fields: dict, tol: Any, n: int, B: int) -> tuple[np.ndarray, dict]:
    """Largest ``|diff| / scale`` per (depth, input) over every field and component, and
    the same per field."""
    per = {}
    for k, d in diff.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.asarray(d, float) / _scale(np.asarray(fields[k], float), tol)
        w = w.reshape(n, B, -1)
        w = np.where(np.isnan(w), np.inf, w)  # an estimate that is NaN is no estimate
        per[k] = np.max(w, axis=2, initial=0.0)
    total = np.max(np.stack(list(per.values())), axis=0) if per else np.zeros((n, B))
    return total, per


def assess(depths: np.ndarray, fields: dict, errors: dict, lower: dict | None,
           tol: tuple[float, float] | None, upper: dict | None = None) -> Verdict:
    """Decide, per depth and input, whether the jet's answer is within the tolerance.

    The error estimate is ``d_K = |F_(K+1) - F_K|`` per field (the reported order is
    ``K``), measured in units of the tolerance (``atol + rtol |F|``, or 10% of
    ``max(1, |F|)`` without ``tol``). Without ``lower`` and ``upper`` its largest entry
    over the fields and components must be at most 1.

    The ratio test (with ``tol`` only; without it the criterion is the estimate alone,
    as it always was): with ``lower`` (``d_(K-1) = |F_K - F_(K-1)|``) and/or ``upper``
    (``d_(K+1) = |F_(K+2) - F_(K+1)|``), the successive differences of every field must
    shrink geometrically, each at most `RATIO_MAX` times the one before (a pair of
    differences both below `RATIO_FLOOR` of the tolerance passes: converged far within the tolerance).
    Otherwise the depth is refused, whatever the size of ``d_K``: the series does not
    converge there and ``d_K`` says nothing about the error. When it passes, the error
    of ``F_K`` is bounded by the geometric tail ``d_K + d_(K+1) / (1 - r)`` (or
    ``d_K / (1 - r)`` without ``upper``), ``r`` the largest ratio, which must be at
    most 1. Depths not reached (NaN fields) are not converged.
    """
    n = depths.size
    first = next(iter(fields.values()))
    B = first.shape[1] if first.ndim >= 2 else 1
    e, per = _weighted(errors, fields, tol, n, B)
    finite = np.ones((n, B), bool)
    for k in errors:
        v = np.asarray(fields[k], float).reshape(n, B, -1)
        finite &= np.all(np.isfinite(v), axis=2)
    ratio = np.full((n, B), np.nan)
    refused = np.zeros((n, B), bool)
    bound = e.copy()
    chain = [d for d in (lower, errors, upper) if d is not None]
    if len(chain) > 1 and tol is not None:
        weighted = [_weighted(d, fields, tol, n, B)[1] for d in chain]
        ratio = np.zeros((n, B))
        for a, b in zip(weighted[:-1], weighted[1:]):
            for k in a:
                negligible = (a[k] <= RATIO_FLOOR) & (b[k] <= RATIO_FLOOR)
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = np.where(a[k] > 0, b[k] / a[k], np.inf)
                ratio = np.maximum(ratio, np.where(negligible, 0.0, r))
        refused = ratio > RATIO_MAX
        r = np.minimum(ratio, RATIO_MAX)
        if upper is not None:
            e_up, _ = _weighted(upper, fields, tol, n, B)
            bound = e + e_up / (1 - r)
        else:
            bound = e / (1 - r)
    converged = finite & (bound <= 1.0) & ~refused
    warnings: list = []
    message = ""
    bad = ~converged & finite
    if np.any(bad):
        i = int(np.argmax(np.where(bad.any(axis=1), depths, -np.inf)))  # the shallowest
        b = int(np.argmax(bad[i]))
        p = float(depths[i])
        what = ("the tolerance" if tol is not None else
                f"{WARN_RELATIVE_ERROR:g} relative to max(1, |field|)")
        worst = max(per, key=lambda k: per[k][i, b])
        count = int(bad.sum())
        if refused[i, b]:
            code = "series_not_converging"
            why = (f"the jet series does not converge there: its successive differences "
                   f"shrink by a factor {ratio[i, b]:.2g} per order (at most {RATIO_MAX:g} "
                   f"is needed), so the error estimate ({e[i, b]:.2g} times {what}, largest "
                   f"in `{worst}`) cannot be trusted")
        else:
            code = "estimate_large"
            why = (f"the closure's error estimate of `{worst}` is {bound[i, b]:.2g} times "
                   f"{what}")
        message = (f"Not converged from depth p = {p:.6g} on ({count} of {bad.size} "
                   f"(depth, input) pairs): {why}. The fields there are approximate; raise "
                   f"`order` (or pass tol=... to let the sweep choose it), request shallower "
                   f"depths, or pass fallback='adjoint' for exact values there.")
        warnings.append(_warning(code, message, p))
    return Verdict(converged, bound, ratio, refused, warnings, message)


def _warning(code: str, message: str, depth: float | None = None) -> Any:
    from .results import SolverWarning

    return SolverWarning(code, message, depth)
