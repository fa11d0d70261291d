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

import numpy as np
import sympy as sp

import invimbed

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
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals), control_bounds=BOUNDS,
                              final_state=TARGET, free_horizon=True, **kwargs)


def plot(res, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    t = res.trajectory.t - res.p
    ax[0].plot(t, res.trajectory.z, lw=1.2)
    ax[0].plot(res.times - res.p, res.states, ".", color="k", ms=3)
    ax[0].set(title="state z1, z2; target (0, 0)", xlabel="t - p")
    ax[1].step(res.times[:-1] - res.p, res.controls[:, 0], where="post")
    ax[1].set(title="control u", xlabel="t - p")
    for b in BOUNDS:
        ax[2].axhline(b, color="r", ls="--", lw=1)
    ax[2].step(res.times[:-1] - res.p, res.controls[:, 0], where="post")
    ax[2].set(title="constraint: |u| <= 1 (dashed)", xlabel="t - p")
    fig.suptitle(f"Minimum time: H = {res.horizon:.6f} (published {PUBLISHED}), "
                 f"K = {len(res.controls)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> None:
    K = int(argv[argv.index("--intervals") + 1]) if "--intervals" in argv else 20
    res = solve(K)
    err = abs(res.fun - PUBLISHED) / PUBLISHED
    print(f"Minimum time, K = {K}: H = {res.horizon:.8f}, J = {res.fun:.8f} (published "
          f"{PUBLISHED}, relative {err:.1e}); final state {res.states[-1]}; {res.message}")
    assert res.success, res.message
    assert err <= TOLERANCE, err
    if "--plot" in argv:
        plot(res, argv[argv.index("--plot") + 1])


if __name__ == "__main__":
    main(sys.argv[1:])
