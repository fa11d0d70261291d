"""The hypersensitive problem on a long horizon, by multiple shooting on a nonuniform grid.

    dz/dt = -z^3 + u,   z(0) = 1,   z(tf) = 1.5,   tf = 10^4,
    J = int_0^tf (z^2 + u^2) / 2 dt.

Published optimum: J* = 3.3621 (A. V. Rao and K. D. Mease, "Eigenvector approximate
dichotomic basis method for solving hyper-sensitive optimal control problems", Optimal
Control Appl. Methods 2000; the GPOPS-II test set). The solution has boundary layers of
width O(1) at both ends and rests near 0 in between. Grid: the interval lengths grow
geometrically from h0 = 0.01 at both ends by the factor 1.3 up to 100, and the middle is
cut into equal intervals of at most 100 (K = 164); the control is constant on each.
Longer middle intervals make the shooting map strongly nonlinear (and stiff wherever an
iterate leaves the slow manifold), and IPOPT then wanders. The initial guess follows the
boundary layers (``exp(-t)`` and ``1.5 exp(t - tf)``, 0 in between), and the Hessian is
the default, exact (``from_sympy``): IPOPT converges in a few iterations. J = 3.37063 (2.5e-3
relative to the published optimum: the piecewise-constant control in the layers).

Needs IPOPT (``cyipopt``); without it the script says so and stops.

Run: ``python examples/ocp_hypersensitive.py [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TARGET, TF, PUBLISHED = [1.0], [1.5], 1e4, 3.3621
TOLERANCE = 3e-3


def grid(K: int | None = None, h0: float = 0.01, ratio: float = 1.3,
         longest: float = 100.0) -> np.ndarray:
    """Geometric from both ends (h0, h0 ratio, ... up to ``longest``), equal intervals of at
    most ``longest`` in the middle. (``K`` is not used: the grid fixes it.)"""
    lengths = [h0]
    while lengths[-1] * ratio < longest:
        lengths.append(lengths[-1] * ratio)
    left = np.concatenate([[0.0], np.cumsum(lengths)])
    middle = np.linspace(left[-1], TF - left[-1], int(np.ceil((TF - 2 * left[-1]) / longest)) + 1)
    return np.unique(np.concatenate([left, middle, TF - left]))


def initial_guess(g: np.ndarray) -> dict:
    """The boundary layers' shape: the state decays from 1, rests at 0, rises to 1.5."""
    states = np.exp(-g) * (g < 20) + 1.5 * np.exp(np.minimum(g - TF, 0)) * (g > TF - 20)
    return {"states": states[:, None], "times": g, "controls": np.zeros((g.size - 1, 1))}


def dynamics(z, u):
    return [-z[0] ** 3 + u[0]]


def running_loss(z, u):
    return (z[0] ** 2 + u[0] ** 2) / 2


SPEC = dict(n=1, m=1, x0=X0, grid=grid, dynamics=dynamics, running=running_loss,
            final_state=TARGET, published=PUBLISHED)


def problem() -> invimbed.BolzaProblem:
    t, z, u = sp.symbols("t z u")
    return invimbed.from_sympy(t, [z], [u], dynamics([z], [u]), running_loss([z], [u]), q=TF)


def solve(intervals: int | None = None, **kwargs):
    g = grid()
    return invimbed.solve_ocp(problem(), X0, grid=g, final_state=TARGET,
                              initial_guess=initial_guess(g), **kwargs)


def constraint_panel(ax, res, t0: float = 0.0) -> None:
    t = res.trajectory.t
    end = t >= TF - 12
    ax.plot(t[end] - TF, res.trajectory.z[end, 0], lw=1.2)
    ax.axhline(TARGET[0], color="r", ls="--", lw=1)
    ax.set(title="constraint: z(tf) = 1.5 (dashed); last 12 time units", xlabel="t - tf")


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"Hypersensitive, tf = 1e4: J = {res.fun:.5f} (published "
                 f"{PUBLISHED})", constraint_panel, states=0,
                 state_title="state z (dots: shooting nodes)", xscale="symlog")


def main(argv: list[str]) -> None:
    try:
        import cyipopt  # noqa: F401
    except ImportError:
        print("Hypersensitive: skipped, it needs IPOPT (pip install cyipopt): SLSQP, the "
              "fallback, did not finish within 5 minutes on this grid (328 variables, "
              "dense quasi-Newton).")
        return
    res = solve()
    gallery.check("Hypersensitive", res, res.fun, PUBLISHED, TOLERANCE,
                  f"J = {res.fun:.6f} (published {PUBLISHED}); z(tf) = {res.states[-1, 0]:.8f}; ")
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
