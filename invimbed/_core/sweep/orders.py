"""Raising the jet order only while it pays: the order loop of `solve_imbedding` with
``tol`` (docs/accuracy.md, "How the sweep picks the jet order").

`raise_order` sweeps at the starting order, then, for the (depth, input) pairs not yet
converged, predicts from the ratio of the jet series' last two differences
(`invimbed._core.sweep.accuracy.orders_needed`) the order each one needs, and sweeps
next at the lowest of those orders (skipping the orders no pair is predicted to converge
at, and, for a pair, the order ``K + 1`` whose ratio test order ``K`` already saw refuse
it: `next_order`). A pair is stopped at once where that order exceeds ``max_order`` or
the series diverges (ratio >= 1), and, with ``fallback="adjoint"``, where the exact
solve is predicted to cost less than the sweeps still needed. The next order is swept
only down to the deepest pair still raised. Every pair keeps the fields of the order
that converged it (or, failing that, of the highest order that reached it with finite
values): a higher order that fails loses nothing a lower one had found.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from .accuracy import RATIO_MAX
from ..results.results import DROP, Draft, SolverWarning
from ..results.status import Status

#: Growth of a sweep's cost from one order to the next, assumed until two orders have
#: been measured (then the measured ratio, at least 1, is used). Measured on this
#: package's sympy problems (docs/accuracy.md): 1.5 to 2.
COST_GROWTH = 2.0
#: A raised order's sweep may take this many times the steps of the starting order's
#: sweep (at least `RAISE_STEPS_MIN`); one that takes more is stopped there
#: (`invimbed._core.integrators.scipy_ivp`), its pairs keeping the fields of the order
#: below (docs/accuracy.md, "When a higher order fails"). The jets of a higher order
#: legitimately take more steps (each order adds a degree to the transport's stiffness);
#: on Robertson's kinetics with BDF, orders 3 and 4 took 1.3x and 1.9x the evaluations of
#: order 1, and order 5 crept on at steps of 1e-9 for minutes into a non-finite value.
RAISE_STEPS, RAISE_STEPS_MIN = 10, 1000
#: Why a pair stopped short of convergence (the codes of `raise_order`'s bookkeeping).
AT_TOP, DIVERGES, BEYOND, CHEAPER, FAILED = 1, 2, 3, 4, 5
FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def _timed(kind: str, fn: Callable, *args: Any, **kw: Any) -> tuple[Any, float]:
    """``fn(*args, **kw)`` and its wall time in seconds; ``kind`` is ``"sweep"`` or
    ``"probe"`` (the one place the loop reads the clock)."""
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def result_bytes(res: Draft) -> int:
    """Bytes of the arrays of ``res`` (its fields and error estimates), which the order
    loop keeps while it sweeps a higher order (`invimbed._core.sweep.memory.plan`)."""
    arrays = [v for v in res.values() if isinstance(v, np.ndarray)]
    arrays += [v for v in (res.get("error_estimate") or {}).values()
               if isinstance(v, np.ndarray)]
    return int(sum(a.nbytes for a in arrays))


def _pairs(setup: Any, a: Any) -> np.ndarray:
    """``a`` with axes (depth, input, ...): a view for an unbatched result."""
    a = np.asarray(a)
    return a if setup.batched else a[:, None]


def _finite(setup: Any, res: Draft) -> np.ndarray:
    n = np.size(res.depths)
    ok = np.ones((n, setup.x.shape[0]), bool)
    for k in FIELDS:
        v = _pairs(setup, res[k])
        ok &= np.all(np.isfinite(v.reshape(v.shape[0], v.shape[1], -1)), axis=2)
    return ok


def _subset(setup: Any, rows: np.ndarray) -> Any:
    """The setup of the depths ``rows`` (indices of ``setup.depths``) alone."""
    depths = setup.depths[rows]
    permutation = np.argsort(-depths, kind="stable")
    return dataclasses.replace(setup, depths=depths, permutation=permutation,
                               depths_desc=depths[permutation])


def raise_order(setup: Any, sweep: Callable, *, order: int, top: int,
                probe: Callable | None = None) -> Draft:
    """Sweep at ``order``, then raise the order for the pairs that need it and can get it.

    ``sweep(setup, K, budget=None, held=0)`` runs the sweep of order ``K`` with ``tol``,
    within the memory budget less ``held`` bytes (those of the result kept meanwhile; its
    result carries the private keys ``"_bound"``, ``"_nsteps"`` and, with the ratio test,
    ``"_more"`` of `invimbed._core.sweep.assembly.collect_results`); a raised order gets the
    ``budget`` of `RAISE_STEPS` times the starting order's steps, which an integrator that
    counts its steps keeps (``raise_budget`` of
    `invimbed._core.integrators.scipy_ivp.integrate_scipy`). ``probe(i, b)``, given with
    ``fallback="adjoint"``, solves the pair (depth ``i``, input ``b``) exactly and returns
    whether it succeeded; its time prices the exact solve of one pair.

    The rule (docs/accuracy.md): after the sweep of order ``K``, a pair not converged is
    predicted to need order ``K*`` (`next_order`: at least ``K + 2`` where the ratio of
    ``d_(K+1) / d_K``, which order ``K + 1``'s ratio test takes, refuses it already); it is
    stopped if ``K* > top`` or ``K* = inf``. With a probe, the sweeps of orders
    ``K + 1 .. k`` are predicted to cost ``c_K (g + g^2 + ... + g^(k - K))`` (``c_K`` the
    measured cost of order ``K``, ``g`` the measured growth per order, `COST_GROWTH` before
    two are measured), the exact solve ``m t`` for ``m`` pairs (``t`` the probe's time,
    measured once, on the deepest pair); the loop goes on to the ``k`` that saves the most,
    ``m_k t - cost(k)`` with ``m_k`` the pairs predicted to converge by ``k`` (the others
    stop at once), and stops where no ``k`` saves anything. The next sweep is of the lowest
    order predicted for a pair still raised (at least ``K + 1``): the orders between, which
    no pair is predicted to converge at, are skipped.
    """
    res, cost = _timed("sweep", sweep, setup, order)
    costs = {order: cost}
    n, B = np.size(setup.depths), setup.x.shape[0]
    conv = res.get("converged")
    if conv is None:
        return res
    accepted = _pairs(setup, conv).copy()
    bound = _pairs(setup, res.get("_bound", np.full(np.shape(conv), np.nan))).copy()
    more = _pairs(setup, res.get("_more", np.ones(np.shape(conv)))).copy()
    top_ratio = _pairs(setup, res.get("_top", np.full(np.shape(conv), np.nan))).copy()
    steps = res.get("_nsteps")
    budget = None if steps is None else max(RAISE_STEPS * int(steps), RAISE_STEPS_MIN)
    res = res.but(_bound=DROP, _more=DROP, _top=DROP, _nsteps=DROP)
    ratio = (_pairs(setup, res["series_ratio"]).copy() if res.get("series_ratio") is not None
             else np.full((n, B), np.nan))
    at = np.full((n, B), order)                      # the order each pair's fields are of
    why = np.zeros((n, B), int)
    failures: list[SolverWarning] = []
    K, nfev, t_exact, run = order, int(res.nfev), None, [order]
    active = ~accepted & _finite(setup, res)
    if res.status == Status.FAILED:
        active[:] = False                            # a sweep that failed is not raised
    while active.any():
        if K >= top:
            why[active] = AT_TOP
            break
        need = next_order(K, more, top_ratio)
        why[active & ~np.isfinite(need)] = DIVERGES
        why[active & np.isfinite(need) & (need > top)] = BEYOND
        active &= why == 0
        if probe is not None and active.any():
            if t_exact is None:              # the deepest pair still raised
                live = np.flatnonzero(active.any(axis=1))
                i = int(live[np.argmin(setup.depths[live])])
                ok, t_exact = _timed("probe", probe, i, int(np.argmax(active[i])))
                t_exact = t_exact if ok else np.inf    # no exact solve to hand over to
            if np.isfinite(t_exact):
                worth = _worth(need[active], K, costs, top, t_exact)
                why[active & (need > worth)] = CHEAPER
                active &= why == 0
        if not active.any():
            break
        prev, K = K, max(K + 1, int(need[active].min()))   # the lowest order predicted
        rows = np.flatnonzero(active.any(axis=1))
        try:
            sub, cost = _timed("sweep", sweep, _subset(setup, rows), K, budget,
                               held=result_bytes(res))
        except MemoryError as exc:      # the larger jet does not fit `memory_budget`
            why[active] = FAILED
            more[active] = K - at[active]            # for the message: the order tried
            failures.append(SolverWarning(
                "higher_order_failed",
                f"The sweep of order {K} was not run: {exc}. The {int(active.sum())} "
                f"(depth, input) pair(s) it would have raised keep the fields of order "
                f"{prev}.", float(setup.depths[rows].max())))
            K = prev
            break
        costs[K] = cost
        run.append(K)
        nfev += int(sub.nfev)
        got = _finite(setup, sub) & active[rows]
        lost = active[rows] & ~got
        if lost.any():
            ii, bb = np.nonzero(lost)
            why[rows[ii], bb] = FAILED
            more[rows[ii], bb] = K - at[rows[ii], bb]    # for the message: the order tried
            active[rows[ii], bb] = False
            failures.append(SolverWarning(
                "higher_order_failed",
                f"The sweep of order {K} failed ({sub.message.rstrip('.')}); the {ii.size} "
                f"(depth, input) pair(s) it did not reach keep the fields of order {prev}.",
                float(setup.depths[rows[ii]].max())))
        _merge(setup, res, sub, rows, got)
        ii, bb = np.nonzero(got)
        at[rows[ii], bb] = K
        for name, arr in (("_bound", bound), ("_more", more)):
            if name in sub:
                arr[rows[ii], bb] = _pairs(setup, sub[name])[ii, bb]
        # the ratio the next order's test takes: from this sweep's own look-ahead only
        top_ratio[rows[ii], bb] = (_pairs(setup, sub["_top"])[ii, bb] if "_top" in sub
                                   else np.nan)
        if sub.get("series_ratio") is not None:
            ratio[rows[ii], bb] = _pairs(setup, sub.series_ratio)[ii, bb]
        accepted[rows[ii], bb] |= _pairs(setup, sub.converged)[ii, bb]
        active &= ~accepted
    return _finish(setup, res, accepted, at, why, bound, ratio, more, top_ratio, top,
                   nfev, run, failures)


def next_order(K: int, more: np.ndarray, top_ratio: np.ndarray) -> np.ndarray:
    """The order each pair needs after the sweep of order ``K``: ``K`` plus the orders
    predicted (``more``, `invimbed._core.sweep.accuracy.orders_needed`, rounded up), and
    at least ``K + 2`` where order ``K + 1`` cannot converge the pair: its ratio test takes
    the differences ``(d_K, d_(K+1))`` that order ``K``'s look-ahead measured
    (``top_ratio``, `invimbed._core.sweep.accuracy.Verdict.top`), and where their ratio is
    above `RATIO_MAX` it refuses them (up to the integration error of the two sweeps)."""
    need = K + np.ceil(more)
    return np.where(top_ratio > RATIO_MAX, np.maximum(need, K + 2), need)


def _worth(need: np.ndarray, K: int, costs: dict, top: int, t_exact: float) -> int:
    """The order up to which raising pays (`raise_order`'s rule); ``K``: none."""
    g = COST_GROWTH
    below = [k for k in costs if k < K and costs[k] > 0]
    if below:                            # per order, from the last two orders run
        j = max(below)
        g = max(1.0, (costs[K] / costs[j]) ** (1.0 / (K - j)))
    best, gain, spent = K, 0.0, 0.0
    for k in range(K + 1, top + 1):
        spent += costs[K] * g ** (k - K)
        saved = t_exact * np.count_nonzero(need <= k) - spent
        if saved > gain:
            best, gain = k, saved
    return best


def _merge(setup: Any, res: Draft, sub: Draft, rows: np.ndarray,
           got: np.ndarray) -> None:
    """Copy the pairs ``got`` of the sweep ``sub`` (depths ``rows``) into ``res``."""
    ii, bb = np.nonzero(got)
    for k in FIELDS:
        _pairs(setup, res[k])[rows[ii], bb] = _pairs(setup, sub[k])[ii, bb]
    if res.get("error_estimate") is not None and sub.get("error_estimate") is not None:
        for k in res.error_estimate:
            _pairs(setup, res.error_estimate[k])[rows[ii], bb] = \
                _pairs(setup, sub.error_estimate[k])[ii, bb]


def _finish(setup: Any, res: Draft, accepted: np.ndarray, at: np.ndarray,
            why: np.ndarray, bound: np.ndarray, ratio: np.ndarray, more: np.ndarray,
            top_ratio: np.ndarray, top: int, nfev: int, orders_run: list,
            failures: list) -> Draft:
    """The merged result: converged, status, message and warnings of every pair."""
    shape = (lambda a: a) if setup.batched else (lambda a: a[:, 0])
    res = res.but(converged=shape(accepted), depth_order=shape(at), orders_run=orders_run,
                  nfev=nfev)
    if res.get("series_ratio") is not None:
        res = res.but(series_ratio=shape(ratio))
    finite = _finite(setup, res)
    res = res.but(order=int(at[finite].max()) if finite.any() else orders_run[-1])
    if len(orders_run) == 1 and not failures and (res.status == Status.FAILED or not why.any()):
        return res                      # one sweep, nothing stopped: its verdict stands
    keep = [w for w in res.warnings
            if w.code not in ("estimate_large", "series_not_converging")]
    if res.status == Status.FAILED:
        return res.but(warnings=list(res.warnings) + failures)
    bad = ~accepted
    if not bad.any():
        return res.but(success=True, status=Status.SUCCESS, warnings=keep + failures,
                       message="The sweep reached every requested depth.")
    i = int(np.argmax(np.where(bad.any(axis=1), setup.depths, -np.inf)))   # the shallowest
    b = int(np.argmax(bad[i]))
    code, text = _reason(why[i, b], at[i, b], bound[i, b], ratio[i, b], more[i, b],
                         top_ratio[i, b], top)
    p = float(setup.depths[i])
    message = (f"Not converged from depth p = {p:.6g} on ({int(bad.sum())} of {bad.size} "
               f"(depth, input) pairs): {text}. The fields there are approximate; request "
               f"shallower depths, raise `max_order` where the prediction allows, or pass "
               f"fallback='adjoint' for exact values there.")
    return res.but(success=False, status=Status.NOT_CONVERGED, message=message,
                   warnings=keep + failures + [SolverWarning(code, message, p)])


def _reason(why: int, K: int, bound: float, ratio: float, more: float, top_ratio: float,
            top: int) -> tuple[str, str]:
    """The warning code and the explanation of a pair stopped for the reason ``why``."""
    at = f"at order {K} the error bound is {bound:.2g} times the tolerance"
    if why == DIVERGES:
        return "series_not_converging", (
            f"the jet series does not converge there: at order {K} its successive "
            f"differences grow from order to order (ratio {ratio:.2g}), so no order "
            f"reaches the tolerance")
    if why == BEYOND:
        need = int(next_order(K, more, top_ratio))
        if need > K + np.ceil(more):            # order K + 1 skipped: certain to be refused
            return "estimate_large", (
                f"{at}; order {K + 1} cannot reach it (its ratio test takes the ratio "
                f"d_{K + 1} / d_{K} = {top_ratio:.3g} that order {K} already measured, and "
                f"at most {RATIO_MAX:g} is needed), and order {need} is beyond "
                f"max_order={top}")
        return "estimate_large", (
            f"{at}, and the series' ratio {ratio:.2g} predicts order {need} to "
            f"reach it, beyond max_order={top}")
    if why == CHEAPER:
        return "estimate_large", (
            f"{at}; the exact solve is predicted to cost less than the orders still needed")
    if why == FAILED:
        return "estimate_large", (
            f"the sweep of order {K + int(more)} failed there (see `warnings`), and {at}")
    if ratio > RATIO_MAX:
        return "series_not_converging", (
            f"the jet series does not converge there: at order {K} its successive "
            f"differences shrink by a factor {ratio:.2g} per order (at most {RATIO_MAX:g} "
            f"is needed), so its error estimate cannot be trusted")
    return "estimate_large", f"{at}, the highest order run"
