"""Correctness and timing of ``backend="cupy"`` on a GPU machine, against the CPU backends.

Problem: a forced pendulum with a controlled torque (``N = 2``, ``M = 2``), functions
written once with ``xp = invimbed.array_namespace(z)`` so that they run on numpy and on
cupy, ``n = 64`` depths evenly spaced in ``[-1, 0]``, fixed-step ``rk4`` with one step
between consecutive depths (63 steps).

1. Correctness: the jet (order 1, with its error estimate) and stencil sweeps at
   ``B = 256``, ``backend="cupy"`` (inputs and outputs as cupy arrays) against
   ``backend="numpy"`` on the same derivatives: ``backend="cupy"`` runs the problem's
   functions on the device with central finite differences (a traced problem hands it
   the finite differences it would build without tracing), so the reference is the
   problem built with ``derivatives="finite-differences"``. The largest relative
   difference of the five fields must be below 1e-10.
2. Timing, one table per closure: the jet of order 1 without its error estimate
   (``jet-1``) and the stencil, wall time of one ``solve_imbedding`` call (results back
   on the host as numpy arrays) for each ``B`` of ``--sizes``, on the backends of
   ``--backends``:

   - ``cupy``: the GPU (finite differences, on the device);
   - ``numpy-fd``: numpy with the same finite differences (the same work as cupy);
   - ``numpy``: numpy with the problem's default derivatives (the functions traced into
     exact ones, docs/derivatives.md): what a CPU user gets;
   - ``numba``: ``backend="numba"`` on the same traced problem (the jet only: numba runs
     no stencil sweep).

   The first call of each backend (compilation, device kernels) is timed apart, on
   ``B = 64`` inputs (``FIRST_B``). Each
   size is timed once, or best of ``--repeats`` where one call takes under a second; a
   size is skipped (and the table says so) where the last size's time, scaled linearly
   in ``B``, predicts more than ``--cap`` seconds.

3. ``--targets``: the measurement of the CUDA kernels against the issue's targets
   (``benchmarks/_gpu_targets.py`` says what runs): the cuda ensemble, the numba CPU
   ensemble and sweep and diffrax's jitted vmap on the pendulum and a 6-state chain, 64
   depths, ``B`` of ``--sizes`` (default 10^3 to 10^6), the old cupy sweep (section 2's
   jet-1 series) at the same sizes, then the suite's GPU tests (``tests/cuda`` on the
   device, ``INVIMBED_CUDA_DEVICE=1``, and ``tests/test_backends.py -k cupy``). The
   measurements go to ``--json`` or, where ``$OUT`` is set, ``$OUT/gpu_check.json``.
   ``--simulate`` runs it in numba-cuda's simulator (no GPU; with ``--quick``: 4 depths,
   B = 2 and 4), which proves the script, not the speed.

Without cupy or without a CUDA device the GPU parts print why (``gpu_check: SKIPPED``)
and the script exits with status 0, so that it can run anywhere (CI imports it); the
CPU backends can still be timed alone (``--backends numpy numba --no-check``).

Run:  python benchmarks/gpu_check.py --targets --cap 20      (on the H200: the issue's table)
      python benchmarks/gpu_check.py --targets --quick --simulate   (anywhere, in seconds)
      python benchmarks/gpu_check.py [--quick]
      python benchmarks/gpu_check.py --sizes 1000 10000 100000 1000000 --json gpu.json
      python benchmarks/gpu_check.py --backends numpy-fd numpy numba --no-check \\
          --sizes 1000 10000 100000 1000000 --cap 20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable

if "--simulate" in sys.argv:      # before numba is imported (it reads the variable then)
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np

import invimbed
from _machine import arguments

# the public name (invimbed.array_namespace) once the package exports it
array_namespace = getattr(invimbed, "array_namespace", None)
if array_namespace is None:
    from invimbed._core.runtime.namespace import array_namespace

TOL = 1e-10
A, EPS_F, OMEGA = 1.0, 0.3, 1.3
BACKENDS = ("cupy", "numpy-fd", "numpy", "numba")
FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def f(t, z, th):
    xp = array_namespace(z)
    return xp.stack([z[:, 1], -A * xp.sin(z[:, 0]) - th[:, 1] * z[:, 1] + th[:, 0]
                     + EPS_F * np.cos(OMEGA * t)], axis=1)


def R(t, z, th):
    xp = array_namespace(z)
    return 0.4 * (1 - xp.cos(z[:, 0])) + 0.1 * z[:, 1] ** 2 + 0.05 * (th[:, 0] ** 2 + th[:, 1] ** 2)


def T(z):
    xp = array_namespace(z)
    return (1 - xp.cos(z[:, 0] - 0.5)) + 0.25 * (z[:, 1] + 0.2) ** 4


PROBLEM = invimbed.BolzaProblem(f, R, T, vectorized=True)
#: the derivatives backend="cupy" runs (central finite differences of the functions)
PROBLEM_FD = invimbed.BolzaProblem(f, R, T, vectorized=True, derivatives="finite-differences")
CONTROL = invimbed.Constant([0.2, 0.1])
DEPTHS = np.linspace(0.0, -1.0, 64)
KW = dict(control=CONTROL, method="rk4", step=1.0 / 63)
#: the batch of the first, untimed call (compilation, the device's kernels)
FIRST_B = 64
#: the timed sweeps: jet of order 1 without its estimate, and the stencil
CLOSURES = {"jet-1": dict(closure="jet", estimate_error=False), "stencil": dict(closure="stencil")}


def gpu_or_reason() -> tuple[object | None, str]:
    try:
        import cupy
    except ImportError:
        return None, "cupy is not installed (pip install invimbed[gpu] on a CUDA machine)"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver
        return None, f"cupy is installed but CUDA is not usable: {exc}"
    if n < 1:
        return None, "cupy is installed but sees no CUDA device"
    return cupy, ""


def max_rel(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - b[k]) / np.maximum(1.0, np.abs(b[k]))))
               for k in FIELDS)


def inputs(B: int) -> np.ndarray:
    return np.random.default_rng(B).normal(scale=0.5, size=(B, 2))


def check(cupy: Any) -> float:
    """Section 1: the largest relative difference, cupy against numpy, jet and stencil."""
    x = inputs(256)
    worst = 0.0
    for closure in ("jet", "stencil"):
        ref = invimbed.solve_imbedding(PROBLEM_FD, x, DEPTHS, closure=closure, **KW)
        got = invimbed.solve_imbedding(PROBLEM, cupy.asarray(x), DEPTHS, closure=closure,
                                       backend="cupy", **KW)
        assert isinstance(got.z, cupy.ndarray), "cupy inputs must give cupy outputs"
        got = {k: cupy.asnumpy(got[k]) for k in FIELDS} | {"status": got.status}
        err = max_rel(got, ref)
        worst = max(worst, err)
        print(f"check    : {closure:8s} B = 256, n = 64: max relative difference cupy vs numpy "
              f"{err:.2e} ({'ok' if err < TOL else 'FAILED'}, tolerance {TOL:g}); "
              f"status {ref.status} / {got['status']}", flush=True)
        # both run finite differences: each one's distance to the sweep on exact
        # (traced) derivatives is its difference error; cupy's should be numpy's size
        exact = invimbed.solve_imbedding(PROBLEM, x, DEPTHS, closure=closure, **KW)
        print(f"           {'':8s} distance to the same sweep on exact derivatives: "
              f"numpy {max_rel(ref, exact):.2e}, cupy {max_rel(got, exact):.2e}", flush=True)
    return worst


def runner(backend: str, closure: str, cupy: Any) -> Callable[[np.ndarray], Any]:
    """One timed call: ``backend`` of BACKENDS on ``closure`` of CLOSURES."""
    kw = dict(KW, **CLOSURES[closure])
    if backend == "cupy":
        def gpu(x):
            res = invimbed.solve_imbedding(PROBLEM, x, DEPTHS, backend="cupy", **kw)
            cupy.cuda.Stream.null.synchronize()
            return res
        return gpu
    prob = PROBLEM_FD if backend == "numpy-fd" else PROBLEM
    be = "numba" if backend == "numba" else "numpy"
    return lambda x: invimbed.solve_imbedding(prob, x, DEPTHS, backend=be, **kw)


def series(backend: str, closure: str, sizes: list[int], cap: float, repeats: int,
           cupy: Any) -> dict:
    """Times of ``backend`` on ``closure`` for ``sizes``; a size predicted over ``cap`` s
    (the last time scaled linearly in B) is skipped (`_gpu_targets.timed_series`)."""
    from _gpu_targets import timed_series

    out: dict = {"backend": backend, "closure": closure}
    out.update(timed_series(runner(backend, closure, cupy), inputs, sizes, cap, repeats,
                            min(sizes[0], FIRST_B)))
    for B, best in out["times"].items():
        print(f"{backend:9s} {closure:8s} B = {B:8d}: {best:9.3f} s", flush=True)
    if "error" in out:
        print(f"{backend:9s} {closure:8s} FAILED: {out['error']}", flush=True)
    return out


def table(results: list[dict], sizes: list[int]) -> str:
    lines = []
    for closure in CLOSURES:
        rows = [r for r in results if r["closure"] == closure]
        if not rows:
            continue
        names = [r["backend"] for r in rows]
        lines.append(f"\n{closure}: seconds per solve_imbedding call (n = 64 depths, rk4, "
                     f"63 steps); first call (compilation, B = {FIRST_B}) apart")
        lines.append(f"{'B':>8} " + " ".join(f"{n:>10}" for n in names)
                     + ("" if "cupy" not in names else "   CPU/cupy"))
        for B in sizes:
            cells, t_gpu = [], None
            for r in rows:
                t = r["times"].get(B)
                if r["backend"] == "cupy":
                    t_gpu = t
                cells.append(f"{t:10.3f}" if t is not None else
                             f"{'skipped' if B in r['skipped'] else '-':>10}")
            ratios = [f"{r['backend']} {r['times'][B] / t_gpu:.1f}x" for r in rows
                      if r["backend"] != "cupy" and B in r["times"] and t_gpu]
            lines.append(f"{B:8d} " + " ".join(cells) + ("   " + ", ".join(ratios)
                                                          if ratios else ""))
        lines.append(f"{'first':>8} " + " ".join(
            f"{r.get('first_call_s', float('nan')):10.2f}" for r in rows))
        for r in rows:
            if r["skipped"]:
                lines.append(f"  {r['backend']}: skipped B = {', '.join(map(str, r['skipped']))} "
                             f"(predicted over the cap)")
            if "error" in r:
                lines.append(f"  {r['backend']}: {r['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="B = 1024 and 16384, one repeat", repeats=3, json_out=True)
    ap.add_argument("--sizes", type=int, nargs="+", help="batch sizes B "
                    "(default 1024 16384 65536)")
    ap.add_argument("--backends", nargs="+", choices=BACKENDS, default=["cupy", "numpy-fd"],
                    help="what to time (default cupy numpy-fd)")
    ap.add_argument("--closures", nargs="+", choices=list(CLOSURES), default=list(CLOSURES))
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip the correctness check")
    ap.add_argument("--cap", type=float, default=30.0,
                    help="skip a size predicted to take more seconds per call (default 30)")
    ap.add_argument("--targets", action="store_true",
                    help="the CUDA kernels against the issue's targets (section 3)")
    ap.add_argument("--simulate", action="store_true",
                    help="run the CUDA kernels in numba-cuda's simulator (section 3)")
    ap.add_argument("--only", nargs="+", help="section 3's rows to run (default all: "
                    "'cuda ensemble' 'numba ensemble' 'numba sweep' diffrax)")
    ap.add_argument("--device-budget", default="48GiB",
                    help="memory_budget of the ensembles in section 3 (default 48GiB)")
    args = ap.parse_args(argv)
    if args.targets:
        return targets_main(args)
    sizes = args.sizes or ([1024, 16384] if args.quick else [1024, 16384, 65536])
    repeats = 1 if args.quick else args.repeats   # --quick: one repeat, whatever --repeats says
    cupy, reason = gpu_or_reason()
    backends = list(args.backends)
    if cupy is None:
        print(f"gpu_check: SKIPPED: {reason}. Nothing was measured on a GPU.")
        if "cupy" in backends or args.check:
            return 0
    print(f"platform : {platform.platform()}, numpy {np.__version__}, "
          f"invimbed {getattr(invimbed, '__version__', '?')}")
    doc: dict = {"platform": platform.platform(), "numpy": np.__version__, "sizes": sizes,
                 "n_depths": DEPTHS.size, "method": "rk4", "cap_s": args.cap}
    if cupy is not None:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        doc["device"] = props["name"].decode()
        doc["cupy"] = cupy.__version__
        print(f"device   : {doc['device']} ({props['totalGlobalMem'] / 2**30:.0f} GiB), "
              f"cupy {cupy.__version__}", flush=True)
    worst = 0.0
    if args.check:
        worst = check(cupy)
        doc["check_max_rel"] = worst
        save(args.json, doc)
    results = doc["results"] = []
    for b in backends:       # the JSON is rewritten after each series: a run stopped by a
        for c in args.closures:              # time limit keeps what it measured
            if not (b == "numba" and c == "stencil"):
                results.append(series(b, c, sizes, args.cap, repeats, cupy))
                save(args.json, doc)
    print(table(results, sizes))
    return 0 if worst < TOL else 1


def targets_main(args: argparse.Namespace) -> int:
    """Section 3 (the module docstring)."""
    import _gpu_targets as gt

    if args.quick:
        gt.DEPTHS, gt.FIRST_B, gt.ACC_B = np.linspace(0.0, -1.0, 4), 2, 2
    sizes = args.sizes or ([2, 4] if args.quick else [10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6])
    repeats = 1 if args.quick else args.repeats
    out = args.json or (os.path.join(os.environ["OUT"], "gpu_check.json")
                        if os.environ.get("OUT") else None)
    print(f"platform : {platform.platform()}, numpy {np.__version__}, "
          f"invimbed {getattr(invimbed, '__version__', '?')} "
          f"({os.path.dirname(invimbed.__file__)}), "
          f"{'numba-cuda SIMULATOR' if args.simulate else 'GPU'}", flush=True)
    doc: dict = {"platform": platform.platform(), "simulated": args.simulate,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        from numba import cuda
        if not args.simulate and cuda.is_available():
            dev = cuda.get_current_device()
            doc["device"] = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
            print(f"device   : {doc['device']}", flush=True)
    except Exception as exc:  # numba-cuda missing: the cuda rows say so
        print(f"device   : none ({exc})", flush=True)
    doc["cuda"] = gt.measure(sizes, args.cap, repeats, args.device_budget, only=args.only,
                             log=lambda line: print(line, flush=True))
    save(out, doc)
    cupy, reason = gpu_or_reason()
    if cupy is not None and not args.simulate:
        doc["cupy"] = series("cupy", "jet-1", sizes, args.cap, repeats, cupy)
        save(out, doc)
    else:
        print(f"old cupy path: SKIPPED: {reason or 'simulated run'}", flush=True)
    if not args.simulate and not args.quick:
        doc["tests"] = gpu_tests()
        save(out, doc)
    print(f"written  : {out}" if out else "written  : nothing (no --json, no $OUT)")
    return 0


def gpu_tests() -> dict:
    """The suite's GPU tests on the device: their summary lines."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, INVIMBED_CUDA_DEVICE="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = {}
    for name, cmd in (("tests/cuda", ["tests/cuda", "-m", "slow or not slow"]),
                      ("cupy", ["tests/test_backends.py", "-k", "cupy"])):
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                              "-n", "0", "-q", *cmd], cwd=root, env=env,
                             capture_output=True, text=True, timeout=400)
        tail = run.stdout.strip().splitlines()[-1:] or [run.stderr.strip()[-300:]]
        out[name] = {"returncode": run.returncode, "summary": tail[0],
                     "failures": [ln for ln in run.stdout.splitlines()
                                  if ln.startswith("FAILED")][:20]}
        print(f"tests    : {name}: {tail[0]}", flush=True)
    return out


def save(path: str | None, doc: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
