"""The Van der Pol oscillator with a bounded control, by multiple shooting.

    dz1/dt = z2,   dz2/dt = -z1 + (1 - z1^2) z2 + u,   z(0) = (1, 0),   -0.3 <= u <= 1,
    J = int_0^5 (z1^2 + z2^2 + u^2) dt.

Published optimum: J* = 2.8673 (the BOCOP and Vassiliadis collections' Van der Pol
problem). Grid: K equal intervals, control constant on each: 2.86778 on K = 100 (1.7e-4
relative, the discretisation's error), 2.8807 on K = 20. The control rides its lower
bound u = -0.3 at the start.

Run: ``python examples/ocp_vanderpol.py [--intervals K] [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TF, PUBLISHED, BOUNDS = [1.0, 0.0], 5.0, 2.8673, (-0.3, 1.0)
TOLERANCE = {20: 6e-3, 100: 3e-4}


def dynamics(z, u):
    return [z[1], -z[0] + (1 - z[0] ** 2) * z[1] + u[0]]


def running_loss(z, u):
    return z[0] ** 2 + z[1] ** 2 + u[0] ** 2


SPEC = dict(n=2, m=1, x0=X0, grid=lambda K: np.linspace(0.0, TF, K + 1), dynamics=dynamics,
            running=running_loss, control_bounds=BOUNDS, published=PUBLISHED)


def problem() -> invimbed.BolzaProblem:
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], dynamics([z1, z2], [u]),
                               running_loss([z1, z2], [u]), q=TF)


def solve(intervals: int = 100, **kwargs):
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals),
                              control_bounds=BOUNDS, **kwargs)


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"Van der Pol: J = {res.fun:.5f} (published {PUBLISHED})",
                 gallery.bounds_panel(BOUNDS, "constraint: -0.3 <= u <= 1 (dashed)"))


def main(argv: list[str]) -> None:
    K = gallery.intervals(argv)
    res = solve(K)
    gallery.check("Van der Pol", res, res.fun, PUBLISHED, TOLERANCE.get(K, 6e-3),
                  f"J = {res.fun:.6f} (published {PUBLISHED}); ")
    assert np.all(res.controls >= BOUNDS[0] - 1e-8) and np.all(res.controls <= BOUNDS[1] + 1e-8)
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
