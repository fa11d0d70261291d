"""Assembling a result: per-depth fields, the depth gradient, failures and accuracy.

`collect_results` turns an integrator's states into the `Draft` of a result (via
`pack_result`; the solver builds its result from the last draft, once), computing the depth gradient ``dJ/dp = -(Lam . f + R)`` of every depth at
once (`depth_gradient`) and the accuracy verdict of `invimbed._core.sweep.accuracy.assess`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .accuracy import assess
from ..setup.arguments import Setup
from ..setup.settings import Accuracy
from ..runtime.ordered import sum_products
from ..results.results import Draft
from ..results.status import Status, as_status


def depth_gradient(setup: Setup, p: float | np.ndarray, adjoint: np.ndarray,
                   x: np.ndarray | None = None, with_flow: bool = False) -> Any:
    """``dJ/dp = -(Lam . f(p, x, theta(p)) + R(p, x, theta(p)))`` (docs/theory.md, "The imbedded fields").

    ``p`` is one depth for the inputs ``setup.x``, or an array of per-row depths for the
    rows ``x`` (the ensemble adjoint). At a jump of the control, ``theta(p)`` is the value
    just above ``p`` (the derivative from above). ``with_flow=True`` also returns
    ``f(p, x, theta(p))``, which carries the adjoint's error into the depth gradient's
    (`depth_gradient_errors`)."""
    ctrl = setup.control
    if np.ndim(p) == 0:
        x = setup.x if x is None else x
        th = np.broadcast_to(ctrl.theta(p), (x.shape[0], ctrl.size))
    else:
        th = ctrl.theta_rows(p, ctrl.pieces(p, p))
    f = setup.provider.derivative("f", p, x, th)
    R = setup.provider.derivative("R", p, x, th)
    dg = depth_gradient_of(adjoint, f, R)
    return (dg, f) if with_flow else dg


def depth_gradient_of(adjoint: np.ndarray, f: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``-(Lam . f + R)`` of `depth_gradient` from ``f`` and ``R`` at its rows (``adjoint``
    and ``f`` (..., N), ``R`` (...)), summed in the order of `sum_products`."""
    return -(sum_products(adjoint, f) + R)


#: Rows (depth x input) per vectorised evaluation of `_depth_gradients`: large enough that
#: the per-call overhead vanishes, small enough that its temporaries stay a few MiB.
DEPTH_GRADIENT_ROWS = 1 << 15


def depth_gradient_errors(flow: np.ndarray, adjoint_errors: dict | None) -> np.ndarray | None:
    """The depth gradient's share of an error estimate (or of a difference of the jet
    series): ``dJ/dp = -(Lam . f + R)`` is exact in ``f`` and ``R`` at ``(p, x)``, so an
    error ``e`` of ``Lam`` moves it by at most ``sum_i |f_i| e_i`` (docs/accuracy.md,
    "`tol`: what the sweep is asked for"). ``flow`` (n, B, N) is ``f(p, x, theta(p))``,
    ``adjoint_errors`` the dict of differences whose ``"adjoint"`` (n, B, N) is read."""
    if adjoint_errors is None:
        return None
    return np.sum(np.abs(flow) * np.asarray(adjoint_errors["adjoint"], float), axis=-1)


