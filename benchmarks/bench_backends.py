"""Batched sweeps on the accelerated backends: numpy vs numba, the compiled floor, Dask.

Problem: the two coupled pendulums of ``bench_core.py`` (``N = 4`` states, ``M = 2``
constant torques), jet of order 1 (no error estimate; ``backend="numba"`` runs the jet
only), ``n = 64`` depths evenly spaced in ``[-1, 0]``, fixed-step ``rk4`` with one step
between consecutive depths (63 steps, 252 right-hand-side evaluations). The same
functions are written twice: per sample with ``numba.njit`` (what ``backend="numba"``
runs) and vectorised with numpy (what ``backend="numpy"`` runs fastest); both with every
derivative the jet needs written by hand ("exact"), or with ``derivatives="finite-differences"`` (finite differences,
the same rule in both backends). A third table gives both backends the same per-sample
plain-Python functions with exact derivatives (numpy calls them row by row). A fourth
builds the problem with ``from_sympy(compile="numba")``: both backends then run the
symbolic provider's generated code (numpy over the batch, numba per sample).

What is measured, in one run (ratios are comparable within a run only):

1. ``numpy`` vs ``numba`` wall time for B = 1, 64, 1024, 16384 (numpy at 16384 only
   without ``--quick``; the per-sample table up to 1024), and the largest relative
   difference of their results;
2. the floor: the same ``B x 252`` evaluations of the dynamics alone in a compiled loop,
   and how many dynamics-equivalent evaluations one sweep stage costs;
3. compile time of the kernels: cold (empty cache, a fresh process) and warm (cached);
4. Dask: ``invimbed.dask.solve_batch`` with ``backend="numba"`` on a ``LocalCluster``
   of 1 and 2 single-threaded worker processes at B = 65536 (fewer depths, see below):
   speed-up, and the overhead against the same solve in-process on one thread;
5. memory: peak RSS added by a B = 16384, n = 64 numba solve, against the size of the
   arrays it returns.

Run:  python benchmarks/bench_backends.py [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

import invimbed
from _machine import arguments, best_of, machine_info, repeats_of

try:
    import numba
    from numba import njit
except ImportError:  # pragma: no cover
    sys.exit("bench_backends.py needs numba: pip install invimbed[numba]")

warnings.simplefilter("ignore", category=getattr(numba, "NumbaExperimentalFeatureWarning", Warning))

from _coupled_njit import (  # noqa: E402  the problem, per sample and vectorised
    N, M, W, N_DEPTHS, DEPTHS, STEP, f1, problems, inputs)


BUDGET = 20.0     # seconds: a case whose call takes longer is not repeated
KW = dict(control=invimbed.Constant(W), method="rk4", step=STEP, estimate_error=False)


def max_rel(a: invimbed.ImbeddingResult, b: invimbed.ImbeddingResult) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]) / np.maximum(1.0, np.abs(b[k]))))
               for k in ("z", "value", "adjoint", "param_grad", "depth_grad"))


@njit(cache=True)
def _floor_loop(fn_x, th, stages):
    s = 0.0
    for b in range(fn_x.shape[0]):
        for k in range(stages):
            v = f1(-k / stages, fn_x[b], th)
            s += v[2]
    return s


def floor_time(B: int, repeats: int) -> float:
    x = inputs(B)
    _floor_loop(x[:1], W, 1)
    return best_of(lambda: _floor_loop(x, W, 4 * (N_DEPTHS - 1)), repeats, budget=BUDGET)[0]


def table_numpy_numba(sizes: list[int], numpy_max: int, repeats: int, exact: bool | str,
                      closure: str) -> list[dict]:
    pn, pv = problems(exact)
    invimbed.solve_imbedding(pn, inputs(2), DEPTHS, backend="numba", closure=closure, **KW)
    invimbed.solve_imbedding(pv, inputs(2), DEPTHS, closure=closure, **KW)   # generated code
    rows = []
    for B in sizes:
        x = inputs(B)
        tn, rn = best_of(lambda: invimbed.solve_imbedding(pn, x, DEPTHS, backend="numba",
                                                          closure=closure, **KW), repeats,
                         budget=BUDGET)
        row = {"B": B, "numba_s": tn, "floor_s": floor_time(B, repeats)}
        if B <= numpy_max:
            tp, rp = best_of(lambda: invimbed.solve_imbedding(pv, x, DEPTHS, closure=closure, **KW),
                             repeats, budget=BUDGET)
            row.update(numpy_s=tp, ratio=tp / tn, max_rel=max_rel(rn, rp))
        rows.append(row)
    return rows


COMPILE_SNIPPET = """
import time, warnings, numpy as np, sys
warnings.simplefilter("ignore")
sys.path.insert(0, {here!r})
import bench_backends as bb, invimbed
t0 = time.perf_counter(); c0 = time.process_time()
pn, _ = bb.problems(True)
invimbed.solve_imbedding(pn, bb.inputs(2), bb.DEPTHS[:3], backend="numba", **bb.KW)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def compile_times() -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, cpu) of the first numba solve (jet) in a fresh process with an empty numba
    cache, then again with that cache filled."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = COMPILE_SNIPPET.format(here=here)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = []
        for _ in range(2):
            text = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True).stdout.split()
            out.append((float(text[0]), float(text[1])))
    return out[0], out[1]


