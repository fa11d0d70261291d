"""Validation and bookkeeping shared by `solve_imbedding` and `solve_adjoint`.

It holds only what both need to read the user's arguments and to pack a result; the
numerics of the two solvers share nothing beyond the problem and its derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .controls import OpenLoopControl, as_control
from .derivatives import DerivativeProvider
from .integrators import FIXED_METHODS, SCIPY_METHODS
from .ordered import sum_products
from .problem import BolzaProblem
from .results import ImbeddingResult
from .validation import as_depths, as_state, check_choice, check_positive, describe


@dataclass
class Setup:
    problem: BolzaProblem
    x: np.ndarray               # (B, N)
    batched: bool
    depths: np.ndarray          # as given
    order: np.ndarray           # indices sorting depths descending
    depths_desc: np.ndarray
    control: OpenLoopControl
    provider: DerivativeProvider

    @property
    def q(self) -> float:
        return self.problem.q

    def piece_of(self, a: float, b: float) -> Any:
        """The control piece on the open interval between ``b`` and ``a``."""
        return self.control.piece(0.5 * (a + b), min(a, b), max(a, b))


def prepare(problem: Any, x: Any, depths: Any, control: Any, method: str, rtol: Any,
            atol: Any, step: Any, allowed_methods: tuple[str, ...]) -> Setup:
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    xb, batched = as_state(x, None, "x")
    dep = as_depths(depths, problem.q)
    ctrl = as_control(control)
    check_choice(method, "method", allowed_methods)
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    if method in FIXED_METHODS and method != "disc":
        if step is None:
            raise ValueError(f"`step` is required for the fixed-step method {method!r}: give the "
                             f"largest step in depth, e.g. step=0.01; got step=None")
        check_positive(step, "step")
    elif step is not None and method in SCIPY_METHODS:
        check_positive(step, "step")
    # the control must cover [p_min, q]; PiecewiseConstant raises naming both ranges
    p_min = float(dep.min())
    ctrl.theta(problem.q)
    ctrl.theta(p_min)
    problem.check_shapes(problem.q, xb, ctrl.theta(problem.q))
    provider = problem.provider(xb.shape[1], ctrl.size)
    order = np.argsort(-dep, kind="stable")
    return Setup(problem, xb, batched, dep, order, dep[order], ctrl, provider)


def depth_gradient(setup: Setup, p: float | np.ndarray, adjoint: np.ndarray,
                   x: np.ndarray | None = None) -> np.ndarray:
    """``dJ/dp = -(Lam . f(p, x, theta(p)) + R(p, x, theta(p)))`` (docs/theory.md, "The imbedded fields").

    ``p`` is one depth for the inputs ``setup.x``, or an array of per-row depths for the
    rows ``x`` (the ensemble adjoint). At a jump of the control, ``theta(p)`` is the value
    just above ``p`` (the derivative from above)."""
    ctrl = setup.control
    if np.ndim(p) == 0:
        x = setup.x if x is None else x
        th = np.broadcast_to(ctrl.theta(p), (x.shape[0], ctrl.size))
    else:
        th = ctrl.theta_rows(p, ctrl.pieces(p, p))
    f = setup.provider.derivative("f", p, x, th)
    R = setup.provider.derivative("R", p, x, th)
    return -(sum_products(adjoint, f) + R)


def _depth_gradients(setup: Setup, adjoint: np.ndarray) -> np.ndarray:
    """`depth_gradient` at every depth at once: ``adjoint`` (n, B, N) in descending-depth
    order; NaN where the adjoint is not finite (depths not reached)."""
    n, B, N = adjoint.shape
    lam = adjoint.reshape(n * B, N)
    ok = np.all(np.isfinite(lam), axis=1)
    out = np.full(n * B, np.nan)
    if np.any(ok):
        p = np.repeat(setup.depths_desc, B)[ok]
        x = np.tile(setup.x, (n, 1))[ok]
        out[ok] = depth_gradient(setup, p if np.ptp(p) else float(p[0]), lam[ok], x)
    return out.reshape(n, B)


def pack_result(setup: Setup, fields: dict[str, np.ndarray], *, success: bool, message: str,
                nfev: int, closure: str, method: str,
                error_estimate: dict[str, np.ndarray] | None = None, status: int | None = None,
                **extra: Any) -> ImbeddingResult:
    """Put per-depth fields (in descending-depth order, axes (n, B, ...)) back in the
    user's order and drop the batch axis for an unbatched ``x``.

    ``status`` defaults to 0 on success and -1 otherwise (`invimbed.STATUS`); array
    values of ``extra`` with a leading depth axis of the right size are rearranged too."""
    inverse = np.empty_like(setup.order)
    inverse[setup.order] = np.arange(setup.order.size)
    n = setup.order.size

    def arrange(a: np.ndarray) -> np.ndarray:
        a = a[inverse]
        return a if setup.batched else a[:, 0]

    for k, v in list(extra.items()):
        if isinstance(v, np.ndarray) and v.ndim >= 2 and v.shape[0] == n:
            extra[k] = arrange(v)
    res = ImbeddingResult(
        depths=setup.depths.copy(),
        **{k: arrange(v) for k, v in fields.items()},
        success=bool(success),
        status=(0 if success else -1) if status is None else int(status),
        message=message,
        nfev=int(nfev),
        closure=closure,
        method=method,
        error_estimate=(None if error_estimate is None else
                        ImbeddingResult({k: arrange(v) for k, v in error_estimate.items()})),
        **extra,
    )
    res.setdefault("warnings", [])
    return res


def collect_results(setup: Setup, outcome: Any, per_depth: Any,
                    shapes: dict[str, tuple[int, ...]], *, closure: str, method: str,
                    with_errors: bool, tol: tuple[float, float] | None = None,
                    warnings: list | None = None, **extra: Any) -> ImbeddingResult:
    """Per-depth fields from an integrator's states, with failures and accuracy reported.

    ``per_depth(p, y)`` returns ``(fields, errors)`` or ``(fields, errors, lower, upper)``
    (fields without ``"depth_grad"``: it is computed here for every depth at once)
    for a state ``y`` at depth ``p`` (an ``ArithmeticError`` there ends the result at that
    depth); ``lower`` and ``upper`` hold the previous and the next term of the jet series,
    ``|F_K - F_(K-1)|`` and ``|F_(K+2) - F_(K+1)|`` (or None), for the ratio test of
    `assess`. ``shapes`` gives each field's shape per depth, for the NaN
    rows of depths not reached. ``tol`` is the ``(rtol, atol)`` of `parse_tol`, or None
    for the default 10% criterion (`WARN_RELATIVE_ERROR`).
    """
    success, message = outcome.success, outcome.message
    warnings = list(warnings or [])
    nan = {k: np.full(shape, np.nan) for k, shape in shapes.items()}
    err_keys = ("z", "value", "adjoint") + (("param_grad",) if "param_grad" in shapes else ())
    rows, err_rows, low_rows, up_rows = [], [], [], []
    has_lower = has_upper = False
    stopped = False
    for p, y in zip(setup.depths_desc, outcome.ys):
        fl, er = nan, {k: nan[k] for k in err_keys}
        lo, up = dict(er), dict(er)
        if not stopped and np.all(np.isfinite(y)):
            try:
                got = per_depth(float(p), y)
                fl, er = got[0], got[1]
                if len(got) > 2 and got[2] is not None:
                    lo, has_lower = got[2], True
                if len(got) > 3 and got[3] is not None:
                    up, has_upper = got[3], True
            except ArithmeticError as exc:
                stopped, success = True, False
                message = f"Failed at depth p = {p:.10g}: {exc}."
                fl, er = nan, {k: nan[k] for k in err_keys}
        rows.append(fl)
        err_rows.append(er)
        low_rows.append(lo)
        up_rows.append(up)
    later = "depth_grad" in shapes and any("depth_grad" not in r for r in rows)
    stacked = {k: np.stack([r.get(k, nan[k]) for r in rows]) for k in shapes}
    if later:       # one vectorised evaluation for every depth, not a call per depth
        stacked["depth_grad"] = _depth_gradients(setup, stacked["adjoint"])
    errors = ({k: np.stack([r[k] for r in err_rows]) for k in err_keys} if with_errors
              else None)
    lower = ({k: np.stack([r[k] for r in low_rows]) for k in err_keys} if has_lower and with_errors
             else None)
    upper = ({k: np.stack([r[k] for r in up_rows]) for k in err_keys} if has_upper and with_errors
             else None)
    finite = all(np.all(np.isfinite(v)) for v in stacked.values())
    if success and not finite:
        success = False
        bad = [float(p) for p, v in zip(setup.depths_desc, stacked["depth_grad"])
               if not np.all(np.isfinite(v))]
        message = (f"Non-finite depth gradient at depth p = {bad[0]:.10g} (the dynamics or "
                   f"running loss is not finite at x there)." if bad else
                   "Non-finite value in the results.")
    status = 0 if success else -1
    converged = ratio = None
    if errors is not None:
        verdict = assess(setup.depths_desc, stacked, errors, lower, tol, upper)
        converged = verdict.converged
        ratio = verdict.ratio if (lower is not None or upper is not None) else None
        warnings += verdict.warnings
        if success and not verdict.all_converged:
            success, status = False, -2
            message = verdict.message
    return pack_result(setup, stacked, success=success, status=status, message=message,
                       nfev=outcome.nfev, closure=closure, method=method,
                       error_estimate=errors, converged=converged, series_ratio=ratio,
                       warnings=warnings, **extra)


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


def parse_tol(tol: Any) -> tuple[float, float] | None:
    """``tol`` of `solve_imbedding` as ``(rtol, atol)``: a float ``t`` means ``(t, t)``."""
    if tol is None:
        return None
    if isinstance(tol, (tuple, list)) and len(tol) == 2:
        pair = tuple(tol)
    elif np.ndim(tol) == 0 and not isinstance(tol, (bool, str)):
        pair = (tol, tol)
    else:
        raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair, but got "
                         f"{describe(tol)}")
    out = []
    for name, v in zip(("rtol", "atol"), pair):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < 0:
            raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair of "
                             f"non-negative floats, but its {name} is {describe(v)}")
        out.append(float(v))
    if out[0] == out[1] == 0.0:
        raise ValueError("`tol` must not be (0, 0): nothing but an exact answer would pass")
    return out[0], out[1]


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


def accuracy_note(depths_desc: np.ndarray, fields: dict, errors: dict) -> str:
    """Kept for old callers: the message of `assess` without ``tol`` (empty if every
    depth passes)."""
    return ""


ALL_METHODS = SCIPY_METHODS + FIXED_METHODS
