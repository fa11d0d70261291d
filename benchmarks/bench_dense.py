"""How accurate the sweep's dense output is between its steps, and what it costs
(docs/accuracy.md, "Dense output: any depth from one sweep").

Two problems, each swept once with `solve_imbedding(..., dense_output=True)` from `q = 0`
down to the deepest depth, then read with `sol(p)` at `n` random depths (default 10^4):

* **LQ** (`tests/problems.py`'s `lq_problem`: `N = 2`, one control parameter, depths in
  `[-3, 0]`): the jet of order 1 is exact, so the error is the integrator's. For each
  scipy method and `rtol` (with `atol = 1e-3 rtol`) the table gives the largest error over
  the five fields in units of `rtol max|field| + atol`, at the random depths and at the
  sweep's own step ends (where no interpolation happens): if interpolation added error,
  the first would exceed the second.
* **pendulum** (`sympy_pendulum`, jet order 1 and 2, depths in `[-0.6, 0]`): the closure
  error dominates; the table gives the largest `|error| / (estimate + 5 (rtol max|field|
  + atol))` at the random depths, per field (`<= 1` means the error is within the
  estimate-based bound; the tests assert `3 x estimate + 5 (...)`).

The reference is `solve_adjoint` (the exact ensemble, `rtol=1e-11`, `atol=1e-13`) at the
same random depths. Timings: the sweep, `sol(p)` at the `n` depths, and the ensemble at
the default tolerances at the same depths, as ratios within one run.

Run from the repository root (timings vary with the load of the machine; compare them
only within one run):

    python benchmarks/bench_dense.py            # n = 10^4
    python benchmarks/bench_dense.py --quick    # n = 2000
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import invimbed  # noqa: E402
from _machine import machine_info  # noqa: E402
from problems import lq_problem, sympy_pendulum  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
LQ = dict(A=np.array([[0.0, 1.0], [-1.0, -0.3]]), B=np.array([[0.0], [1.0]]),
          Q=0.5 * np.eye(2), Rth=0.2 * np.eye(1), S=np.zeros((2, 1)), PT=np.eye(2))


def units(got, ref, rtol, atol, keys=FIELDS):
    return max(float(np.max(np.abs(got[k] - ref[k])) / (rtol * np.max(np.abs(ref[k])) + atol))
               for k in keys)


def step_ends(res):
    ts = np.asarray(res.sol.states.solution.ts)
    return np.sort(ts[(ts >= res.sol.interval[0]) & (ts <= res.sol.interval[1])])


def lq(n):
    pb, ctrl, x = lq_problem(**LQ), invimbed.Constant([0.3]), np.array([1.0, -0.5])
    p = np.sort(np.random.default_rng(0).uniform(-3.0, 0.0, n))
    ref = invimbed.solve_adjoint(pb, x, p, control=ctrl, rtol=1e-11, atol=1e-13)
    print(f"LQ, jet order 1 (exact), {n} random depths in [-3, 0]; error in units of "
          f"rtol max|field| + atol, worst field")
    print(f"{'method':>7} {'rtol':>7} {'steps':>6} {'random depths':>14} {'step ends':>10}")
    for method in ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA"):
        for rtol in (1e-4, 1e-6, 1e-8):
            atol = 1e-3 * rtol
            res = invimbed.solve_imbedding(pb, x, [-3.0, 0.0], control=ctrl, method=method,
                                           rtol=rtol, atol=atol, dense_output=True)
            ends = step_ends(res)
            at_ends = invimbed.solve_adjoint(pb, x, ends, control=ctrl, rtol=1e-11, atol=1e-13)
            print(f"{method:>7} {rtol:7.0e} {ends.size - 1:6d} "
                  f"{units(res.sol(p), ref, rtol, atol):14.2f} "
                  f"{units(res.sol(ends), at_ends, rtol, atol):10.2f}")
    t0 = time.perf_counter()
    res = invimbed.solve_imbedding(pb, x, [-3.0, 0.0], control=ctrl, dense_output=True)
    t1 = time.perf_counter()
    res.sol(p)
    t2 = time.perf_counter()
    invimbed.solve_adjoint(pb, x, p, control=ctrl)
    t3 = time.perf_counter()
    print(f"\ntimes at the default tolerances (rtol 1e-6, atol 1e-9), {n} depths: sweep "
          f"{t1 - t0:.3f} s, sol(p) {t2 - t1:.3f} s, ensemble {t3 - t2:.3f} s: "
          f"ensemble / (sweep + sol) = {(t3 - t2) / (t2 - t0):.1f}")


def pendulum(n):
    pb, ctrl, x = sympy_pendulum(), invimbed.Constant([0.2, 0.3]), np.array([1.0, 0.5])
    p = np.sort(np.random.default_rng(1).uniform(-0.6, 0.0, n))
    ref = invimbed.solve_adjoint(pb, x, p, control=ctrl, rtol=1e-11, atol=1e-13)
    rtol, atol = 1e-6, 1e-9
    print(f"\npendulum, {n} random depths in [-0.6, 0], rtol {rtol:g}, atol {atol:g}: "
          f"largest |error| / (estimate + 5 (rtol max|field| + atol)), and the largest "
          f"error and estimate")
    for order in (1, 2):
        res = invimbed.solve_imbedding(pb, x, [-0.6, 0.0], control=ctrl, order=order,
                                       rtol=rtol, atol=atol, dense_output=True)
        got = res.sol(p)
        cells = []
        for k in ("z", "value", "adjoint", "param_grad"):
            err = np.abs(got[k] - ref[k])
            bound = got.error_estimate[k] + 5 * (rtol * np.max(np.abs(ref[k])) + atol)
            cells.append(f"{k} {np.max(err / bound):.2f} ({np.max(err):.1e} / "
                         f"{np.max(got.error_estimate[k]):.1e})")
        print(f"  order {order}: " + "; ".join(cells))


if __name__ == "__main__":
    n = 2000 if "--quick" in sys.argv else 10_000
    print(machine_info("sympy"))
    print()
    start = time.perf_counter()
    lq(n)
    pendulum(n)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
