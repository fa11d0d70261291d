"""Cost of a jet sweep against the jet order K and the state size N.

Problem: a chain of ``n`` pendulums, each coupled to its neighbours by a spring and
driven by its own constant torque, written once in sympy (``invimbed.from_sympy``:
exact derivatives of every order),

    z = [phi_1..phi_n, omega_1..omega_n],   theta = [u_1..u_n]   (N = 2 n, M = n),
    d phi_i / dt   = omega_i,
    d omega_i / dt = -sin(phi_i) - k (sin(phi_i - phi_{i-1}) + sin(phi_i - phi_{i+1}))
                     - c omega_i + u_i                   (no neighbour beyond the ends),
    R = a sum_i (1 - cos phi_i) + rho |u|^2 / 2,
    T = sum_i (1 - cos(phi_i - 1)) + |omega|^2 / 2,

for N = 2, 4, 8 and jet orders K = 1..4: ``solve_imbedding(..., closure="jet",
order=K, estimate_error=False, method="rk4", step=h)``, so that the number of
right-hand-side evaluations is fixed (4 per step) and does not depend on K. The sweep
carries ``Z`` (N C(N+K, K) numbers), ``V`` (C(N+K+1, K+1)) and ``dJ/du``
(M C(N+K+1, K+1)); every evaluation asks the provider for the Taylor coefficients of
``f`` and ``R`` to degree K + 1 and those of their ``u``-gradients.

Measured, per (N, K), on a fresh problem (so that nothing is cached from another case):

* ``codegen``: the one-time code generation (symbolic differentiation, ``sympy.cse``,
  ``lambdify``; with ``--compile numba`` also the ``numba.njit`` compilation), the time
  of the first, one-step sweep less the evaluation cost measured afterwards;
* ``per eval``: the cost of one right-hand-side evaluation, from the best times of
  sweeps of ``S`` and ``2 S`` steps (``(t_2S - t_S) / (nfev_2S - nfev_S)``, which removes
  the per-sweep set-up), and ``per step`` = 4 x that (rk4);
* ``derivs``: the share of a sweep spent in the provider's generated code (its
  ``taylor`` calls, timed by a wrapper) — the rest is the jet's polynomial algebra;
* ``x K=1``: ``per eval`` over that of K = 1 at the same N.

BLAS runs on one thread unless ``OPENBLAS_NUM_THREADS`` (``OMP_NUM_THREADS``,
``MKL_NUM_THREADS``) is set: the sweep's products are small, and on a busy machine
threaded BLAS spins waiting for cores. All times are CPU time of the process
(``time.process_time``, all threads summed), not wall time: on a shared machine the
load from other processes inflates wall time far more. On an idle machine with one
BLAS thread the two agree.

Run:  python benchmarks/bench_jets.py [--quick] [--repeats R] [--steps S] [--compile numba]
"""

from __future__ import annotations

import os

# One BLAS thread unless the caller says otherwise (set before numpy is imported). The
# sweep's matrix products are small; on a busy machine OpenBLAS's threads spin and wait
# for a core, which made single products up to 80x slower in our runs.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import time  # noqa: E402
from math import comb  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import invimbed  # noqa: E402
from _machine import arguments, header, repeats_of  # noqa: E402

K_SPRING, C_DAMP, A_RUN, RHO = 0.5, 0.1, 0.1, 0.05
DEPTH = 1.0          # every sweep runs from q = 0 down to p = -DEPTH (or a fraction of it)
# CPU time of this process: on a shared machine, load from other processes inflates wall
# time far more than it does this (the numbers are still per process, all threads summed)
CLOCK = time.process_time


def chain(n: int, compile: str | None = None) -> invimbed.BolzaProblem:
    """The chain of ``n`` pendulums (N = 2 n states, M = n torques) from sympy."""
    import sympy as sp

    t = sp.Symbol("t")
    phi = sp.symbols(f"phi1:{n + 1}")
    om = sp.symbols(f"omega1:{n + 1}")
    u = sp.symbols(f"u1:{n + 1}")
    f = list(om)
    for i in range(n):
        acc = -sp.sin(phi[i]) - C_DAMP * om[i] + u[i]
        if i > 0:
            acc -= K_SPRING * sp.sin(phi[i] - phi[i - 1])
        if i < n - 1:
            acc -= K_SPRING * sp.sin(phi[i] - phi[i + 1])
        f.append(acc)
    R = A_RUN * sum(1 - sp.cos(p) for p in phi) + RHO / 2 * sum(v ** 2 for v in u)
    T = sum(1 - sp.cos(p - 1) for p in phi) + sum(w ** 2 for w in om) / 2
    return invimbed.from_sympy(t, list(phi) + list(om), list(u), f, R, T, compile=compile)


def inputs(n: int) -> tuple[np.ndarray, invimbed.Constant]:
    x = np.concatenate([np.linspace(0.3, 0.8, n), np.linspace(-0.2, 0.2, n)])
    return x, invimbed.Constant(np.full(n, 0.1))


def sweep(problem: Any, x: np.ndarray, w: Any, K: int, steps: int) -> invimbed.ImbeddingResult:
    h = DEPTH / 20
    res = invimbed.solve_imbedding(problem, x, [-h * steps], control=w, closure="jet",
                                   order=K, estimate_error=False, method="rk4", step=h)
    if not res.success:
        raise RuntimeError(f"sweep failed: {res.message}")
    return res


