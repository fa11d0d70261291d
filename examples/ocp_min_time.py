"""Minimum-time control of a double integrator: a free horizon, by multiple shooting.

    dz1/dt = z2,   dz2/dt = u,   |u| <= 1,   z(p) = (1, 0),   z(q) = (0, 0),
    J = int_p^q 1 dt = q - p   (the horizon H = q - p is a decision variable).

Published optimum: J* = 2 (bang-bang, u = -1 then +1, switching at H/2; e.g. Bryson &
Ho, "Applied Optimal Control", 1975). With an even number K of equal intervals the
switch lies on a node, so the piecewise-constant control is exact: J = 2 to the
tolerances on every such grid.

Run: ``python examples/ocp_min_time.py [--intervals K] [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TARGET, PUBLISHED, BOUNDS, Q = [1.0, 0.0], [0.0, 0.0], 2.0, (-1.0, 1.0), 0.0
TOLERANCE = 1e-6


def dynamics(z, u):
    return [z[1], u[0]]


def running_loss(z, u):
    return 1


SPEC = dict(n=2, m=1, x0=X0, grid=lambda K: np.linspace(Q - 1.5, Q, K + 1), dynamics=dynamics,
            running=running_loss, control_bounds=BOUNDS, final_state=TARGET,
            free_horizon=True, published=PUBLISHED)


def problem() -> invimbed.BolzaProblem:
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], dynamics([z1, z2], [u]), sp.Integer(1), q=Q)


def solve(intervals: int = 100, **kwargs):
    # KKT tol 1e-8: at the default 1e-6 the exact Hessian's IPOPT stops (rightly, within
    # it) at H = 2 + 3e-6, short of the 1e-6 agreement with the published time we check
    kwargs.setdefault("tol", 1e-8)
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals), control_bounds=BOUNDS,
                              final_state=TARGET, free_horizon=True, **kwargs)


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"Minimum time: H = {res.horizon:.6f} (published {PUBLISHED})",
                 gallery.bounds_panel(BOUNDS, "constraint: |u| <= 1 (dashed)"), t0=res.p,
                 state_title="state z1, z2; target (0, 0)")


def main(argv: list[str]) -> None:
    K = gallery.intervals(argv)
    res = solve(K)
    gallery.check("Minimum time", res, res.fun, PUBLISHED, TOLERANCE,
                  f"H = {res.horizon:.8f}, J = {res.fun:.8f} (published {PUBLISHED}); "
                  f"final state {res.states[-1]}; ")
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
