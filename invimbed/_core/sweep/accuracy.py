"""The accuracy verdict: is the jet's answer within the tolerance, per depth and input?

`assess` applies the error estimate and the ratio test of the jet series
(docs/theory.md, "The jet closure"); `collect_results` turns its `Verdict` into
``success``, ``converged`` and warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


from ..setup.settings import WARN_RELATIVE_ERROR, Accuracy
#: The ratio test: successive differences of the jet series ``d_(K-1) = |F_K - F_(K-1)|``,
#: ``d_K = |F_(K+1) - F_K|`` (in units of the tolerance) must shrink by at least this
#: factor, ``d_K <= RATIO_MAX d_(K-1)``, for the estimate to be trusted.
RATIO_MAX = 0.8
#: Differences below this fraction of the tolerance are not tested for their ratio: the
#: series has converged to well within the tolerance (and the integrator's own noise,
#: not the closure, sets such small differences).
RATIO_FLOOR = 1e-2
#: The same floor for the default rule (no ``tol``), in its units (10% of
#: ``max(1, |field|)``): two differences both below it pass the ratio test. The estimate
#: (order ``K`` against ``K + 1``) understated the error by up to 24.6x on the forced
#: double pendulum and 5.5x on Lorenz-63 (an independent check against `solve_adjoint`),
#: so differences below 1/25 of the rule leave the error within it even where the series'
#: ratio cannot be read; the rule is loose, and a floor this far within it keeps the test
#: from refusing depths whose differences are small but do not shrink (the integrator's
#: noise, a Taylor term crossing zero).
DEFAULT_RATIO_FLOOR = 1.0 / 25.0


@dataclass
class Verdict:
    """What `assess` finds, per depth (axis 0, as given) and input (axis 1)."""

    converged: np.ndarray        # (n, B) bool
    estimate: np.ndarray         # (n, B) largest estimate in units of the tolerance
    ratio: np.ndarray            # (n, B) d_K / d_(K-1) in units of the tolerance (NaN: none)
    refused: np.ndarray          # (n, B) refused by the ratio test
    warnings: list
    message: str
    more: np.ndarray | None = None   # (n, B) further orders predicted (`orders_needed`)
    #: (n, B) the ratio ``d_(K+1) / d_K`` of the look-ahead pair, the one order ``K + 1``'s
    #: ratio test takes (0 where negligible; None without the look-ahead)
    top: np.ndarray | None = None

    @property
    def all_converged(self) -> bool:
        return bool(np.all(self.converged))


def _weighted(diff: dict, fields: dict, accuracy: Accuracy, n: int,
              B: int) -> tuple[np.ndarray, dict]:
    """Largest ``|diff| / scale`` per (depth, input) over every field and component, and
    the same per field."""
    per = {}
    for k, d in diff.items():
        d = np.asarray(d, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = d / accuracy.scale(np.asarray(fields[k], float))
        # two orders that agree exactly (a zero difference) pass any tolerance, also a
        # pure relative one at a field that is exactly zero (0 / 0); an estimate that is
        # NaN otherwise is no estimate
        w = np.where(d == 0, 0.0, np.where(np.isnan(w), np.inf, w)).reshape(n, B, -1)
        per[k] = np.max(w, axis=2, initial=0.0)
    total = np.max(np.stack(list(per.values())), axis=0) if per else np.zeros((n, B))
    return total, per


#: What a not-converged message recommends where the caller has `solve_imbedding`'s
#: options (`Setup.remedy` names another).
REMEDY = ("raise `order` (or pass tol=... to let the sweep choose it), request shallower "
          "depths, or pass fallback='adjoint' for exact values there")


def assess(depths: np.ndarray, fields: dict, errors: dict, lower: dict | None,
           accuracy: Accuracy, upper: dict | None = None,
           remedy: str | None = None, safety: float = 1.0) -> Verdict:
    """Decide, per depth and input, whether the jet's answer is within the tolerance.

    The error estimate is ``d_K = |F_(K+1) - F_K|`` per field (the reported order is
    ``K``), measured in units of the tolerance (`Accuracy.scale`: ``atol + rtol |F|`` of
    its ``tol``, or 10% of ``max(1, |F|)`` without). Without ``lower`` and ``upper`` its
    largest entry over the fields and components must be at most 1.

    The ratio test (with ``tol`` and, in the units of the 10% rule, without it): with
    ``lower`` (``d_(K-1) = |F_K - F_(K-1)|``) and/or ``upper``
    (``d_(K+1) = |F_(K+2) - F_(K+1)|``), the successive differences of every field must
    shrink geometrically, each at most `RATIO_MAX` times the one before (a pair of
    differences both below `RATIO_FLOOR` of the tolerance, `DEFAULT_RATIO_FLOOR` of the
    default rule, passes: converged far within the tolerance).
    Otherwise the depth is refused, whatever the size of ``d_K``: the series does not
    converge there and ``d_K`` says nothing about the error. When it passes, the error
    of ``F_K`` is bounded by the geometric tail ``d_K + d_(K+1) / (1 - r)`` (or
    ``d_K / (1 - r)`` without ``upper``), ``r`` the largest ratio, which must be at
    most 1. Depths not reached (NaN fields) are not converged. The message of a depth
    not converged recommends ``remedy`` (default `REMEDY`).

    ``safety`` multiplies the bound: where the ratio test is asked for but its jets are
    not carried (the fixed-step sweeps of the accelerated backends, `safety_factor`), the
    estimate alone must be within ``1 / safety`` of the tolerance.
    """
    n = depths.size
    first = next(iter(fields.values()))
    B = first.shape[1] if first.ndim >= 2 else 1
    e, per = _weighted(errors, fields, accuracy, n, B)
    finite = np.ones((n, B), bool)
    for k in errors:
        v = np.asarray(fields[k], float).reshape(n, B, -1)
        finite &= np.all(np.isfinite(v), axis=2)
    ratio = np.full((n, B), np.nan)
    refused = np.zeros((n, B), bool)
    bound = e * safety
    more = top = None
    chain = [d for d in (lower, errors, upper) if d is not None]
    if len(chain) > 1:
        weighted = [_weighted(d, fields, accuracy, n, B)[1] for d in chain]
        more = orders_needed(weighted, 1 if upper is not None else 0)
        ratio = np.zeros((n, B))
        floor = RATIO_FLOOR if accuracy.checked else DEFAULT_RATIO_FLOOR
        for a, b in zip(weighted[:-1], weighted[1:]):
            pair = np.zeros((n, B))
            for k in a:
                negligible = (a[k] <= floor) & (b[k] <= floor)
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = np.where(a[k] > 0, b[k] / a[k], np.inf)
                pair = np.maximum(pair, np.where(negligible, 0.0, r))
            ratio = np.maximum(ratio, pair)
        if upper is not None:
            top = pair                  # the last pair: (d_K, d_(K+1))
        refused = ratio > RATIO_MAX
        r = np.minimum(ratio, RATIO_MAX)
        if upper is not None:
            e_up, _ = _weighted(upper, fields, accuracy, n, B)
            bound = e + e_up / (1 - r)
        else:
            bound = e / (1 - r)
    converged = finite & (bound <= 1.0) & ~refused
    if more is not None:
        more = np.where(converged, 0.0, np.maximum(more, 1.0))
    warnings: list = []
    message = ""
    bad = ~converged & finite
    if np.any(bad):
        i = int(np.argmax(np.where(bad.any(axis=1), depths, -np.inf)))  # the shallowest
        b = int(np.argmax(bad[i]))
        p = float(depths[i])
        what = ("the tolerance" if accuracy.checked else
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
            why = (f"the closure's error estimate of `{worst}` is "
                   f"{bound[i, b] / safety:.2g} times {what}")
            if safety != 1.0:
                why += (f", above 1/{safety:g} of it: this sweep carries no lower order for "
                        f"the ratio test, and the estimate alone can understate the error "
                        f"that much")
        message = (f"Not converged from depth p = {p:.6g} on ({count} of {bad.size} "
                   f"(depth, input) pairs): {why}. The fields there are approximate; "
                   f"{remedy or REMEDY}.")
        warnings.append(_warning(code, message, p))
    return Verdict(converged, bound, ratio, refused, warnings, message, more, top)


def safety_factor(accuracy: Accuracy) -> float:
    """The factor on the estimate of a sweep that carries no lower order (the fixed-step
    sweeps of ``backend="numba"`` and ``"cupy"``): without ``tol`` and with
    ``ratio_test=True`` the default rule cannot run the ratio test there, so the estimate
    alone must be within `DEFAULT_RATIO_FLOOR` of the rule, where the estimate's measured
    understatement (up to 24.6x) still leaves the error within it (docs/accuracy.md, "The
    estimate, and when it is refused"); 1 otherwise (``tol``, which those backends run
    only with ``ratio_test=False``, or ``ratio_test=False``: the estimate alone, as asked)."""
    return 1.0 / DEFAULT_RATIO_FLOOR if accuracy.ratio_test and not accuracy.checked else 1.0


def orders_needed(chain: list, offset: int) -> np.ndarray:
    """How many orders above the reported ``K`` the jet series needs to reach the
    tolerance, per (depth, input), predicted from its last differences (docs/accuracy.md,
    "How the sweep picks the jet order").

    ``chain`` holds, per field, the largest weighted differences (in units of the
    tolerance) of the series in order, the last ``d_L`` with ``L = K + offset``. The ratio
    ``r`` is the smaller of ``d_L / d_(L-1)`` and, with three differences, the mean ratio
    over two orders, ``(d_L / d_(L-2))^(1/2)`` (one accidentally small difference, a
    Taylor term crossing zero, then does not pass for a growing series). Taking ``r`` as
    constant, the geometric bound of order ``K'`` is ``d_L r^(K' - L) / (1 - r)``, within
    the tolerance from ``K' - K = offset + log((1 - r) / d_L) / log r`` on. A field whose
    last difference is 0, or whose last two are both below `RATIO_FLOOR`, needs nothing;
    one whose previous difference is 0 (or not finite) gives no prediction: one more
    order; ``r >= 1`` (a divergent series) needs infinitely many. The largest over the
    fields is returned (a float, ``inf`` for a divergent series).
    """
    out = None
    for k in chain[-1]:
        d = [np.asarray(c[k], float) for c in chain]
        a, b = d[-2], d[-1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = b / a
            if len(d) > 2:
                r = np.where(d[-3] > 0, np.minimum(r, np.sqrt(b / d[-3])), r)
            j = offset + np.log(np.clip((1 - r) / b, 1e-300, None)) / np.log(r)
        j = np.where(r >= 1, np.inf, j)
        j = np.where((a > 0) & np.isfinite(a) & np.isfinite(b), j, 1.0)
        j = np.where((b == 0) | ((a <= RATIO_FLOOR) & (b <= RATIO_FLOOR)), -np.inf, j)
        out = j if out is None else np.maximum(out, j)
    return out


def _warning(code: str, message: str, depth: float | None = None) -> Any:
    from ..results.results import SolverWarning

    return SolverWarning(code, message, depth)
