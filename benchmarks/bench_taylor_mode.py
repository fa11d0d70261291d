"""High-order jets: the time of one sweep step against the jet order, symbolic vs Taylor mode.

Problem (``N = 2 m`` states, one torque ``u``): a chain of ``m`` pendulums with the double
pendulum's rational coupling (``j = i + 1 mod m``, ``d_i = phi_i - phi_j / 2``),

    d phi_i / dt = v_i,
    d v_i / dt   = (-3 sin phi_i - 2 sin d_i (v_j^2 + v_i^2 cos d_i)) / (3 - cos 2 d_i)
                   + u sin(3 t) [i = 0],
    R = 0.1 sum phi_i^2 + 0.05 u^2 + 0.1 sum (1 - cos phi_i),
    T = sum (1 - cos(phi_i - 1)) + 0.05 sum v_i^2,

written in sympy (``invimbed.from_sympy``'s provider). A jet sweep of order ``K`` with its
error estimate (the default) asks, at every step, for the Taylor coefficients of ``f``
and ``R`` and of their ``theta``-gradients to degree ``K + 2`` (`JetClosure.coefficients`):
that set of four requests is "one step" here, at one input (``B = 1``, the usual sweep).

Columns, per ``(N, K)``:

* ``symbolic setup``: generating the four requests of degree ``K + 2`` (sympy
  differentiation, ``cse``, ``lambdify``) on a provider that already holds degree
  ``K + 1`` (what a sweep raising its order pays); ``-`` where the previous order's
  setup exceeded ``--budget`` seconds (it grows exponentially);
* ``symbolic step``: one step with the lambdified code;
* ``taylor step (numba)``, ``taylor step (numpy)``: one step in Taylor mode, the compiled
  kernel and the numpy evaluator (the tape is built once per problem: ``tape`` column of
  the header lines; the numba kernel is compiled once per machine and cached on disk);
* ``max |diff|``: the largest difference between the symbolic and the Taylor-mode
  coefficients, relative to the largest coefficient.

``--sweep`` times instead, in this (fresh) process, code generation included, the sweep
that asks for these orders: ``solve_imbedding(problem, x, depths, tol=1e-5, rtol=1e-10,
atol=1e-12)`` on a forced double pendulum (``tests/test_accuracy.py``'s, ``from_sympy``,
``N = 4``, ``M = 1``) at 9 depths with ``s <= 1``; ``--symbolic`` runs it with Taylor mode
off (``taylor_mode=False``: the symbolic derivatives of every order).

Run:  python benchmarks/bench_taylor_mode.py [--quick] [--budget SECONDS]
      python benchmarks/bench_taylor_mode.py --sweep [--symbolic]
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from _machine import arguments, header
from invimbed._core.derivatives.symbolic import SympyProvider


def chain(N: int) -> tuple:
    import sympy as sp

    m = N // 2
    t, u = sp.Symbol("t"), sp.Symbol("u")
    phi = sp.symbols(f"phi0:{m}")
    v = sp.symbols(f"v0:{m}")
    acc = []
    for i in range(m):
        j = (i + 1) % m
        d = phi[i] - phi[j] / 2
        a = (-3 * sp.sin(phi[i]) - 2 * sp.sin(d) * (v[j] ** 2 + v[i] ** 2 * sp.cos(d))) / (
            3 - sp.cos(2 * d))
        acc.append(a + (u * sp.sin(3 * t) if i == 0 else 0))
    R = (sp.Rational(1, 10) * sum(p ** 2 for p in phi) + sp.Rational(1, 20) * u ** 2
         + sp.Rational(1, 10) * sum(1 - sp.cos(p) for p in phi))
    T = sum(1 - sp.cos(p - 1) for p in phi) + sp.Rational(1, 20) * sum(w ** 2 for w in v)
    return t, list(phi) + list(v), [u], list(v) + acc, R, T


STEP = (("f", 0), ("R", 0), ("f", 1), ("R", 1))


def step(prov: Any, deg: int, z: np.ndarray, th: np.ndarray) -> list[np.ndarray]:
    return [prov.taylor(w, 0.3, z, th, deg, dth) for w, dth in STEP]


def per_call(fn, min_time: float = 0.2, repeats: int = 3) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            el = time.perf_counter() - t0
            if el >= min_time:
                break
        best = min(best, el / n)
    return best


def fmt(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


def double_pendulum(taylor_mode: bool | None, g: float = 3.0, amp: float = 2.0):
    """``_pendulums.forced_double_pendulum`` (``tests/test_accuracy.py``'s two-link
    pendulum) through a provider with the given ``taylor_mode``."""
    import invimbed
    from _pendulums import forced_double_pendulum

    prov = SympyProvider(*forced_double_pendulum(g, amp), taylor_mode=taylor_mode)
    return invimbed.BolzaProblem(prov.numeric("f"), prov.numeric("R"), prov.numeric("T"),
                                 derivatives=prov, vectorized=True)


def sweep(taylor_mode: bool | None) -> None:
    import invimbed

    t0, c0 = time.perf_counter(), time.process_time()
    problem = double_pendulum(taylor_mode)
    x, ctrl = [1.0, -0.5, 0.5, 0.0], invimbed.Constant([0.3])
    depths = -np.linspace(1 / 9, 1.0, 9)
    res = invimbed.solve_imbedding(problem, x, depths, control=ctrl, tol=1e-5, rtol=1e-10,
                                   atol=1e-12)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ref = invimbed.solve_adjoint(problem, x, depths, control=ctrl, rtol=1e-12, atol=1e-13)
    err = np.max(np.abs(res.value - ref.value) / np.maximum(1.0, np.abs(ref.value)))
    print(f"taylor_mode={taylor_mode}: {wall:.1f} s wall, {cpu:.1f} s CPU, from a fresh process "
          f"(code generation included); order {res.order}, status {res.status}, converged "
          f"{int(np.sum(res.converged))}/{depths.size}; worst value error {err:.1e}")
    print(res.message)


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="N = 2, 4 and K = 1..3 only", timed=False)
    ap.add_argument("--budget", type=float, default=60.0,
                    help="stop the symbolic column after an order whose setup took longer")
    ap.add_argument("--sweep", action="store_true", help="time the tol sweep (see above)")
    ap.add_argument("--symbolic", action="store_true", help="--sweep with Taylor mode off")
    args = ap.parse_args(argv)
    print(header("sympy", "numba", argv=argv))
    if args.sweep:
        sweep(False if args.symbolic else None)
        return 0
    Ns = (2, 4) if args.quick else (2, 4, 8)
    Ks = range(1, 4) if args.quick else range(1, 7)
    rng = np.random.default_rng(0)
    print()
    print("| N | K | degree | symbolic setup | symbolic step | taylor step (numba) | "
          "taylor step (numpy) | numba / symbolic | max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for N in Ns:
        args_ = chain(N)
        z = rng.uniform(-0.8, 0.8, size=(1, N))
        th = np.array([[0.3]])
        old = SympyProvider(*args_, taylor_mode=False)
        t0 = time.perf_counter()
        new = SympyProvider(*args_, taylor_mode=True)
        new._jets.engine = "numba"                # "auto" runs numpy where the kernel is not compiled
        for w, dth in STEP:
            new._jets.tape(w, "dual" if dth else "z")
        t_tape = time.perf_counter() - t0
        numpy_eval = SympyProvider(*args_, taylor_mode=True)
        numpy_eval._jets.engine = "numpy"
        step(new, 2, z, th)                       # loads (or compiles) the numba kernel
        print(f"| {N} | tape | | {fmt(t_tape)} (one per problem, all orders) | | | | | |")
        step(old, 2, z, th)                       # degrees 0..2 are paid before K = 1
        symbolic_ok = True
        for K in Ks:
            deg = K + 2
            t_setup = s_old = None
            ref = None
            if symbolic_ok:
                t0 = time.perf_counter()
                ref = step(old, deg, z, th)
                t_setup = time.perf_counter() - t0
                s_old = per_call(lambda: step(old, deg, z, th))
                symbolic_ok = t_setup < args.budget
            s_new = per_call(lambda: step(new, deg, z, th))
            s_np = per_call(lambda: step(numpy_eval, deg, z, th), min_time=0.1, repeats=1)
            got = step(new, deg, z, th)
            diff = "-"
            if ref is not None:
                big = max(float(np.abs(r).max()) for r in ref)
                diff = f"{max(float(np.abs(a - b).max()) for a, b in zip(got, ref)) / big:.1e}"
            ratio = f"{s_old / s_new:.1f}x" if s_old else "-"
            print(f"| {N} | {K} | {deg} | {fmt(t_setup)} | {fmt(s_old)} | {fmt(s_new)} | "
                  f"{fmt(s_np)} | {ratio} | {diff} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