MEMORY_SNIPPET = """
import warnings, json, sys, numpy as np
warnings.simplefilter("ignore")
sys.path.insert(0, {here!r})
import bench_backends as bb, invimbed

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith(key + ":"))

pn, _ = bb.problems(True)
invimbed.solve_imbedding(pn, bb.inputs(2), bb.DEPTHS, backend="numba", **bb.KW)
x = bb.inputs({B})
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:   # reset the peak (VmHWM) to the current RSS
    fh.write("5")
res = invimbed.solve_imbedding(pn, x, bb.DEPTHS, backend="numba", **bb.KW)
peak = status("VmHWM")
out = sum(res[k].nbytes for k in ("z", "value", "adjoint", "param_grad", "depth_grad"))
print(json.dumps(dict(before_kb=before, after_kb=peak, output_bytes=out)))
"""


def memory(B: int) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    text = subprocess.run([sys.executable, "-c", MEMORY_SNIPPET.format(here=here, B=B)],
                          capture_output=True, text=True, check=True).stdout
    return json.loads(text.strip().splitlines()[-1])


def dask_scaling(B: int, n_depths: int, chunk: int) -> dict | None:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        return None
    import invimbed.dask as idask

    depths = np.linspace(0.0, -1.0, n_depths)
    kw = dict(KW, step=1.0 / (n_depths - 1), backend="numba")
    pn, _ = problems(True)
    x = inputs(B)
    numba.set_num_threads(1)
    invimbed.solve_imbedding(pn, x[:2], depths, **kw)
    t0 = time.perf_counter()
    ref = invimbed.solve_imbedding(pn, x, depths, **kw)
    direct = time.perf_counter() - t0
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    out = {"B": B, "n_depths": n_depths, "chunk": chunk, "direct_1thread_s": direct}
    os.environ["NUMBA_NUM_THREADS"] = "1"     # inherited by the worker processes
    try:
        for workers in (1, 2):
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                idask.solve_batch(pn, x[:2 * workers], depths, client=client, chunk_size=1, **kw)
                t0 = time.perf_counter()
                res = idask.solve_batch(pn, x, depths, client=client, chunk_size=chunk, **kw)
                out[f"workers{workers}_s"] = time.perf_counter() - t0
                assert res.success and np.array_equal(res.z, ref.z)
    finally:
        del os.environ["NUMBA_NUM_THREADS"]
    return out


def backend_info() -> str:
    return machine_info("numba", extra=(
        f"numba    : {numba.config.NUMBA_NUM_THREADS} threads "
        f"({numba.threading_layer() if _ran_parallel() else '-'} layer)",))


