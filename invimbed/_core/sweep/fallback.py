"""The exact fallback of the sweep: depths whose jet did not converge, solved again by the
classical adjoint method (docs/accuracy.md, `fallback="adjoint"`).

`solve_imbedding(..., fallback="adjoint")` calls `fallback_adjoint` with the sweep's
result: each (depth, input) pair marked not converged by the accuracy verdict is
recomputed by the exact ensemble `solve_adjoint` and marked in ``exact_fallback``, so that
``success=True`` keeps meaning "within the tolerance".

A function of the problem that returns less than float64 (`invimbed._core.inputs.probe`) limits
the exact solve as it limits the sweep: it runs at an ``rtol`` no finer than that
function's precision (finer, an adaptive step chases the rounding noise into its step
budget), and `solve_imbedding` gives the result `Status.IMPRECISE` when the user's ``rtol``
asks for more (`invimbed._core.sweep.assembly.mark_imprecise`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.adjoint import solve_adjoint
from ..setup.settings import Accuracy
from ..integrators import SCIPY_METHODS
from ..results.results import Draft, SolverWarning
from ..results.status import Status


def exact_options(method: str, accuracy: Accuracy, max_steps: int | None = None, *,
                  finest: float = 0.0) -> dict:
    """The keyword arguments of the fallback's `solve_adjoint`: RK45 (RK23 if the sweep
    used it); ``rtol = 0.01 tol_rtol`` in ``[1e-12, 1e-6]`` and ``atol = 1e-5 tol_atol`` in
    ``[1e-14, 1e-9]`` (without ``tol``: the sweep's own ``accuracy.rtol``, ``atol``,
    capped at 1e-6 and 1e-9), but ``rtol`` not below ``finest`` (`precision_limit` of the
    problem's functions); a ``max_steps`` the user gave an adaptive sweep."""
    if accuracy.checked:
        a_rtol, a_atol = accuracy.derived((0.01,), (1e-5,), (1e-12, 1e-6), (1e-14, 1e-9))
    else:
        a_rtol, a_atol = min(accuracy.rtol, 1e-6), min(accuracy.atol, 1e-9)
    out = {"method": method if method in ("RK45", "RK23") else "RK45",
           "rtol": max(a_rtol, float(finest)),
           "atol": a_atol}
    if max_steps is not None and method in SCIPY_METHODS:
        out["max_steps"] = max_steps
    return out


def exact_probe(setup: Any, options: dict) -> Any:
    """``probe(i, b)``: solve the (depth ``i``, input ``b``) pair alone with the fallback's
    `solve_adjoint` (``options`` from `exact_options`) and say whether it succeeded: what
    the order loop times to price the exact solve of a pair (docs/accuracy.md)."""
    def probe(i: int, b: int) -> bool:
        ref = solve_adjoint(setup.problem, setup.x[b], setup.depths[i:i + 1],
                            control=setup.control, **options)
        return bool(ref.success)
    return probe


def fallback_adjoint(setup: Any, res: Draft, options: dict) -> Draft:
    """Recompute the (depth, input) pairs that did not converge with the exact ensemble
    `solve_adjoint` (its keyword arguments ``options`` from `exact_options`: a
    ``max_steps`` the user gave an adaptive sweep is the budget of each of its rows too),
    and mark them in ``exact_fallback``."""
    conv = np.asarray(res.converged, bool)
    conv2 = conv if setup.batched else conv[:, None]
    bad = ~conv2
    exact = np.zeros_like(conv2)
    if not bad.any():
        return res.but(exact_fallback=exact if setup.batched else exact[:, 0])
    a_rtol, a_atol = options["rtol"], options["atol"]
    inputs = np.flatnonzero(bad.any(axis=0))
    depths_bad = np.flatnonzero(bad.any(axis=1))
    ref = solve_adjoint(setup.problem, setup.x[inputs], setup.depths[depths_bad],
                        control=setup.control, **options)
    fields = ("z", "value", "adjoint", "param_grad", "depth_grad")
    for ii, di in enumerate(depths_bad):
        for jj, b in enumerate(inputs):
            if not bad[di, b]:
                continue
            for k in fields:
                target = res[k] if setup.batched else res[k][:, None]
                target[di, b] = ref[k][ii, jj]
                if not setup.batched:
                    res[k][di] = target[di, 0]
            finite = all(np.all(np.isfinite(ref[k][ii, jj])) for k in fields)
            exact[di, b] = finite
            if res.get("error_estimate") is not None:
                for k in res.error_estimate:
                    e = res.error_estimate[k] if setup.batched else res.error_estimate[k][:, None]
                    e[di, b] = 0.0 if finite else np.nan
                    if not setup.batched:
                        res.error_estimate[k][di] = e[di, 0]
    count = int(exact.sum())
    first = float(setup.depths[depths_bad].max())
    note = SolverWarning(
        "fallback_adjoint",
        f"{count} (depth, input) pair(s) whose jet did not converge, from depth p = "
        f"{first:.6g} on, were recomputed by the exact ensemble solve_adjoint (rtol={a_rtol:g}, "
        f"atol={a_atol:g}); see `exact_fallback`", first)
    notes = res.warnings + [note]
    res = res.but(nfev=int(res.nfev) + int(ref.nfev),
                  warnings=notes + [w for w in ref.get("warnings", []) if w not in notes],
                  exact_fallback=exact if setup.batched else exact[:, 0])
    if res.status in (Status.FAILED, Status.NOT_CONVERGED):
        if ref.success:
            failed = res.status == Status.FAILED
            if failed:    # the sweep's own failure, repaired, stays on record
                res = res.but(warnings=res.warnings + [
                    SolverWarning("sweep_failed", res.message, first)])
            where = "the sweep failed or its jet did not converge" if failed else \
                "its jet did not converge"
            head = ("Every requested depth was reached" if setup.unreachable else
                    "Every requested depth is within the tolerance")
            res = res.but(success=True, status=Status.SUCCESS,
                          message=f"{head}; {count} "
                                  f"(depth, input) pair(s) from depth p = {first:.6g} on, "
                                  f"where {where}, are exact values of solve_adjoint "
                                  f"(`exact_fallback`).")
        else:
            res = res.but(success=False, status=Status.FAILED,
                          message=f"The fallback to solve_adjoint failed: {ref.message}")
    return res
