"""Correctness and timing of ``backend="cupy"`` on a GPU machine.

1. Correctness: the jet (order 1, with its error estimate) and stencil sweeps of a
   nonlinear problem (a forced pendulum with a controlled torque, functions written with
   ``xp = invimbed.array_namespace(z)``), ``backend="cupy"`` against ``backend="numpy"``:
   the largest relative difference must be below 1e-10.
2. Timing: the jet sweep for B = 1024, 16384, 65536 inputs, 64 depths, rk4, numpy
   (up to B = 16384) vs cupy.

Without cupy or without a CUDA device it prints why and exits with status 0, so that it
can run anywhere (CI imports it).

Run:  python benchmarks/gpu_check.py [--quick]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

import invimbed

# the public name (invimbed.array_namespace) once the package exports it
array_namespace = getattr(invimbed, "array_namespace", None)
if array_namespace is None:
    from invimbed._core.namespace import array_namespace

TOL = 1e-10
A, EPS_F, OMEGA = 1.0, 0.3, 1.3


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
CONTROL = invimbed.Constant([0.2, 0.1])
DEPTHS = np.linspace(0.0, -1.0, 64)
KW = dict(control=CONTROL, method="rk4", step=1.0 / 63)


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
               for k in ("z", "value", "adjoint", "param_grad", "depth_grad"))


def timed(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="B up to 16384, one repeat")
    args = ap.parse_args(argv)
    cupy, reason = gpu_or_reason()
    if cupy is None:
        print(f"gpu_check: SKIPPED: {reason}. Nothing was measured.")
        return 0
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device   : {props['name'].decode()} ({props['totalGlobalMem'] / 2**30:.0f} GiB), "
          f"cupy {cupy.__version__}, numpy {np.__version__}, {platform.platform()}")

    x = np.random.default_rng(0).normal(scale=0.5, size=(256, 2))
    worst = 0.0
    for closure in ("jet", "stencil"):
        ref = invimbed.solve_imbedding(PROBLEM, x, DEPTHS, closure=closure, **KW)
        got = invimbed.solve_imbedding(PROBLEM, x, DEPTHS, closure=closure, backend="cupy",
                                       array_type="cupy", **KW)
        assert isinstance(got.z, cupy.ndarray), "array_type='cupy' must return cupy arrays"
        got = {k: cupy.asnumpy(got[k]) for k in ("z", "value", "adjoint", "param_grad",
                                                  "depth_grad")}
        err = max_rel(got, ref)
        worst = max(worst, err)
        print(f"check    : {closure:8s} B = 256, n = 64: max relative difference cupy vs numpy "
              f"{err:.2e} ({'ok' if err < TOL else 'FAILED'}, tolerance {TOL:g})")

    sizes = [1024, 16384] if args.quick else [1024, 16384, 65536]
    repeats = 1 if args.quick else 3
    print(f"\n{'B':>6} {'numpy s':>9} {'cupy s':>9} {'numpy/cupy':>10}")
    for B in sizes:
        xb = np.random.default_rng(B).normal(scale=0.5, size=(B, 2))
        tn = timed(lambda: invimbed.solve_imbedding(PROBLEM, xb, DEPTHS, **KW), repeats) \
            if B <= 16384 else float("nan")

        def gpu():
            invimbed.solve_imbedding(PROBLEM, xb, DEPTHS, backend="cupy", **KW)
            cupy.cuda.Stream.null.synchronize()

        tc = timed(gpu, repeats)
        print(f"{B:6d} {tn:9.3f} {tc:9.3f} {tn / tc:10.1f}")
    return 0 if worst < TOL else 1


if __name__ == "__main__":
    sys.exit(main())