def _depth_gradients(setup: Setup, adjoint: np.ndarray, with_flow: bool = False) -> Any:
    """`depth_gradient` at every depth: ``adjoint`` (n, B, N) in descending-depth order,
    evaluated in blocks of depths of about `DEPTH_GRADIENT_ROWS` rows each; NaN where the
    adjoint is not finite (depths not reached). ``with_flow=True`` also returns ``f`` at
    ``(p, x)`` (n, B, N; NaN there too)."""
    n, B, N = adjoint.shape
    out = np.full((n, B), np.nan)
    flow = np.full((n, B, N), np.nan) if with_flow else None
    per = max(1, DEPTH_GRADIENT_ROWS // max(B, 1))
    for lo in range(0, n, per):
        block = adjoint[lo:lo + per]
        m = block.shape[0]
        lam = block.reshape(m * B, N)
        ok = np.all(np.isfinite(lam), axis=1)
        if not np.any(ok):
            continue
        p = np.repeat(setup.depths_desc[lo:lo + per], B)
        x = np.tile(setup.x, (m, 1))
        every = bool(np.all(ok))
        p, lam, x = (p, lam, x) if every else (p[ok], lam[ok], x[ok])
        got = depth_gradient(setup, p if np.ptp(p) else float(p[0]), lam, x, with_flow)
        if with_flow:
            got, f = got
            f = np.broadcast_to(f, (got.shape[0], N))
            if every:
                flow[lo:lo + per] = f.reshape(m, B, N)
            else:
                flow[lo:lo + per].reshape(m * B, N)[ok] = f
        if every:
            out[lo:lo + per] = got.reshape(m, B)
        else:
            out[lo:lo + per].reshape(m * B)[ok] = got
    return (out, flow) if with_flow else out


def pack_result(setup: Setup, fields: dict[str, np.ndarray], *, success: bool, message: str,
                nfev: int, closure: str, method: str,
                error_estimate: dict[str, np.ndarray] | None = None, status: int | None = None,
                **extra: Any) -> Draft:
    """The `Draft` of a result: per-depth fields (in descending-depth order, axes
    (n, B, ...)) back in the user's order, without the batch axis for an unbatched ``x``.

    ``status`` defaults to 0 on success and -1 otherwise (`invimbed.Status`); array
    values of ``extra`` with a leading depth axis of the right size are rearranged too.
    The problem's own warnings (`BolzaProblem.solver_warnings`) are added to
    ``warnings`` (not to the message); the solver judges the functions' precision last
    (`mark_imprecise`)."""
    inverse = np.empty_like(setup.permutation)
    inverse[setup.permutation] = np.arange(setup.permutation.size)
    n = setup.permutation.size
    in_order = bool(np.all(inverse == np.arange(n)))   # depths given deepest last: no copy

    def arrange(a: np.ndarray) -> np.ndarray:
        a = a if in_order else a[inverse]
        return a if setup.batched else a[:, 0]

    for k, v in list(extra.items()):
        if isinstance(v, np.ndarray) and v.ndim >= 2 and v.shape[0] == n:
            extra[k] = arrange(v)
    notes = list(extra.pop("warnings", None) or [])
    notes += [note for note in setup.problem.solver_warnings() if note not in notes]
    if "derivatives" not in extra:
        extra["derivatives"] = (getattr(setup.provider, "derivative_source", None)
                                or setup.problem.derivative_source)
    return Draft(
        depths=setup.depths.copy(),
        **{k: arrange(v) for k, v in fields.items()},
        success=bool(success),
        status=(Status.SUCCESS if success else Status.FAILED) if status is None
        else as_status(status),
        message=message,
        nfev=int(nfev),
        closure=closure,
        method=method,
        error_estimate=(None if error_estimate is None else
                        {k: arrange(v) for k, v in error_estimate.items()}),
        warnings=notes,
        **extra,
    )


def mark_imprecise(setup: Setup, res: Draft) -> Draft:
    """The draft ``res`` with `Status.IMPRECISE` where its status is >= 0 and its ``rtol``
    its functions' precision cannot reach (``setup.unreachable``,
    `invimbed._core.inputs.probe`); other drafts are returned as they are.

    Each solver calls it once, where it has decided its status: the order loop, the
    fallback and the backends' verdict judge the error estimate alone. A negative status
    stays: its fields are not even as precise as the functions."""
    if setup.unreachable and res.status >= 0:
        return res.but(success=False, status=Status.IMPRECISE,
                       message=f"{res.message} Not within rtol: {setup.unreachable}; the fields "
                               f"are as precise as that function (status "
                               f"{int(Status.IMPRECISE)}).")
    return res


def collect_results(setup: Setup, outcome: Any, per_depth: Any,
                    shapes: dict[str, tuple[int, ...]], *, closure: str, method: str,
                    with_errors: bool, accuracy: Accuracy = Accuracy(),
                    warnings: list | None = None, stacked_fields: tuple | None = None,
                    predict: bool = False, flow: np.ndarray | None = None,
                    **extra: Any) -> Draft:
    """Per-depth fields from an integrator's states, with failures and accuracy reported.

    ``per_depth(p, y)`` returns ``(fields, errors)`` or ``(fields, errors, lower, upper)``
    (fields without ``"depth_grad"``: it is computed here for every depth at once)
    for a state ``y`` at depth ``p`` (an ``ArithmeticError`` there ends the result at that
    depth); ``lower`` and ``upper`` hold the previous and the next term of the jet series,
    ``|F_K - F_(K-1)|`` and ``|F_(K+2) - F_(K+1)|`` (or None), for the ratio test of
    `assess`. ``shapes`` gives each field's shape per depth, for the NaN
    rows of depths not reached. ``accuracy`` judges the estimates (`assess`): its ``tol``,
    or without one the default 10% criterion (`WARN_RELATIVE_ERROR`).

    ``stacked_fields = (fields, errors)`` gives the fields (and the error estimates, or
    None) of every depth at once instead of ``per_depth``: arrays (n, B, ...) in
    descending-depth order, owned by the caller and overwritten with NaN at the depths
    ``outcome.ys`` marks as not reached (an accelerated sweep's outputs, used without a
    copy); ``(fields, errors, lower, upper)`` adds the differences of the ratio test.

    The depth gradient's error estimate (and differences) follow from the adjoint's
    (`depth_gradient_errors`) where it is computed here, or where ``flow`` (n, B, N, in
    descending-depth order: ``f(p, x, theta(p))``, NaN where unknown) is given with the
    depth gradient in ``stacked_fields``; it then is judged like the other fields.

    ``predict=True`` (the order loop of `invimbed._core.sweep.orders`) adds the private keys
    ``"_bound"`` (the verdict's error bound in units of the tolerance), ``"_more"``
    (`invimbed._core.sweep.accuracy.orders_needed`, where the ratio test ran), ``"_top"``
    (the ratio of the look-ahead pair, `Verdict.top`, where the look-ahead ran) and
    ``"_nsteps"`` (the integrator's steps, or None), which the caller removes.
    """
    success, message = outcome.success, outcome.message
    warnings = list(warnings or [])
    nan = {k: np.full(shape, np.nan) for k, shape in shapes.items()}
    err_keys = ("z", "value", "adjoint") + (("param_grad",) if "param_grad" in shapes else ())
    if stacked_fields is not None:
        return _collect_stacked(setup, outcome, stacked_fields, shapes, err_keys,
                                closure=closure, method=method, with_errors=with_errors,
                                accuracy=accuracy, warnings=warnings, predict=predict, flow=flow,
                                **extra)
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
    computed = [r for r in rows if r is not nan]     # no depth reached: the NaN rows
    later = "depth_grad" in shapes and (not computed
                                        or any("depth_grad" not in r for r in computed))
    stacked = {k: np.stack([r.get(k, nan[k]) for r in rows]) for k in shapes}
    if later:       # one vectorised evaluation for every depth, not a call per depth
        stacked["depth_grad"], flow = _depth_gradients(setup, stacked["adjoint"], True)
    errors = ({k: np.stack([r[k] for r in err_rows]) for k in err_keys} if with_errors
              else None)
    lower = ({k: np.stack([r[k] for r in low_rows]) for k in err_keys} if has_lower and with_errors
             else None)
    upper = ({k: np.stack([r[k] for r in up_rows]) for k in err_keys} if has_upper and with_errors
             else None)
    return _verdict(setup, outcome, stacked, errors, lower, upper, success, message,
                    closure=closure, method=method, accuracy=accuracy, warnings=warnings,
                    predict=predict, flow=flow, **extra)


def _collect_stacked(setup: Setup, outcome: Any, stacked_fields: tuple, shapes: dict,
                     err_keys: tuple, *, closure: str, method: str, with_errors: bool,
                     accuracy: Accuracy, warnings: list, predict: bool = False,
                     flow: np.ndarray | None = None, **extra: Any) -> Draft:
    """`collect_results` for fields given stacked (``stacked_fields``)."""
    fields, errs, lower, upper = (tuple(stacked_fields) + (None, None))[:4]
    ys = np.asarray(outcome.ys)
    reached = np.all(np.isfinite(ys.reshape(ys.shape[0], -1)), axis=1)   # one pass, not per depth
    stacked = {k: fields[k] for k in shapes if k in fields}
    errors = {k: errs[k] for k in err_keys} if with_errors and errs is not None else None
    if errors is None:
        lower = upper = None
    for arr in (list(stacked.values()) + list((errors or {}).values())
                + list((lower or {}).values()) + list((upper or {}).values())):
        arr[~reached] = np.nan
    if "depth_grad" in shapes and "depth_grad" not in stacked:
        stacked["depth_grad"], flow = _depth_gradients(setup, stacked["adjoint"], True)
    return _verdict(setup, outcome, stacked, errors, lower, upper, outcome.success,
                    outcome.message, closure=closure, method=method, accuracy=accuracy,
                    warnings=warnings, predict=predict, flow=flow, **extra)


def _verdict(setup: Setup, outcome: Any, stacked: dict, errors: dict | None,
             lower: dict | None, upper: dict | None, success: bool, message: str, *,
             closure: str, method: str, accuracy: Accuracy, warnings: list,
             predict: bool = False, flow: np.ndarray | None = None,
             **extra: Any) -> Draft:
    """Non-finite results, the accuracy verdict (`assess`) and the packed result; with
    ``flow``, the depth gradient's error estimate and differences from the adjoint's
    (`depth_gradient_errors`)."""
    if flow is not None and errors is not None and "adjoint" in errors:
        errors, lower, upper = ({**d, "depth_grad": depth_gradient_errors(flow, d)}
                                if d is not None else None for d in (errors, lower, upper))
    finite = all(np.all(np.isfinite(v)) for v in stacked.values())
    if success and not finite:
        success = False
        bad = [float(p) for p, v in zip(setup.depths_desc, stacked["depth_grad"])
               if not np.all(np.isfinite(v))]
        message = (f"Non-finite depth gradient at depth p = {bad[0]:.10g} (the dynamics or "
                   f"running loss is not finite at x there)." if bad else
                   "Non-finite value in the results.")
    status = Status.SUCCESS if success else Status.FAILED
    converged = ratio = None
    if errors is not None:
        verdict = assess(setup.depths_desc, stacked, errors, lower, accuracy, upper,
                         setup.remedy)
        converged = verdict.converged
        ratio = verdict.ratio if (lower is not None or upper is not None) else None
        warnings += verdict.warnings
        if success and not verdict.all_converged:
            success, status = False, Status.NOT_CONVERGED
            message = verdict.message
        if predict:
            extra["_nsteps"] = outcome.extra.get("nsteps")
            extra["_bound"] = verdict.estimate
            if verdict.more is not None:
                extra["_more"] = verdict.more
            if verdict.top is not None:
                extra["_top"] = verdict.top
    return pack_result(setup, stacked, success=success, status=status, message=message,
                       nfev=outcome.nfev, closure=closure, method=method,
                       error_estimate=errors, converged=converged, series_ratio=ratio,
                       warnings=warnings, **extra)