def _ran_parallel() -> bool:
    try:
        numba.threading_layer()
        return True
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, quick="numpy up to B = 1024, one timed repeat, a smaller Dask run",
                   repeats_help="timed repeats, best taken (default 3, 1 with --quick)")
    ap.add_argument("--skip-dask", action="store_true")
    args = ap.parse_args(argv)
    quick = args.quick
    repeats = repeats_of(args, full=3)
    sizes = [1, 64, 1024, 16384]
    print(backend_info())
    print(f"problem  : coupled pendulums, N = {N}, M = {M}, n = {N_DEPTHS} depths in [-1, 0], rk4, "
          f"step {STEP:.4g} (252 stages); best of {repeats}; wall-clock seconds\n")

    (cw, cc), (ww, wc) = compile_times()
    print(f"compile  : cold cache {cw:.1f} s wall ({cc:.1f} s CPU) for the jet kernels "
          f"and the problem's functions; warm cache {ww:.1f} s wall ({wc:.1f} s CPU)\n")

    for exact, closure, numpy_max, szs in [
        (True, "jet", 1024 if quick else 16384, sizes),
        (False, "jet", 64 if quick else 1024, [1, 64, 1024]),
        ("per-sample", "jet", 1024, [1, 64, 1024]),
        ("sympy", "jet", 1024 if quick else 16384, sizes),
    ]:
        rows = table_numpy_numba(szs, numpy_max, repeats, exact, closure)
        deriv = ("from_sympy, compile='numba'" if exact == "sympy" else
                 "the same per-sample Python functions, exact derivatives"
                 if exact == "per-sample" else
                 "exact derivatives" if exact else "finite differences")
        print(f"{closure}-{'1' if closure == 'jet' else 'central'}, {deriv}")
        print(f"{'B':>6} {'numpy s':>9} {'numba s':>9} {'numpy/numba':>11} {'floor s':>9} "
              f"{'numba/floor':>11} {'max rel diff':>12}")
        for r in rows:
            npy = f"{r['numpy_s']:9.3f}" if "numpy_s" in r else f"{'-':>9}"
            ratio = f"{r['ratio']:11.1f}" if "ratio" in r else f"{'-':>11}"
            diff = f"{r['max_rel']:12.1e}" if "max_rel" in r else f"{'-':>12}"
            print(f"{r['B']:6d} {npy} {r['numba_s']:9.3f} {ratio} {r['floor_s']:9.2e} "
                  f"{r['numba_s'] / r['floor_s']:11.1f} {diff}")
        print()

    mem = memory(16384)
    added = (mem["after_kb"] - mem["before_kb"]) * 1024
    print(f"memory   : B = 16384, n = {N_DEPTHS}, jet-1, numba: outputs {mem['output_bytes'] / 2**20:.1f} "
          f"MiB; peak RSS during the solve {added / 2**20:.1f} MiB above the RSS before it "
          f"({added / mem['output_bytes']:.2f} x the outputs; RSS before "
          f"{mem['before_kb'] / 1024:.0f} MiB, peak {mem['after_kb'] / 1024:.0f} MiB)\n")

    if not args.skip_dask:
        B, nd, chunk = (65536, 8, 8192) if quick else (65536, 16, 4096)
        d = dask_scaling(B, nd, chunk)
        if d is None:
            print("dask     : not installed (pip install invimbed[dask])")
        else:
            print(f"dask     : B = {B}, {nd} depths, rk4, numba backend, chunks of {chunk} rows, "
                  f"LocalCluster of single-threaded worker processes")
            print(f"           in-process, 1 thread : {d['direct_1thread_s']:7.2f} s")
            print(f"           1 worker             : {d['workers1_s']:7.2f} s "
                  f"(overhead {d['workers1_s'] / d['direct_1thread_s']:.2f} x)")
            print(f"           2 workers            : {d['workers2_s']:7.2f} s "
                  f"(speed-up {d['workers1_s'] / d['workers2_s']:.2f} x over 1 worker)")


if __name__ == "__main__":
    main()
