"""What the six `examples/ocp_*.py` scripts share: the command line, the check against a
published optimum, the three-panel figure, and the exact optimum of a sampled
linear-quadratic problem (Van Loan's integrals and a discrete Riccati recursion).

Not an example itself: each ``ocp_*.py`` script imports it from its own folder.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.linalg import expm


def intervals(argv: Sequence[str], default: int = 20) -> int:
    """The ``--intervals K`` of the command line (``default`` without it)."""
    return int(argv[argv.index("--intervals") + 1]) if "--intervals" in argv else default


def check(name: str, res, value: float, reference: float, tolerance: float,
          detail: str = "") -> float:
    """Print ``value`` against ``reference`` and assert the solve succeeded within
    ``tolerance`` (relative). Returns the relative distance."""
    err = abs(value - reference) / abs(reference)
    print(f"{name}, K = {len(res.controls)}: {detail}relative distance to the reference "
          f"{err:.1e}; {res.message}")
    assert res.success, res.message
    assert err <= tolerance, f"{name}: {err:.2e} > {tolerance:.0e}"
    return err


def defects_panel(ax, res, t0: float = 0.0) -> None:
    """The continuity defects of the shooting nodes (the equality constraints)."""
    ax.semilogy(res.times[1:] - t0, np.abs(res.defects).max(axis=1) + 1e-17, ".")
    ax.set(title="constraint: continuity defects |s_k+1 - F_k|", xlabel="t")


def bounds_panel(bounds: Sequence[float], title: str) -> Callable:
    """A panel drawing the control against its bounds (dashed)."""
    def panel(ax, res, t0: float = 0.0) -> None:
        for b in bounds:
            ax.axhline(b, color="r", ls="--", lw=1)
        ax.step(res.times[:-1] - t0, res.controls[:, 0], where="post")
        ax.set(title=title, xlabel="t" if t0 == 0.0 else "t - p")
    return panel


def plot(res, path: str, title: str, constraint: Callable = defects_panel, *,
         t0: float = 0.0, states: slice | int = slice(None),
         state_title: str = "state z1, z2 (dots: shooting nodes)",
         reference: Callable | None = None, xscale: str = "linear") -> None:
    """Three panels: the state (line: the returned trajectory; dots: the shooting nodes),
    the piecewise-constant control, and ``constraint(ax, res, t0)``; saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    t = res.trajectory.t - t0
    xlabel = "t" if t0 == 0.0 else "t - p"
    ax[0].plot(t, res.trajectory.z[:, states], lw=1.2)
    if reference is None:
        ax[0].plot(res.times - t0, res.states[:, states], ".", color="k", ms=3)
    else:
        ax[0].plot(t, reference(res.trajectory.t), "k--", lw=1)
    ax[0].set(title=state_title, xlabel=xlabel, xscale=xscale)
    ax[1].step(res.times[:-1] - t0, res.controls[:, 0], where="post")
    ax[1].set(title="control u (piecewise constant)", xlabel=xlabel, xscale=xscale)
    constraint(ax[2], res, t0)
    fig.suptitle(f"{title}, K = {len(res.controls)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def maybe_plot(argv: Sequence[str], draw: Callable[[str], None]) -> None:
    """Call ``draw(path)`` when the command line has ``--plot PATH``."""
    if "--plot" in argv:
        draw(argv[argv.index("--plot") + 1])


def sampled_lq_optimum(A, B, Q, R, PT, h: float, K: int, x0) -> float:
    """The exact optimum of ``J = int_0^(K h) (x'Qx + u'Ru) dt + x(Kh)' PT x(Kh)``,
    ``dx/dt = A x + B u``, over controls constant on K intervals of length h.

    Van Loan's matrix exponential gives each interval's sampled dynamics and cost
    (cross term included), and a discrete Riccati recursion the optimum ``x0' P_0 x0``.
    """
    n, m = B.shape
    Ah = np.zeros((n + m, n + m))
    Ah[:n, :n], Ah[:n, n:] = A, B
    Qh = np.zeros((n + m, n + m))
    Qh[:n, :n], Qh[n:, n:] = Q, R
    big = np.zeros((2 * (n + m), 2 * (n + m)))
    big[:n + m, :n + m], big[:n + m, n + m:], big[n + m:, n + m:] = -Ah.T, Qh, Ah
    M = expm(big * h)
    Phi = M[n + m:, n + m:]
    W = Phi.T @ M[:n + m, n + m:]                   # int_0^h e^(Ah' s) Qh e^(Ah s) ds
    Ad, Bd, Qd, Nd, Rd = Phi[:n, :n], Phi[:n, n:], W[:n, :n], W[:n, n:], W[n:, n:]
    P = np.array(PT, dtype=float)
    for _ in range(K):
        G = Rd + Bd.T @ P @ Bd
        Hm = Nd.T + Bd.T @ P @ Ad
        P = Qd + Ad.T @ P @ Ad - Hm.T @ np.linalg.solve(G, Hm)
    x0 = np.asarray(x0, dtype=float)
    return float(x0 @ P @ x0)
