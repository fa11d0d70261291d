"""The hypersensitive problem's optimum with its ends either way: docs/optimal-control.md.

``x' = -x^3 + u``, ``J = int_0^tf (x^2 + u^2) / 2``, tf = 10^4, ``x(tf)`` fixed. Rao &
Mease run from ``x(0) = 1`` to ``x(tf) = 1.5`` (published optimum 3.3621); the sweep's
reach table of docs/optimal-control.md runs from ``x(0) = 1.5`` to ``x(tf) = 1``. For
each, `solve_ocp` (IPOPT, the Hessian by colored differences, rtol 1e-8) on four grids of
``examples/ocp_hypersensitive.py``'s shape, finer and finer in the boundary layers: the
state is integrated exactly, so each J is that of a feasible piecewise-constant control,
an upper bound of the optimum that falls towards it as the grid is refined.

Run from the repository root:  python docs/scripts/hypersensitive_ends.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import ocp_hypersensitive as ex  # noqa: E402

GRIDS = [(0.01, 1.3, 100.0), (0.002, 1.2, 100.0), (0.001, 1.1, 50.0), (0.0005, 1.05, 50.0)]


def main() -> None:
    print("x(0)  x(tf)      h0  ratio  longest    K  IPOPT iterations          J   seconds")
    for x0, x1 in ((1.0, 1.5), (1.5, 1.0)):
        for h0, ratio, longest in GRIDS:
            g = ex.grid(h0=h0, ratio=ratio, longest=longest)
            layers = x0 * np.exp(-g) * (g < 20) + x1 * np.exp(np.minimum(g - ex.TF, 0)) * (
                g > ex.TF - 20)
            guess = {"states": layers[:, None], "times": g,
                     "controls": np.zeros((g.size - 1, 1))}
            t0 = time.perf_counter()
            res = invimbed.solve_ocp(ex.problem(), [x0], grid=g, final_state=[x1],
                                     initial_guess=guess, hessian="finite-differences")
            assert res.success, res.message
            print(f"{x0:4.1f}  {x1:5.1f}  {h0:6.4f}  {ratio:5.2f}  {longest:7.0f}  "
                  f"{g.size - 1:3d}  {res.nit:16d}  {res.fun:9.6f}  "
                  f"{time.perf_counter() - t0:8.1f}")


if __name__ == "__main__":
    main()
