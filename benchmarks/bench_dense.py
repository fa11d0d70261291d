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
  estimate-based bound; the tests assert `3 x estimate + (rtol max|field| + atol)`).

The reference is `solve_adjoint` (the exact ensemble, `rtol=1e-11`, `atol=1e-13`) at the
same random depths. Timings: the sweep, `sol(p)` at the `n` depths, and the ensemble at
the default tolerances at the same depths, as ratios within one run.

`--lq4` runs the `lq4` cell of `bench_accuracy.py` instead (`lq_problem(4)` there:
`N = 4`, two controls on four pieces, depths in `[-1, 0]`), at `n = 10^5` evenly spaced
depths as in its map: for each accuracy target `T` of the map (`1e-3`, `1e-6`, `1e-9`),
each backend (`--backends`, default numpy and numba) and `estimate_error` (`--estimate
on off`; default on, the sweep that checks its fields, status 0; off is the map's
fastest configuration, status 1), the sweep `solve_imbedding(order=1, rtol=T,
atol=T/100, dense_output=True)` is read with `sol(p)` at 10^4 random depths of `[-1, 0]`
and compared with the reference there. The error is given per field in the map's units,
`max|a - b| / max|b|` over `T` (at most 1: within the requested tolerance), and the
worst field also in units of `T max|b| + T/100`. Times (best of `--repeats`): the sweep
with `dense_output=True`; the same with the integrator at the requested tolerances
(`rtol=T x`, `atol=T x/100`, `x` the method's factor in `DENSE_TIGHTENING`: the dense
output before its tolerances were tightened); the sweep without dense output; and the
exact ensemble (`solve_adjoint(strategy="ensemble")`, numba backend where it runs, else
numpy) at `n = 10^5` at the rtol `--ensemble-rtols` gives per target (default the map's
fastest: `1e-4`, `1e-6`, `1e-8`), once; ratios are the ensemble's time over each sweep's.

One thread, as `bench_accuracy.py` (`OPENBLAS_NUM_THREADS`, `OMP_NUM_THREADS`,
`MKL_NUM_THREADS`, `NUMBA_NUM_THREADS` set to 1 unless already set). Run from the
repository root (timings vary with the load of the machine; compare them only within
one run):

    python benchmarks/bench_dense.py            # n = 10^4
    python benchmarks/bench_dense.py --quick    # n = 2000
    python benchmarks/bench_dense.py --lq4      # the lq4 cell, n = 10^5, 10^4 random depths
    python benchmarks/bench_dense.py --lq4 --backends numba --estimate on off
