"""Peak memory of an accelerated sweep's result assembly, against the size of its outputs.

The numba jet-1 sweep of ``bench_backends.py``'s coupled pendulums (exact derivatives,
``rk4``, 64 depths given deepest last) at a large batch: the numpy allocations made while
the result is assembled (`tracemalloc`, after compilation), divided by the bytes of the
five result fields. Run: ``python benchmarks/bench_memory.py [B]`` (default B = 16384).
"""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np

import bench_backends as bb
import invimbed


def main(B: int = 16384) -> None:
    problem, _ = bb.problems(True)
    X = 0.3 * np.random.default_rng(0).standard_normal((B, 4))
    kw = dict(method="rk4", step=bb.STEP, estimate_error=False, backend="numba",
              control=invimbed.Constant(bb.W))
    invimbed.solve_imbedding(problem, X[:2], bb.DEPTHS, **kw)        # compile first
    tracemalloc.start()
    res = invimbed.solve_imbedding(problem, X, bb.DEPTHS, **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = sum(np.asarray(res[k]).nbytes
              for k in ("z", "value", "adjoint", "param_grad", "depth_grad"))
    print(f"B = {B}, {bb.DEPTHS.size} depths: outputs {out / 2**20:.1f} MiB, peak "
          f"{peak / 2**20:.1f} MiB of numpy allocations, ratio {peak / out:.2f} "
          f"(success={res.success})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16384)
