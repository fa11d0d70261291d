"""`optimal_depth`: the depth that minimises the loss (docs/optimization.md, "2. The optimal depth").

``J(p, x)`` and the exact depth gradient ``dJ/dp = -(Lam . f + R)`` (docs/theory.md,
"The depth gradient") on a grid of depths come from one ensemble solve of
`solve_adjoint`; every bracketed minimum is then refined, all brackets at once, with one
ensemble solve per iteration. With ``via="sweep"`` they come instead from one imbedding
sweep's dense output, which the grid scan and the refinement read at any depth without
another solve. This is the paper's remark on the optimal depth of a network (after
eq. (34)), with the true depth gradient in place of the paper's recursion.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.optimize import OptimizeResult

from .._core.reference.adjoint import solve_adjoint
from .._core.sweep.imbedding import solve_imbedding
from .._core.problem.bolza import BolzaProblem
from .._core.results.status import Status
from .._core.inputs.validation import as_float_array, as_int, as_real, check_choice, describe
from .options import SolverFailure, split_solve_kwargs


class DepthResult(OptimizeResult):
    """Result of `optimal_depth`: a dict with attribute access and a `plot` method.

    Attributes
    ----------
    p : float
        The depth minimising ``J(p, x)`` over the range.
    value : float
        The exact ``J`` at ``p`` (the mean over a batch of inputs), from `solve_adjoint`.
    depth_grad : float
        The exact ``dJ/dp`` at ``p`` (about 0 at an interior minimum).
    interior : bool
        Whether ``p`` is a stationary point inside the range (rather than an end).
    candidates, candidate_values : ndarray
        Every local minimiser found (refined interior roots of ``dJ/dp`` and the ends
        where ``J`` increases into the range), in increasing ``p``, and ``J`` there.
    grid, grid_value, grid_depth_grad : ndarray, shape (n,)
        The depth grid of the sweep and ``J``, ``dJ/dp`` on it.
    nfev : int
        Right-hand-side evaluations of all the solves; ``nsolve`` the number of solves.
    warnings : list of str
        Settings that were not used and the exact solver's own notes.
    success, message
    """

    def plot(self, ax: Any = None) -> Any:
        """Plot ``J`` and ``dJ/dp`` against ``p`` and mark the optimal depth.

        Parameters
        ----------
        ax : matplotlib Axes or a pair of them, optional
            ``None``: a new figure with two panels (``J`` above, ``dJ/dp`` below). One
            Axes: ``J`` on it and ``dJ/dp`` on a twin y axis. A pair: one each.

        Returns
        -------
        tuple of Axes
            ``(ax_value, ax_depth_grad)``.
        """
        import matplotlib.pyplot as plt  # lazy: matplotlib is optional

        if ax is None:
            _, (ax_v, ax_g) = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
        elif isinstance(ax, (tuple, list, np.ndarray)):
            ax_v, ax_g = ax[0], ax[1]
        else:
            ax_v, ax_g = ax, ax.twinx()
        ax_v.plot(self.grid, self.grid_value, "-", color="C0", label="J(p, x)")
        ax_g.plot(self.grid, self.grid_depth_grad, "--", color="C1", label="dJ/dp")
        ax_g.axhline(0.0, color="0.6", lw=0.8)
        for a in (ax_v, ax_g):
            a.axvline(self.p, color="C3", lw=0.8, ls=":")
        others = np.asarray(self.candidates) != self.p
        if np.any(others):
            ax_v.plot(np.asarray(self.candidates)[others],
                      np.asarray(self.candidate_values)[others], "o", mfc="none", color="C3",
                      label="other local minima")
        ax_v.plot([self.p], [self.value], "o", color="C3",
                  label=f"optimal depth p = {self.p:.6g}")
        ax_v.set_ylabel("J(p, x)")
        ax_g.set_ylabel("dJ/dp")
        ax_g.set_xlabel("depth p")
        ax_v.legend(loc="best")
        return ax_v, ax_g


def optimal_depth(problem: BolzaProblem, x: Any, p_range: Any, *, control: Any = None,
                  n: int = 101, xtol: float = 1e-12, via: str = "adjoint",
                  **solve_kwargs: Any) -> DepthResult:
    r"""Locate the depth ``p`` in ``p_range`` that minimises ``J(p, x)``.

    ``J`` and the exact depth gradient ``dJ/dp = -(Lam . Phi + R)`` (docs/theory.md, "The
    depth gradient") on a grid of ``n`` depths bracket every local minimum; the brackets
    are refined together on ``dJ/dp`` and the candidate with the smallest ``J`` is
    returned. Details: docs/optimization.md, "optimal_depth in detail".

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
        The input; for a batch ``J`` is the mean over the inputs.
    p_range : (p_low, p_high)
        The depths searched, ``p_low < p_high <= q``.
    control : Constant, PiecewiseConstant, Control or None
        The (fixed) open-loop control; it must cover ``[p_low, q]``.
    n : int, default 101
        Grid size. Minima narrower than the grid spacing can be missed.
    xtol : float, default 1e-12
        Absolute tolerance of the root refinement (scaled by ``max(1, |p|)``).
    via : {"adjoint", "sweep"}
        ``"adjoint"`` (default): exact values from `solve_adjoint`; ``"sweep"``: one
        `solve_imbedding` sweep with dense output, within its error estimate.
    **solve_kwargs
        Passed to `solve_adjoint` (``rtol``, ``atol``, ``method``, ...), or to
        `solve_imbedding` with ``via="sweep"``; an unknown keyword raises ``TypeError``.

    Returns
    -------
    DepthResult
        ``p``, ``value``, ``depth_grad``, ``interior``, ``candidates``,
        ``candidate_values``, ``grid``, ``grid_value``, ``grid_depth_grad``, ``nfev``,
        ``nsolve``, ``success``, ``message``, ``warnings``, and ``plot(ax=None)``; with
        ``via="sweep"`` also ``value_error``.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> problem = invimbed.BolzaProblem(lambda t, z, th: 0.7 * z,
    ...                                 terminal_loss=lambda z: 0.5 * (z[0] - 2.0) ** 2)
    >>> res = invimbed.optimal_depth(problem, [1.0], (-2.0, 0.0))
    >>> round(res.p, 5), round(float(-np.log(2.0) / 0.7), 5)   # Z(p) = exp(-0.7 p) = 2
    (-0.99021, -0.99021)
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    rng = as_float_array(p_range, "p_range")
    if rng.shape != (2,) or not np.all(np.isfinite(rng)):
        raise ValueError(f"`p_range` must be a pair (p_low, p_high) of finite depths, but got "
                         f"{describe(p_range)}")
    lo, hi = float(rng[0]), float(rng[1])
    if not lo < hi:
        raise ValueError(f"`p_range` must have p_low < p_high, but got ({lo}, {hi})")
    if hi > problem.q:
        raise ValueError(f"`p_range` must lie below q = {problem.q}, but p_high = {hi}")
    n = as_int(n, "n", minimum=2)
    xtol = as_real(xtol, "xtol", positive=True)
    check_choice(via, "via", ("adjoint", "sweep"))
    exact_kw, sweep_kw, sweep_only = split_solve_kwargs(solve_kwargs, "optimal_depth", "method")
    for key in ("rtol", "atol"):
        if key in solve_kwargs:
            as_real(solve_kwargs[key], key, positive=True)
    warnings: list[str] = []
    unused = (sweep_only if via == "adjoint" else
              [f"{k}={v!r}" for k, v in exact_kw.items() if k not in sweep_kw])
    if unused:
        whose, how = (("the imbedding sweep", "exactly by solve_adjoint") if via == "adjoint"
                      else ("solve_adjoint", "by one imbedding sweep"))
        warnings.append(f"{', '.join(unused)} (settings of {whose}) "
                        f"{'was' if len(unused) == 1 else 'were'} not used: J and dJ/dp "
                        f"are computed {how}")
    grid = np.linspace(lo, hi, int(n))
    counts = {"nfev": 0, "nsolve": 0}
    dense: list[Any] = []       # via="sweep": the sweep's result, whose sol(p) is read

    def at(depths: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """Mean ``J`` and ``dJ/dp`` at increasing ``depths``: one ensemble solve, or the
        sweep's dense output (the sweep itself at the grid)."""
        if dense:
            res = dense[0].sol(depths)
        else:
            res = (solve_adjoint(problem, x, depths, control=control, **exact_kw)
                   if via == "adjoint" else
                   solve_imbedding(problem, x, depths, control=control, dense_output=True,
                                   **sweep_kw))
            counts["nfev"] += int(res.nfev)
            counts["nsolve"] += 1
            if via == "sweep" and res.get("sol") is not None:
                dense.append(res)
        for note in res.get("warnings", []):
            if note not in warnings:
                warnings.append(note)
        return _batch_mean(res.value), _batch_mean(res.depth_grad), res

    values, grads, sweep = at(grid)

    def done(**fields: Any) -> DepthResult:
        message = fields.pop("message")
        if warnings:
            message += f" Note: {'; '.join(map(str, warnings))}."
        return DepthResult(grid=grid, grid_value=values, grid_depth_grad=grads,
                           message=message, warnings=warnings, **fields, **counts)

    if not sweep.success:
        return done(p=np.nan, value=np.nan, depth_grad=np.nan, interior=False,
                    candidates=np.empty(0), candidate_values=np.empty(0), success=False,
                    status=Status.FAILED,
                    message=f"The {'exact solve' if via == 'adjoint' else 'sweep'} "
                            f"over the grid failed: {sweep.message}")

    def refine(depths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vals, grs, res = at(depths)
        if not res.success:
            raise SolverFailure(res.message)
        return vals, grs

    cands: list[tuple[float, float, float, bool]] = []   # (p, J, dJ/dp, interior)
    if grads[0] > 0:
        cands.append((lo, values[0], grads[0], False))
    if grads[-1] < 0:
        cands.append((hi, values[-1], grads[-1], False))
    brackets = []
    for j in range(n - 1):
        g0, g1 = grads[j], grads[j + 1]
        if g0 == 0.0 and j > 0 and grads[j - 1] < 0 <= g1:
            cands.append((grid[j], values[j], 0.0, True))
        elif g0 < 0 < g1:
            brackets.append(j)
    message = "Optimal depth found."
    if brackets:
        k = np.array(brackets)
        try:
            roots = _refine_minima(refine, grid[k], grid[k + 1], grads[k], grads[k + 1],
                                   values[k], values[k + 1], xtol)
            cands.extend((float(r), float(v), float(g), True) for r, v, g in zip(*roots))
        except SolverFailure as exc:
            message = f"A refining solve failed ({exc}); the grid minimum is returned."
            cands = []
    if not cands:   # flat J, or a failure: fall back to the grid minimum
        k = int(np.argmin(values))
        cands = [(grid[k], values[k], grads[k], 0 < k < n - 1)]
        if message == "Optimal depth found.":
            message = "dJ/dp has no sign change and no end is a minimum; grid minimum returned."
    cands.sort(key=lambda c: c[0])
    best = min(cands, key=lambda c: c[1])
    where = "inside the range" if best[3] else "at an end of the range (J monotone there)"
    if message == "Optimal depth found.":
        message = f"Optimal depth found {where}."
    extra = {}
    if dense:       # the sweep's estimate of J at the depth found (mean over a batch)
        est = dense[0].sol(float(best[0])).get("error_estimate")
        extra["value_error"] = float(np.mean(est["value"])) if est is not None else 0.0
    return done(**extra, p=float(best[0]), value=float(best[1]), depth_grad=float(best[2]),
                interior=bool(best[3]), candidates=np.array([c[0] for c in cands]),
                candidate_values=np.array([c[1] for c in cands]), success=True,
                status=Status.SUCCESS, message=message)


def _refine_minima(evaluate: Callable, a: np.ndarray, b: np.ndarray, ga: np.ndarray,
                   gb: np.ndarray, va: np.ndarray, vb: np.ndarray, xtol: float,
                   max_iter: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Roots of ``dJ/dp`` in disjoint increasing brackets ``[a_k, b_k]`` with
    ``ga_k < 0 < gb_k``, all refined together.

    Regula falsi with the Illinois modification (the function value kept at an end that
    survives twice in a row is halved), and a bisection step whenever a bracket has not
    halved in two iterations. ``evaluate(depths)`` returns ``(J, dJ/dp)`` at increasing
    depths (one ensemble solve). Returns ``(p, J, dJ/dp)`` of each bracket's end with the
    smaller ``|dJ/dp|`` once the bracket is narrower than ``xtol * max(1, |p|)``.
    """
    a, b, ga, gb, va, vb = (np.array(v, dtype=float) for v in (a, b, ga, gb, va, vb))
    fa, fb = ga.copy(), gb.copy()                # Illinois-scaled values
    side = np.zeros(a.size, dtype=int)           # -1: a replaced last, +1: b replaced last
    bisect = np.zeros(a.size, dtype=bool)
    w1 = w2 = np.full(a.size, np.inf)           # widths one and two iterations ago
    for _ in range(max_iter):
        mid = 0.5 * (a + b)
        active = (b - a > xtol * np.maximum(1.0, np.abs(mid))) & (a < mid) & (mid < b)
        if not np.any(active):
            break
        idx = np.flatnonzero(active)
        with np.errstate(divide="ignore", invalid="ignore"):
            trial = b[idx] - fb[idx] * (b[idx] - a[idx]) / (fb[idx] - fa[idx])
        ok = ~bisect[idx] & (trial > a[idx]) & (trial < b[idx])
        trial = np.where(ok, trial, mid[idx])
        v, g = evaluate(trial)
        for i, t, vi, gi in zip(idx, trial, v, g):
            if gi == 0.0:
                a[i] = b[i] = t
                ga[i] = gb[i] = 0.0
                va[i] = vb[i] = vi
                continue
            if gi < 0:
                a[i], ga[i], fa[i], va[i] = t, gi, gi, vi
                if side[i] == -1:
                    fb[i] *= 0.5
                side[i] = -1
            else:
                b[i], gb[i], fb[i], vb[i] = t, gi, gi, vi
                if side[i] == 1:
                    fa[i] *= 0.5
                side[i] = 1
        width = b - a
        bisect = width > 0.5 * w2
        w2, w1 = w1, width
    take_a = np.abs(ga) <= np.abs(gb)
    return (np.where(take_a, a, b), np.where(take_a, va, vb), np.where(take_a, ga, gb))


def _batch_mean(a: np.ndarray) -> np.ndarray:
    """Mean over the batch axis of an (n,) or (n, B) array."""
    a = np.asarray(a, dtype=float)
    return a if a.ndim == 1 else a.mean(axis=1)
