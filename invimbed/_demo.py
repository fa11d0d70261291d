"""The projectile of the paper's Figure 1, solved end to end (``python -m invimbed demo``).

A ball thrown upwards from height ``h0`` with speed ``v0`` at depth ``t = p`` flies
under gravity until ``t = q``:

    z = [h, v],   dz/dt = f(t, z) = [v, -g],   z(p) = x = [h0, v0],
    J(p, x) = T(z(q)) = (h(q) - h_target)^2 / 2.

The imbedding sweep (`invimbed.solve_imbedding`) gives the landing state
``Z(p, x) = z(q; p, x)``, the loss ``V``, its gradient ``Lam = grad_x V`` and the depth
gradient ``dJ/dp`` of *every* depth ``p`` in one integration in ``p``; the classical
reference (`invimbed.solve_adjoint`) solves forward and backward for every depth, as
one ensemble of rows (the default) and as a loop over depths (``strategy="per_depth"``).
Both are compared with the closed form (``s = q - p``)

    h(q) = h0 + v0 s - g s^2 / 2,   v(q) = v0 - g s,   V = (h(q) - h_target)^2 / 2,
    Lam = (h(q) - h_target) [1, s],  dJ/dp = -(h(q) - h_target) (v0 - g s).

The dynamics are affine in ``z`` and the loss quadratic, so the jet of order 1 is exact
(docs: theory): the four must agree to integrator tolerance. The sweep keeps its dense
output (``dense_output=True``): its ``sol(p)`` gives every field at `CONTINUUM_DEPTHS`
random depths of ``[p_min, q]``, compared with the closed form too, and the plot draws
the sweep as a continuum of depths, whatever the number of requested ones.

This module computes and formats; the command line lives in `invimbed.__main__`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._core.reference.adjoint import solve_adjoint
from ._core.sweep.imbedding import solve_imbedding
from ._core.problem.bolza import BolzaProblem
from ._core.results.results import ImbeddingResult

GRAVITY = 9.81
"""``g`` in m/s^2, as in the paper's Appendix F.2."""

COMPARED = ("z", "value", "adjoint", "depth_grad")
"""Fields compared between the imbedding, the adjoint reference and the closed form."""

CONTINUUM_DEPTHS = 10_000
"""Random depths at which the demo reads the sweep's dense output ``sol(p)``."""


def projectile_problem(q: float = 1.0, h_target: float = 5.0,
                       g: float = GRAVITY) -> BolzaProblem:
    """The projectile as a `invimbed.BolzaProblem`, with exact derivatives.

    Parameters
    ----------
    q : float, default 1.0
        Landing time (the output end of the depth interval).
    h_target : float, default 5.0
        Target height of the terminal loss ``T(z) = (h - h_target)^2 / 2``.
    g : float, default 9.81
        Gravitational acceleration.

    Returns
    -------
    BolzaProblem
        ``f(t, z, theta) = [v, -g]`` and ``T``, with ``f_z``, ``f_zz``, ``f_zzz``,
        ``T_z``, ``T_zz``, ``T_zzz`` given in closed form (so no finite differences are
        taken: finite differences of order three would add rounding noise of about
        ``1e-6`` to the jet's error estimate).
    """
    zeros3 = np.zeros((2, 2, 2))
    zeros4 = np.zeros((2, 2, 2, 2))
    derivatives: dict[str, Callable[..., np.ndarray]] = {
        "f_z": lambda t, z, th: np.array([[0.0, 1.0], [0.0, 0.0]]),
        "f_zz": lambda t, z, th: zeros3,
        "f_zzz": lambda t, z, th: zeros4,
        "T_z": lambda z: np.array([z[0] - h_target, 0.0]),
        "T_zz": lambda z: np.array([[1.0, 0.0], [0.0, 0.0]]),
        "T_zzz": lambda z: zeros3,
    }
    return BolzaProblem(
        lambda t, z, th: np.array([z[1], -g]),
        terminal_loss=lambda z: 0.5 * (z[0] - h_target) ** 2,
        q=q,
        derivatives=derivatives,
    )


