"""The Bryson-Denham problem: a state constraint, by multiple shooting.

    dz1/dt = z2,   dz2/dt = u,   z(0) = (0, 1),   z(1) = (0, -1),   z1 <= l = 1/9,
    J = int_0^1 u^2 / 2 dt.

Published optimum: J* = 4 / (9 l) = 4 (A. E. Bryson, W. F. Denham and S. E. Dreyfus,
"Optimal programming problems with inequality constraints I", AIAA J. 1963; Bryson &
Ho 1975, sec. 3.11). The constraint is imposed at the shooting nodes (a bound on the node
states, which IPOPT keeps exactly); ``path_points=k`` imposes it at k more times inside
every interval. Grid: K equal intervals, control constant on each: J = 4.00089 on
K = 100 (2.2e-4 relative), 4.022 on K = 20.

Run: ``python examples/ocp_bryson_denham.py [--intervals K] [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TARGET, LIMIT, PUBLISHED = [0.0, 1.0], [0.0, -1.0], 1.0 / 9.0, 4.0
TOLERANCE = {20: 1e-2, 100: 5e-4}


def dynamics(z, u):
    return [z[1], u[0]]


def running_loss(z, u):
    return u[0] ** 2 / 2


SPEC = dict(n=2, m=1, x0=X0, grid=lambda K: np.linspace(0.0, 1.0, K + 1), dynamics=dynamics,
            running=running_loss, final_state=TARGET, state_upper=[LIMIT, None],
            published=PUBLISHED)


def problem() -> invimbed.BolzaProblem:
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], dynamics([z1, z2], [u]),
                               running_loss([z1, z2], [u]), q=1.0)


def solve(intervals: int = 100, **kwargs):
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals), final_state=TARGET,
                              state_bounds=(None, [LIMIT, np.inf]), **kwargs)


def constraint_panel(ax, res, t0: float = 0.0) -> None:
    ax.axhline(LIMIT, color="r", ls="--", lw=1)
    ax.plot(res.trajectory.t, res.trajectory.z[:, 0], lw=1.2)
    ax.plot(res.times, res.states[:, 0], ".", color="k", ms=3)
    ax.set(title="constraint: z1 <= 1/9 (dashed), at the nodes", xlabel="t",
           ylim=(0.08, 0.115))


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"Bryson-Denham: J = {res.fun:.5f} (published {PUBLISHED})",
                 constraint_panel)


def main(argv: list[str]) -> None:
    K = gallery.intervals(argv)
    res = solve(K)
    excess = float(np.max(res.states[:, 0]) - LIMIT)
    gallery.check("Bryson-Denham", res, res.fun, PUBLISHED, TOLERANCE.get(K, 1e-2),
                  f"J = {res.fun:.6f} (published {PUBLISHED}); max z1 - 1/9 at the nodes = "
                  f"{excess:.1e}; ")
    assert excess <= 1e-6, excess
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