class TaylorTimer:
    """Wraps a provider's ``taylor`` to add up the time spent in it."""

    def __init__(self, provider: Any) -> None:
        self.provider, self.inner, self.total = provider, provider.taylor, 0.0

    def __enter__(self) -> "TaylorTimer":
        def timed(*args: Any, **kw: Any) -> np.ndarray:
            t0 = CLOCK()
            try:
                return self.inner(*args, **kw)
            finally:
                self.total += CLOCK() - t0

        self.provider.taylor = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.provider.taylor       # back to the class's method


def case(N: int, K: int, steps: int, repeats: int, compile: str | None) -> dict[str, Any]:
    n = N // 2
    x, w = inputs(n)
    problem = chain(n, compile)
    provider = problem.provider(N, n)
    t0 = CLOCK()
    first = sweep(problem, x, w, K, 1)             # generates the code
    t_first = CLOCK() - t0
    best = {}
    nfev = {}
    for _ in range(repeats):                       # interleaved: load falls on both
        for s in (steps, 2 * steps):
            t0 = CLOCK()
            res = sweep(problem, x, w, K, s)
            dt = CLOCK() - t0
            best[s] = min(best.get(s, np.inf), dt)
            nfev[s] = res.nfev
    per_eval = (best[2 * steps] - best[steps]) / (nfev[2 * steps] - nfev[steps])
    if per_eval <= 0:                              # timing noise: fall back to the average
        per_eval = best[2 * steps] / nfev[2 * steps]
    with TaylorTimer(provider) as timer:
        t0 = CLOCK()
        sweep(problem, x, w, K, 2 * steps)
        total = CLOCK() - t0
    c_z, c_v = comb(N + K, K), comb(N + K + 1, K + 1)
    return {
        "N": N, "K": K, "M": n, "state": N * c_z + c_v + n * c_v, "c_z": c_z, "c_v": c_v,
        "nfev": nfev[2 * steps], "per_eval": per_eval,
        "codegen": max(t_first - first.nfev * per_eval, 0.0),
        "codegen_calls": getattr(provider, "codegen_calls", None),
        "derivs": timer.total / total,
    }


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="fewer steps and one timed repeat (about 20 s)",
                   repeats_help="timed repeats (best kept; default 5, 1 with --quick)")
    ap.add_argument("--steps", type=int, default=None, help="rk4 steps S of the shorter sweep")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8], help="state sizes N (even)")
    ap.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4], help="jet orders K")
    ap.add_argument("--compile", choices=["numpy", "numba"], default="numpy",
                    help="code generated by the sympy provider")
    args = ap.parse_args(argv)
    repeats = repeats_of(args, full=5)
    steps = args.steps or (4 if args.quick else 10)
    compile = None if args.compile == "numpy" else "numba"
    if any(N % 2 for N in args.sizes):
        ap.error("--sizes must be even (N = 2 n for n pendulums)")
    start = time.perf_counter()
    print("invimbed benchmark: jet sweep cost against the order K and the state size N")
    print(header("sympy", *(["numba"] if compile == "numba" else []), argv=argv))
    print(f"problem  : chain of N/2 coupled pendulums, M = N/2 constant torques (dJ/du carried), "
          f"from_sympy(compile={compile!r})")
    print(f"sweep    : closure='jet', estimate_error=False, method='rk4', h = {DEPTH / 20}; "
          f"S = {steps} and 2S = {2 * steps} steps (4 evaluations each); best of {repeats}")
    print()
    head = (f"{'N':>3} {'K':>2} {'C(N+K,K)':>9} {'state':>7} {'per eval':>10} {'per step':>10} "
            f"{'x K=1':>6} {'derivs':>7} {'codegen':>9} {'requests':>8}")
    print(head)
    print("-" * len(head))
    rows = []
    for N in args.sizes:
        base = None
        for K in args.orders:
            r = case(N, K, steps, repeats, compile)
            base = base or r["per_eval"]
            rows.append(r)
            print(f"{N:>3} {K:>2} {r['c_z']:>9} {r['state']:>7} {r['per_eval'] * 1e3:>7.3f} ms "
                  f"{4 * r['per_eval'] * 1e3:>7.3f} ms {r['per_eval'] / base:>6.1f} "
                  f"{100 * r['derivs']:>6.0f}% {r['codegen']:>7.2f} s {r['codegen_calls']:>8}",
                  flush=True)
        print()
    print("times: CPU time of this process (time.process_time), not wall time.")
    print("per eval: one right-hand-side evaluation of the sweep,")
    print("  (t_2S - t_S) / (nfev_2S - nfev_S); per step: one rk4 step (4 evaluations).")
    print("state: numbers carried (Z, V, dJ/du). x K=1: per eval over K = 1's at the same N.")
    print("derivs: share of a sweep spent in the provider's generated code (the rest: the")
    print("jet's polynomial products). codegen: one-time code generation of the first sweep;")
    print("requests: generated functions (provider.codegen_calls).")
    if hasattr(os, "getloadavg"):
        print("load avg : %.2f %.2f %.2f (1, 5, 15 min) at the end" % os.getloadavg())
    print(f"total benchmark time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