def closed_form(depths: np.ndarray, x: np.ndarray, q: float, h_target: float,
                g: float = GRAVITY) -> dict[str, np.ndarray]:
    """The exact fields of the projectile at each depth.

    Parameters
    ----------
    depths : ndarray, shape (n,)
    x : ndarray, shape (2,)
        ``[h0, v0]``.
    q, h_target, g : float

    Returns
    -------
    dict
        ``z`` (n, 2), ``value`` (n,), ``adjoint`` (n, 2), ``depth_grad`` (n,).
    """
    h0, v0 = float(x[0]), float(x[1])
    s = q - np.asarray(depths, dtype=float)
    h = h0 + v0 * s - 0.5 * g * s ** 2
    v = v0 - g * s
    miss = h - h_target
    return {
        "z": np.stack([h, v], axis=-1),
        "value": 0.5 * miss ** 2,
        "adjoint": np.stack([miss, miss * s], axis=-1),
        "depth_grad": -miss * v,
    }


def _max_abs_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return {k: float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in COMPARED}


def _max_rel_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """``max |a - b| / max(1, |b|)`` over every compared field and entry."""
    worst = 0.0
    for k in COMPARED:
        ak, bk = np.asarray(a[k]), np.asarray(b[k])
        worst = max(worst, float(np.max(np.abs(ak - bk) / np.maximum(1.0, np.abs(bk)))))
    return worst


