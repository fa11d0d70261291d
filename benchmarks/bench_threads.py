"""Threads: does the exact ensemble use both cores?

* numba: ``solve_adjoint(backend="numba")`` (a ``prange`` loop over rows) on the
  pendulums of ``_pendulums.py`` (one input, n depths in [-1, 0], rtol 1e-8), with
  ``numba.set_num_threads(1)`` and ``(2)`` alternated in one process, ``--repeats``
  times each: the best and the median wall time per thread count, their ratio, and the
  process CPU time over the wall time of the 2-thread runs (2.0: both cores busy).
* control: a trivially parallel ``prange`` loop (sums of sines), timed the same way:
  its speed-up is what the machine allows this process at the time (on a machine
  shared with other work, often less than 2).
* numpy: ``solve_adjoint(backend="numpy")`` at n = 1024 in child processes started with
  ``OPENBLAS_NUM_THREADS`` = ``OMP_NUM_THREADS`` = ``MKL_NUM_THREADS`` = 1 and 2,
  alternated, best of 3 in each child.

Run: ``python benchmarks/bench_threads.py [--repeats 5] [--ns 128 1024 8192]``. On a
machine shared with other work the ratios move from run to run: compare them only
within one run, and rerun.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _pendulums as P  # noqa: E402

import invimbed  # noqa: E402
from _machine import arguments, header  # noqa: E402


def call(n: int, backend: str):
    pb = P.make_problem()
    d = P.depths(n)
    return lambda: invimbed.solve_adjoint(pb, P.X0, d, control=P.CONTROL, rtol=1e-8,
                                          atol=1e-10, backend=backend)


def _control():
    from numba import njit, prange

    @njit(parallel=True)
    def sines(n):
        s = 0.0
        for i in prange(n):
            x = 0.0
            for k in range(200):
                x += np.sin(i * 1e-3 + k)
            s += x
        return s

    return lambda: sines(100_000)


def numba_threads(ns: list[int], repeats: int) -> None:
    import numba

    print(f"numba, NUMBA_NUM_THREADS = {numba.config.NUMBA_NUM_THREADS}:")
    for n in [0] + ns:
        run = _control() if n == 0 else call(n, "numba")
        run()                                    # compile / load the cache
        if n == 0:
            print(f"  threading layer {numba.threading_layer()}")
        wall = {1: [], 2: []}
        cpu2 = []
        for _ in range(repeats):
            for k in (1, 2):
                numba.set_num_threads(k)
                c0, t0 = time.process_time(), time.perf_counter()
                run()
                dt = time.perf_counter() - t0
                wall[k].append(dt)
                if k == 2:
                    cpu2.append((time.process_time() - c0) / dt)
        b1, b2 = min(wall[1]), min(wall[2])
        m1, m2 = statistics.median(wall[1]), statistics.median(wall[2])
        name = "control prange" if n == 0 else f"ensemble n = {n:5d}"
        print(f"  {name}: 1 thread best {b1 * 1e3:8.1f} ms (median {m1 * 1e3:8.1f}), "
              f"2 threads best {b2 * 1e3:8.1f} ms (median {m2 * 1e3:8.1f}); speed-up best "
              f"{b1 / b2:.2f}x, median {m1 / m2:.2f}x; CPU/wall with 2 threads "
              f"{statistics.median(cpu2):.2f}")


def numpy_child(n: int) -> None:
    run = call(n, "numpy")
    run()
    best = min(_timed(run) for _ in range(3))
    print(best)


def _timed(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def numpy_threads(n: int, repeats: int) -> None:
    got = {1: [], 2: []}
    for _ in range(repeats):
        for k in (1, 2):
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(k), OMP_NUM_THREADS=str(k),
                       MKL_NUM_THREADS=str(k))
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--numpy-child",
                                  str(n)], capture_output=True, text=True, env=env, check=True)
            got[k].append(float(out.stdout.strip().splitlines()[-1]))
    b1, b2 = min(got[1]), min(got[2])
    print(f"numpy ensemble, n = {n}: BLAS/OpenMP 1 thread best {b1 * 1e3:.1f} ms, 2 threads "
          f"best {b2 * 1e3:.1f} ms: ratio {b1 / b2:.2f}x (medians "
          f"{statistics.median(got[1]) * 1e3:.1f} / {statistics.median(got[2]) * 1e3:.1f} ms)")


def main() -> None:
    ap = arguments(__doc__, repeats=5)
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 1024, 8192])
    ap.add_argument("--numpy-n", type=int, default=1024)
    ap.add_argument("--numpy-child", type=int, default=None)
    a = ap.parse_args()
    if a.numpy_child is not None:
        numpy_child(a.numpy_child)
        return
    print(header("numba"))
    numba_threads(a.ns, a.repeats)
    numpy_threads(a.numpy_n, max(2, a.repeats // 2))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
