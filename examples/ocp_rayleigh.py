"""The Rayleigh problem, unconstrained, by multiple shooting (`invimbed.solve_ocp`).

    dz1/dt = z2,   dz2/dt = -z1 + z2 (1.4 - 0.14 z2^2) + 4 u,   z(0) = (-5, -5),
    J = int_0^2.5 (u^2 + z1^2) dt.

Published optimum (continuous control): J* = 29.3763 (H. Maurer and D. Augustin,
"Sensitivity analysis and real-time control of parametric optimal control problems using
boundary value methods", 2001; also in J. T. Betts, "Practical Methods for Optimal
Control", 2nd ed., SIAM 2010). Grid: K equal intervals, control constant on each; the
piecewise-constant control's discretisation error is O(h^2) in J: 29.3810 on K = 100
(1.6e-4 relative), 29.4735 on K = 20.

Run: ``python examples/ocp_rayleigh.py [--intervals K] [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TF, PUBLISHED = [-5.0, -5.0], 2.5, 29.3763
#: relative distance to the published optimum accepted on K intervals (O(h^2), measured)
TOLERANCE = {20: 4e-3, 100: 2e-4}


def dynamics(z, u):        # plain arithmetic: sympy here, CasADi in benchmarks/bench_ocp.py
    return [z[1], -z[0] + z[1] * (1.4 - 0.14 * z[1] ** 2) + 4 * u[0]]


def running_loss(z, u):
    return u[0] ** 2 + z[0] ** 2


SPEC = dict(n=2, m=1, x0=X0, grid=lambda K: np.linspace(0.0, TF, K + 1), dynamics=dynamics,
            running=running_loss, published=PUBLISHED)


def problem() -> invimbed.BolzaProblem:
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], dynamics([z1, z2], [u]),
                               running_loss([z1, z2], [u]), q=TF)


def solve(intervals: int = 100, **kwargs):
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals), **kwargs)


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"Rayleigh: J = {res.fun:.5f} (published {PUBLISHED})")


def main(argv: list[str]) -> None:
    K = gallery.intervals(argv)
    res = solve(K)
    gallery.check("Rayleigh", res, res.fun, PUBLISHED, TOLERANCE.get(K, 4e-3),
                  f"J = {res.fun:.6f} (published {PUBLISHED}); ")
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