@dataclass
class ProjectileDemo:
    """Everything the demo computed; `report` formats it.

    Attributes
    ----------
    depths : ndarray, shape (n,)
        The depths, from ``q`` down to ``p_min``.
    x : ndarray, shape (2,)
        ``[h0, v0]``.
    q, h_target : float
    closure : str
        The imbedding closure used.
    rtol, atol : float
        Tolerances of both solvers.
    imbedding, adjoint : ImbeddingResult
        The sweep and the exact ensemble (`solve_adjoint`'s default strategy).
    exact : dict
        `closed_form` at ``depths``.
    loop : ImbeddingResult or None
        `solve_adjoint` with ``strategy="per_depth"``.
    seconds : dict
        Wall time of each solve (``"imbedding"``, ``"ensemble"``, ``"per_depth"``).
    """

    depths: np.ndarray
    x: np.ndarray
    q: float
    h_target: float
    closure: str
    rtol: float
    atol: float
    imbedding: ImbeddingResult
    adjoint: ImbeddingResult
    exact: dict[str, np.ndarray]
    loop: ImbeddingResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    continuum: ImbeddingResult | None = None

    @property
    def success(self) -> bool:
        """Every solver succeeded."""
        return bool(self.imbedding.success and self.adjoint.success
                    and (self.loop is None or self.loop.success))

    def max_diffs(self) -> dict[str, dict[str, float]]:
        """Largest absolute differences per field: imbedding vs adjoint, vs closed form,
        and adjoint vs closed form."""
        out = {
            "imbedding - adjoint": _max_abs_diff(self.imbedding, self.adjoint),
            "imbedding - closed form": _max_abs_diff(self.imbedding, self.exact),
            "adjoint - closed form": _max_abs_diff(self.adjoint, self.exact),
        }
        if self.loop is not None:
            out["per-depth - closed form"] = _max_abs_diff(self.loop, self.exact)
        if self.continuum is not None:
            out["sol(p) - closed form"] = _max_abs_diff(self.continuum, self._continuum_exact())
        return out

    def _continuum_exact(self) -> dict[str, np.ndarray]:
        return closed_form(self.continuum.depths, self.x, self.q, self.h_target)

    def worst_relative_diff(self) -> float:
        """``max |a - b| / max(1, |b|)`` over all fields and all three comparisons."""
        worst = max(_max_rel_diff(self.imbedding, self.adjoint),
                    _max_rel_diff(self.imbedding, self.exact),
                    _max_rel_diff(self.adjoint, self.exact))
        if self.loop is not None:
            worst = max(worst, _max_rel_diff(self.loop, self.exact))
        if self.continuum is not None:
            worst = max(worst, _max_rel_diff(self.continuum, self._continuum_exact()))
        return worst

    def report(self) -> str:
        """The table and summary printed by ``python -m invimbed demo``.

        Every data row of the table holds exactly eight numbers separated by
        whitespace and ``|``: ``p``, imbedding ``h(q)`` and ``V``, adjoint ``h(q)`` and
        ``V``, closed-form ``h(q)``, ``|diff h|`` and ``|diff V|`` (imbedding minus
        adjoint), so that it can be parsed.
        """
        imb, adj, ex = self.imbedding, self.adjoint, self.exact
        n = self.depths.size
        h0, v0 = self.x
        lines = [
            "invimbed demo: the projectile of Corbett & Kangin (ICLR 2022), Figure 1",
            f"  z = [h, v], dz/dt = [v, -g], g = {GRAVITY}, q = {self.q:g}, "
            f"input x = [h0, v0] = [{h0:g}, {v0:g}]",
            f"  terminal loss T(z) = (h - {self.h_target:g})^2 / 2; closed form "
            f"h(q) = h0 + v0 s - g s^2/2 with s = q - p",
            f"  {n} depths p from {self.depths[0]:g} down to {self.depths[-1]:g}; closure "
            f"{self.closure!r}{' (order 1)' if self.closure == 'jet' else ''}, RK45, "
            f"rtol = {self.rtol:g}, atol = {self.atol:g}",
            "",
            f"{'':>7} | {'imbedding (one sweep)':^25} | {'adjoint (ensemble)':^25} | "
            f"{'closed form':^12} | {'imbedding - adjoint':^19}",
            f"{'p':>7} | {'h(q)':>12} {'V':>12} | {'h(q)':>12} {'V':>12} | {'h(q)':>12} | "
            f"{'|diff h|':>9} {'|diff V|':>9}",
            "-" * 7 + "-+-" + "-" * 25 + "-+-" + "-" * 25 + "-+-" + "-" * 12 + "-+-" + "-" * 19,
        ]
        for i, p in enumerate(self.depths):
            dh = abs(imb.z[i, 0] - adj.z[i, 0])
            dv = abs(imb.value[i] - adj.value[i])
            lines.append(
                f"{p:7.3f} | {imb.z[i, 0]:12.8f} {imb.value[i]:12.8f} | "
                f"{adj.z[i, 0]:12.8f} {adj.value[i]:12.8f} | {ex['z'][i, 0]:12.8f} | "
                f"{dh:9.2e} {dv:9.2e}"
            )
        sec = self.seconds

        def cost(name: str, res: ImbeddingResult) -> str:
            t = f", {1e3 * sec[name]:7.1f} ms" if name in sec else ""
            return f"nfev = {res.nfev:<6d}{t}"

        lines += [
            "",
            "work (vectorised right-hand-side calls, wall time of this run):",
            f"  imbedding, one sweep in p for all {n} depths          : "
            f"{cost('imbedding', imb)}",
            f"  adjoint ensemble, all depths as rows of one solve     : "
            f"{cost('ensemble', adj)}",
        ]
        if self.loop is not None:
            lines.append(f"  adjoint per depth, a forward and backward solve each : "
                         f"{cost('per_depth', self.loop)}")
        if self.continuum is not None:
            t = f", {1e3 * sec['continuum']:7.1f} ms" if "continuum" in sec else ""
            lines.append(f"  the sweep's dense output sol(p), {self.continuum.depths.size} "
                         f"random depths: no step taken{t}")
        lines += [
            "  (all exact here: the dynamics are affine and the loss quadratic; on nonlinear",
            "   problems the sweep is an approximation and the ensemble the exact tool)",
            "",
            "largest differences over all depths (h and v, V, grad_x V, dJ/dp):",
        ]
        for name, d in self.max_diffs().items():
            lines.append(f"  {name:<24}: " + "  ".join(f"{k} {v:.2e}" for k, v in d.items()))
        if imb.get("error_estimate") is not None:
            est = imb.error_estimate
            lines.append(
                "  jet error estimate (order 1 vs 2): "
                + "  ".join(f"{k} {float(np.max(est[k])):.2e}" for k in ("z", "value", "adjoint"))
                + "  (affine dynamics: order 1 is exact)"
            )
        return "\n".join(lines)


