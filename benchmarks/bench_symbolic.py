"""Symbolic derivatives: one-time code generation, and evaluation against finite differences.

Problem: two pendulums coupled through ``sin(phi1 - phi2)``, driven by torques,

    z = [phi1, phi2, omega1, omega2],   theta = [u1, u2]   (N = 4, M = 2),
    d phi_i / dt   = omega_i,
    d omega_1 / dt = -sin(phi1) - k sin(phi1 - phi2) - c omega1 + u1,
    d omega_2 / dt = -sin(phi2) - k sin(phi2 - phi1) - c omega2 + u2 cos(phi2),
    R = a (2 - cos phi1 - cos phi2) + rho |u|^2 / 2 + s omega1 omega2 u1,
    T = log(1 + |z - z_target|^2),

written once in sympy (for :class:`~invimbed._core.derivatives.symbolic.SympyProvider`) and
once in numpy (for the finite-difference provider). Every derivative order is non-zero
(``T`` is dense at every order).

"Order k" means everything a jet sweep requests at each step when it needs derivatives
of order ``k`` (a jet of order ``K = k - 1``, or ``K = k - 2`` with its error estimate):
the Taylor coefficients up to degree ``k`` of ``f``, ``R`` and ``T``, and those up to
degree ``k - 1`` of the ``theta``-gradients of ``f`` and ``R`` (5 requests).

Measured:

1. code generation, once per order, on a fresh provider: symbolic differentiation,
   ``sympy.cse`` over each request, ``sympy.lambdify`` to numpy (and, when numba is
   installed, the ``numba.njit`` compilation, timed on the first call);
2. evaluation of the 5 requests on the same batch of ``B`` points: the lambdified numpy
   code, the numba-compiled code, and the finite-difference provider (nested central
   differences of the numpy functions, then the same Taylor layout); their ratios, and
   the largest difference between the symbolic and the difference values (the
   differences' error: it grows with the order; order 4 is beyond them).

Run:  python benchmarks/bench_symbolic.py [--quick] [--repeats R]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

import invimbed
from _machine import arguments, best_of, header, repeats_of
from invimbed._core.derivatives import DerivativeOrderError
from invimbed._core.derivatives.multiindex import n_coefficients

K_SPRING, C_DAMP, A_RUN, RHO, S_CROSS = 0.5, 0.1, 0.2, 0.05, 0.1
Z_TARGET = np.array([1.0, 1.0, 0.0, 0.0])
N, M = 4, 2


# -- the problem in sympy ------------------------------------------------------------
def sympy_args() -> tuple:
    import sympy as sp

    t = sp.Symbol("t")
    p1, p2, w1, w2 = z = sp.symbols("phi1 phi2 omega1 omega2")
    u1, u2 = th = sp.symbols("u1 u2")
    f = [w1, w2,
         -sp.sin(p1) - K_SPRING * sp.sin(p1 - p2) - C_DAMP * w1 + u1,
         -sp.sin(p2) - K_SPRING * sp.sin(p2 - p1) - C_DAMP * w2 + u2 * sp.cos(p2)]
    R = (A_RUN * (2 - sp.cos(p1) - sp.cos(p2)) + RHO / 2 * (u1 ** 2 + u2 ** 2)
         + S_CROSS * w1 * w2 * u1)
    T = sp.log(1 + sum((zi - float(yi)) ** 2 for zi, yi in zip(z, Z_TARGET)))
    return t, list(z), list(th), f, R, T


# -- the same problem in numpy ---------------------------------------------------------
def f_np(t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    p1, p2, w1, w2 = z.T
    return np.stack([w1, w2,
                     -np.sin(p1) - K_SPRING * np.sin(p1 - p2) - C_DAMP * w1 + th[:, 0],
                     -np.sin(p2) - K_SPRING * np.sin(p2 - p1) - C_DAMP * w2
                     + th[:, 1] * np.cos(p2)], axis=1)


def R_np(t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    return (A_RUN * (2 - np.cos(z[:, 0]) - np.cos(z[:, 1])) + RHO / 2 * np.sum(th ** 2, axis=1)
            + S_CROSS * z[:, 2] * z[:, 3] * th[:, 0])


def T_np(z: np.ndarray) -> np.ndarray:
    return np.log1p(np.sum((z - Z_TARGET) ** 2, axis=1))


# -- what is timed -------------------------------------------------------------------
def requests(k: int) -> list[tuple[str, int, int]]:
    """``(which, degree, dth)`` of the Taylor requests of order ``k``."""
    return [("f", k, 0), ("R", k, 0), ("T", k, 0), ("f", k - 1, 1), ("R", k - 1, 1)]


def evaluate(prov: Any, k: int, z: np.ndarray, th: np.ndarray) -> list[np.ndarray]:
    return [prov.taylor(w, 0.1, z, th, deg, dth=dth) for w, deg, dth in requests(k)]


def best_time(fn: Callable[[], Any], repeats: int, min_time: float) -> float:
    """Best time per call over ``repeats`` runs of ``number`` calls (``number`` chosen so
    that one run lasts at least ``min_time``)."""
    fn()  # warm-up
    number, elapsed = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time or number >= 10 ** 6:
            break
        number *= max(2, int(min_time / max(elapsed, 1e-9)))
    best = elapsed / number
    if repeats > 1:
        best = min(best, best_of(fn, repeats - 1, number=number)[0])
    return best


def fmt_time(s: float | None) -> str:
    if s is None or not np.isfinite(s):
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:8.1f} us"
    if s < 1.0:
        return f"{s * 1e3:8.2f} ms"
    return f"{s:8.2f} s "


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="orders 1..3, B = 1 and 64, one timed repeat (a smoke test)",
                       repeats_help="timed repeats per case, the best is kept (default 5, "
                                    "quick 1)")
    args = parser.parse_args(argv)
    # the numba column times a cold compile: generated code goes to a fresh, empty cache
    os.environ["INVIMBED_CACHE"] = tempfile.mkdtemp(prefix="invimbed-bench-")
    try:
        from invimbed._core.derivatives.symbolic import SympyProvider
        import sympy  # noqa: F401
    except ImportError:
        print("this benchmark needs sympy: pip install invimbed[symbolic]")
        return 1
    try:
        import numba
    except ImportError:
        numba = None
    orders = (1, 2, 3) if args.quick else (1, 2, 3, 4)
    batches = (1, 64) if args.quick else (1, 64, 1024)
    repeats = repeats_of(args, full=5)
    min_time = 0.02 if args.quick else 0.1

    print(header("sympy", "numba", argv=argv))
    print(f"problem  : coupled pendulums, N = {N}, M = {M}; repeats = {repeats}, "
          f"min. run {min_time} s")
    print()

    # 1. code generation, once per order, fresh providers
    print("Code generation (one time, per order; fresh provider each row)")
    head = f"{'k':>2} {'coeffs':>7} {'exprs':>6} {'sympy diff+cse+lambdify':>24}"
    if numba:
        head += f" {'numba diff+cse+njit+1st call':>29}"
    print(head)
    z1 = np.array([[0.8, -0.4, 0.3, 0.1]])
    th1 = np.array([[0.2, -0.1]])
    provs: dict[str, dict[int, Any]] = {"numpy": {}, "numba": {}}
    for k in orders:
        t0 = time.perf_counter()
        prov = SympyProvider(*sympy_args())
        evaluate(prov, k, z1, th1)
        gen = time.perf_counter() - t0
        provs["numpy"][k] = prov
        n_exprs = sum(c.n_values for c in prov._compiled.values())
        n_coef = sum((N if w == "f" else 1) * (M if dth else 1) * n_coefficients(N, deg)
                     for w, deg, dth in requests(k))
        row = f"{k:>2} {n_coef:>7} {n_exprs:>6} {fmt_time(gen):>24}"
        if numba:
            t0 = time.perf_counter()
            provn = SympyProvider(*sympy_args(), compile="numba")
            evaluate(provn, k, z1, th1)
            row += f" {fmt_time(time.perf_counter() - t0):>29}"
            provs["numba"][k] = provn
        print(row)
    print("  coeffs: Taylor coefficients returned; exprs: distinct non-zero expressions generated")
    print()

    # 2. evaluation against finite differences, same batch
    fd = invimbed.BolzaProblem(f_np, R_np, T_np, vectorized=True,
                               derivatives="finite-differences").provider(N, M)
    print("Evaluation of the order-k requests on one batch (time per call, best of repeats)")
    cols = [f"{'B':>5}", f"{'k':>2}", f"{'sympy numpy':>12}"]
    if numba:
        cols.append(f"{'sympy numba':>12}")
    cols += [f"{'finite diff.':>12}", f"{'FD / numpy':>10}"]
    if numba:
        cols.append(f"{'FD / numba':>10}")
    cols.append(f"{'max |sym - FD|':>14}")
    print(" ".join(cols))
    rng = np.random.default_rng(0)
    for B in batches:
        z = np.array([0.8, -0.4, 0.3, 0.1]) + 0.3 * rng.standard_normal((B, N))
        th = np.array([0.2, -0.1]) + 0.3 * rng.standard_normal((B, M))
        for k in orders:
            prov = provs["numpy"][k]
            t_np = best_time(lambda: evaluate(prov, k, z, th), repeats, min_time)
            sym_vals = evaluate(prov, k, z, th)
            t_nb = None
            if numba:
                provn = provs["numba"][k]
                t_nb = best_time(lambda: evaluate(provn, k, z, th), repeats, min_time)
            try:
                fd_vals = evaluate(fd, k, z, th)
                t_fd = best_time(lambda: evaluate(fd, k, z, th), repeats, min_time)
                err = max(float(np.max(np.abs(a - b))) for a, b in zip(sym_vals, fd_vals))
                err_s = f"{err:14.1e}"
            except DerivativeOrderError:
                t_fd, err_s = None, f"{'n/a (order>3)':>14}"
            row = [f"{B:>5}", f"{k:>2}", f"{fmt_time(t_np):>12}"]
            if numba:
                row.append(f"{fmt_time(t_nb):>12}")
            row.append(f"{fmt_time(t_fd):>12}")
            row.append(f"{t_fd / t_np:10.2f}" if t_fd else f"{'n/a':>10}")
            if numba:
                row.append(f"{t_fd / t_nb:10.2f}" if t_fd else f"{'n/a':>10}")
            row.append(err_s)
            print(" ".join(row))
    print("  FD / x > 1: the symbolic code is x times faster than finite differences.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
