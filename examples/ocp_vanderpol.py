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

import numpy as np
import sympy as sp

import invimbed

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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    ax[0].plot(res.trajectory.t, res.trajectory.z, lw=1.2)
    ax[0].plot(res.times, res.states, ".", color="k", ms=3)
    ax[0].set(title="state z1, z2 (dots: shooting nodes)", xlabel="t")
    ax[1].step(res.times[:-1], res.controls[:, 0], where="post")
    ax[1].set(title="control u", xlabel="t")
    for b in BOUNDS:
        ax[2].axhline(b, color="r", ls="--", lw=1)
    ax[2].step(res.times[:-1], res.controls[:, 0], where="post")
    ax[2].set(title="constraint: -0.3 <= u <= 1 (dashed)", xlabel="t")
    fig.suptitle(f"Van der Pol: J = {res.fun:.5f} (published {PUBLISHED}), K = {len(res.controls)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> None:
    K = int(argv[argv.index("--intervals") + 1]) if "--intervals" in argv else 20
    res = solve(K)
    err = abs(res.fun - PUBLISHED) / PUBLISHED
    print(f"Van der Pol, K = {K}: J = {res.fun:.6f} (published {PUBLISHED}, relative "
          f"{err:.1e}); {res.message}")
    assert res.success, res.message
    assert err <= TOLERANCE.get(K, 6e-3), err
    assert np.all(res.controls >= BOUNDS[0] - 1e-8) and np.all(res.controls <= BOUNDS[1] + 1e-8)
    if "--plot" in argv:
        plot(res, argv[argv.index("--plot") + 1])


if __name__ == "__main__":
    main(sys.argv[1:])