def run_projectile(n_depths: int = 21, *, p_min: float = -1.0, q: float = 1.0,
                   v0: float = 10.0, h0: float = 0.0, h_target: float = 5.0,
                   closure: str = "jet", rtol: float = 1e-8,
                   atol: float = 1e-10) -> ProjectileDemo:
    """Solve the projectile at ``n_depths`` depths by imbedding and by the adjoint method.

    Parameters
    ----------
    n_depths : int, default 21
        Number of depths, evenly spaced from ``q`` down to ``p_min`` (both included).
    p_min : float, default -1.0
        The deepest depth; must be below ``q``.
    q : float, default 1.0
    v0, h0 : float
        The input ``x = [h0, v0]``.
    h_target : float, default 5.0
        Target height of the terminal loss (the apex of the throw with ``v0 = 10`` is
        at about 5.1 m).
    closure : {"jet", "stencil", "crop"}
        Closure of `invimbed.solve_imbedding`; all three are exact here.
    rtol, atol : float
        Tolerances of both solvers.

    Returns
    -------
    ProjectileDemo

    Raises
    ------
    ValueError
        If ``n_depths < 2`` or ``p_min >= q`` (and whatever the solvers raise for
        invalid arguments).
    """
    if int(n_depths) != n_depths or n_depths < 2:
        raise ValueError(f"`n_depths` must be an integer >= 2, but got {n_depths!r}")
    if not p_min < q:
        raise ValueError(f"`p_min` must be below q = {q}, but got {p_min!r}")
    problem = projectile_problem(q=q, h_target=h_target)
    x = np.array([h0, v0], dtype=float)
    depths = np.linspace(q, p_min, int(n_depths))
    seconds = {}

    def timed(name: str, solver: Callable, **kw: Any) -> ImbeddingResult:
        start = time.perf_counter()
        res = solver(problem, x, depths, rtol=rtol, atol=atol, **kw)
        seconds[name] = time.perf_counter() - start
        return res

    imb = timed("imbedding", solve_imbedding, closure=closure, dense_output=True)
    start = time.perf_counter()
    continuum = imb.sol(np.random.default_rng(0).uniform(p_min, q, CONTINUUM_DEPTHS))
    seconds["continuum"] = time.perf_counter() - start
    adj = timed("ensemble", solve_adjoint)
    loop = timed("per_depth", solve_adjoint, strategy="per_depth")
    return ProjectileDemo(depths=depths, x=x, q=q, h_target=h_target, closure=closure,
                          rtol=rtol, atol=atol, imbedding=imb, adjoint=adj,
                          exact=closed_form(depths, x, q, h_target), loop=loop,
                          seconds=seconds, continuum=continuum)


def plot_projectile(demo: ProjectileDemo, path: str) -> None:
    """Plot ``Z(p, x)`` (height and velocity at ``q``) against the depth ``p``.

    The imbedding sweep is drawn as a continuum of depths (its dense output ``sol(p)``
    at 500 depths, however few were requested), the adjoint reference at the requested
    depths as markers and the closed form as a dashed line. Uses
    `matplotlib.figure.Figure` directly, so no GUI backend is needed.

    Parameters
    ----------
    demo : ProjectileDemo
    path : str
        Output file; the format follows its extension (``.png``, ``.pdf``, ``.svg``...).

    Raises
    ------
    ImportError
        If matplotlib is not installed (``pip install invimbed[plot]``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - exercised only without matplotlib
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install it with "
            "`pip install invimbed[plot]` (or `pip install matplotlib`)"
        ) from exc
    p = demo.depths
    fine = np.linspace(p.min(), p.max(), 500)
    sweep = demo.imbedding.sol(fine) if demo.imbedding.get("sol") is not None else None
    exact = closed_form(fine, demo.x, demo.q, demo.h_target)
    fig = Figure(figsize=(9.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    labels = (("height h(q) [m]", 0), ("velocity v(q) [m/s]", 1))
    for ax, (label, k) in zip(axes, labels):
        ax.plot(fine, exact["z"][:, k], "--", color="0.6", lw=2.5, label="closed form")
        if sweep is not None:
            ax.plot(fine, sweep.z[:, k], "-", color="C0",
                    label=f"imbedding ({demo.closure}, one sweep: sol(p))")
        else:
            ax.plot(p, demo.imbedding.z[:, k], "-", color="C0",
                    label=f"imbedding ({demo.closure}, one sweep)")
        ax.plot(p, demo.adjoint.z[:, k], "o", ms=4, mfc="none", color="C3",
                label="adjoint (per depth)")
        ax.set_xlabel(f"depth p (time of the throw; landing at q = {demo.q:g})")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].invert_xaxis()  # the sweep runs from q down: q on the left (axes are shared)
    axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"Projectile, x = [h0, v0] = [{demo.x[0]:g}, {demo.x[1]:g}]: "
                 f"Z(p, x) = z(q; p, x) for every depth p")
    fig.savefig(path, dpi=110)