"""

from __future__ import annotations

import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")    # one thread, as bench_accuracy.py

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import invimbed  # noqa: E402
from _machine import arguments, best_of, header  # noqa: E402
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


def lq4(n_random, repeats, ensemble_rtols, backends, estimates):
    """The lq4 cell of bench_accuracy.py at n = 10^5 with dense output (module docstring)."""
    from _map_problems import HUGE_N, TARGETS, lq_problem as map_lq_problem
    from invimbed._core.sweep.dense import DENSE_TIGHTENING

    pb = map_lq_problem(4)
    d = np.linspace(0.0, -1.0, HUGE_N)
    p = np.random.default_rng(0).uniform(-1.0, 0.0, n_random)
    order = np.argsort(p)
    t0 = time.perf_counter()
    ref = invimbed.solve_adjoint(pb.problem, pb.x, p[order], control=pb.control, rtol=1e-11,
                                 atol=1e-13)
    assert ref.success, ref.message
    print(f"lq4 (bench_accuracy.py's lq_problem(4), {pb.note}); sweep at n = {HUGE_N} "
          f"depths linspace(0, -1), jet order 1, RK45, rtol = T, atol = T/100, "
          f"dense_output=True; sol(p) at {n_random} random depths in [-1, 0] against "
          f"solve_adjoint(rtol=1e-11, atol=1e-13) there ({time.perf_counter() - t0:.1f} s); "
          f"factor x = {DENSE_TIGHTENING['RK45']:g}")
    print("error: max|a - b| / max|b| over T per field (the map's units; <= 1 is within "
          "the requested tolerance), worst also in units of T max|b| + T/100")

    def run(T, config, dense=True, factor=1.0):
        backend, est = config
        return invimbed.solve_imbedding(pb.problem, pb.x, d, control=pb.control, order=1,
                                        estimate_error=est, rtol=T * factor,
                                        atol=T / 100 * factor, backend=backend,
                                        dense_output=dense)

    configs = [(b, e) for b in backends for e in estimates]
    name = {c: f"{c[0]}{'' if c[1] else ' no est'}" for c in configs}
    times = {}
    print(f"{'sweep':>12} {'T':>6} {'st':>2} {'nfev':>5} "
          + " ".join(f"{k:>10}" for k in FIELDS)
          + f" {'tol units':>9} {'untightened':>11}")   # the worst field in both
    for config in configs:
        for T in TARGETS:
            res = run(T, config)
            assert res.success, res.message
            got = res.sol(p)
            rel = {k: float(np.max(np.abs(got[k][order] - ref[k])) / np.max(np.abs(ref[k])))
                   for k in FIELDS}
            tolu = max(float(np.max(np.abs(got[k][order] - ref[k]))
                             / (T * np.max(np.abs(ref[k])) + T / 100)) for k in FIELDS)
            old = run(T, config, factor=DENSE_TIGHTENING["RK45"]).sol(p)
            before = max(float(np.max(np.abs(old[k][order] - ref[k])) / np.max(np.abs(ref[k])))
                         for k in FIELDS) / T
            print(f"{name[config]:>12} {T:6.0e} {int(res.status):2d} {int(res.nfev):5d} "
                  + " ".join(f"{rel[k] / T:10.3f}" for k in FIELDS)
                  + f" {tolu:9.3f} {before:11.3f}", flush=True)
            times[config, T] = (
                best_of(lambda: run(T, config), repeats)[0],
                best_of(lambda: run(T, config, factor=DENSE_TIGHTENING["RK45"]), repeats)[0],
                best_of(lambda: run(T, config, dense=False), repeats)[0])
    ens_backend = "numba"
    try:
        invimbed.solve_adjoint(pb.problem, pb.x, d[:2], control=pb.control, backend="numba")
    except ImportError:
        ens_backend = "numpy"
    print(f"\ntimes at n = {HUGE_N} (best of {repeats}; the ensemble once, {ens_backend} "
          f"backend, at its rtol, atol = rtol/100); ratio: the ensemble's time over the "
          f"sweep's")
    print(f"{'T':>6} {'ensemble':>14} {'sweep':>12} {'dense':>9} {'ratio':>7} "
          f"{'untightened':>11} {'ratio':>7} {'no dense':>9} {'ratio':>7}")
    for T, er in zip(TARGETS, ensemble_rtols):
        t0 = time.perf_counter()
        invimbed.solve_adjoint(pb.problem, pb.x, d, control=pb.control, rtol=er,
                               atol=er / 100, strategy="ensemble", backend=ens_backend)
        te = time.perf_counter() - t0
        for config in configs:
            td, tu, tn = times[config, T]
            print(f"{T:6.0e} {te:7.2f} s @{er:.0e} {name[config]:>12} {1e3 * td:6.1f} ms "
                  f"{te / td:6.0f}x {1e3 * tu:8.1f} ms {te / tu:6.0f}x {1e3 * tn:6.1f} ms "
                  f"{te / tn:6.0f}x", flush=True)


if __name__ == "__main__":
    parser = arguments(__doc__, quick="n = 2000 random depths", repeats=3,
                       repeats_help="--lq4: best of (default 3)")
    parser.add_argument("--lq4", action="store_true",
                        help="the lq4 cell of bench_accuracy.py at n = 10^5 (docstring)")
    parser.add_argument("--ensemble-rtols", type=float, nargs=3, default=(1e-4, 1e-6, 1e-8),
                        help="--lq4: the ensemble's rtol per target")
    parser.add_argument("--backends", nargs="+", default=["numpy", "numba"],
                        help="--lq4: the sweep's backends (default numpy numba)")
    parser.add_argument("--estimate", nargs="+", choices=["on", "off"], default=["on"],
                        help="--lq4: estimate_error of the sweep (default on; 'on off': "
                             "both, 'off' as the map's fastest 'nb jet-K' rows)")
    args = parser.parse_args()
    n = 2000 if args.quick else 10_000
    print(header("sympy", "numba"))
    print()
    start = time.perf_counter()
    if args.lq4:
        lq4(n, args.repeats, args.ensemble_rtols, args.backends,
            [e == "on" for e in args.estimate])
    else:
        lq(n)
        pendulum(n)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
