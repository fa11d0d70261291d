"""LQR: the imbedding sweep against the Riccati ODE and the algebraic Riccati equation.

Problem: a chain of ``n`` unit masses joined by unit springs, with
light damping, pushed by forces on the first and the last mass,

    z = (positions, velocities)  (N = 2 n),   u: M = 1 (n = 1) or 2 forces,
    dz/dt = A z + B u,   A = [[0, I], [-K, -0.1 I]],   K = tridiag(-1, 2, -1),
    J = int_p^q (|z|^2 + u^T R u) / 2 dt + |z(q)|^2 / 2,   R = 0.5 I,

from sympy (``invimbed.from_sympy``), for N = 2, 8, 32. Depths ``s = q - p`` in
{0.5, 1, 2, 5, 10, 30}; the longest is compared with ``solve_continuous_are``.

Compared, in one run, at the same tolerances (RK45, ``rtol``, ``atol``):

* ``Riccati, full P`` / ``Riccati, one x``: ``solve_optimal`` by default, which detects
  the LQ structure (symbolically here) and takes the Riccati path: the matrix Riccati
  equation with ``solve_ivp``'s solver, all depths from its dense output, plus the
  closed-loop transport of ``z(q)`` (``2 N^2 + 2 N + 1`` unknowns);
* ``Riccati, calls``: the same problem as plain vectorised callables (detected by the
  probe; finite differences are never taken), the N unit vectors;

* ``sweep, full P``: ``solve_optimal(problem, eye(N), depths, control_affine=True,
  estimate_error=False, linear_quadratic=False)`` (the jet sweep; at N = 32 only with
  ``--n32-sweep``) -- a batch of the N unit vectors, whose adjoints are the
  columns of ``P(p)`` (the jet of order 1 is exact for LQ problems, so the error
  estimate, which would carry order 2 as well, is switched off);
* ``sweep, one x``: the same for one input ``x`` (a fixed random unit vector): the value
  ``x^T P x / 2``, the adjoint ``P x`` and the feedback gain ``-R^-1 B^T P`` at every
  depth -- all a controller needs;
* ``Riccati ODE``: ``solve_ivp`` on ``-dP/dp = A^T P + P A - P B R^-1 B^T P + Q``
  (N^2 unknowns, read at the same depths);
* ``CARE``: ``scipy.linalg.solve_continuous_are`` (one call; the infinite horizon).

Printed per N: CPU times (best of the repeats, ``time.process_time``; the first call,
which generates the code, separately), ``nfev``, time ratios against the Riccati ODE and
against CARE, and the agreement: the largest relative difference over the depths of
``P`` (full P), of ``P x`` and of the gain (one x) from the Riccati ODE, and at
``s = 30`` from CARE.

The sweep's cost per evaluation grows steeply with N (``solve_optimal`` composes the
Taylor coefficients of ``f`` and ``R`` in ``(z, u)`` with the feedback's jet: polynomial
products over ``C(N + 2, 2)`` coefficients per batch row). At N = 32 a full-P sweep
(32 inputs) takes far more than a minute, so only ``sweep, one x`` is run there (pass
``--n32-full-p`` to run it anyway); its cost per evaluation is printed for every case.

BLAS runs on one thread unless ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` is set (see
benchmarks/bench_jets.py: on a busy machine threaded BLAS made the sweep's small
products many times slower).

Run:  python benchmarks/bench_lqr.py [--quick] [--repeats R] [--n32-sweep] [--n32-full-p]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402
from scipy.linalg import solve_continuous_are  # noqa: E402

import invimbed  # noqa: E402
from _machine import arguments, header, repeats_of  # noqa: E402

HORIZONS = np.array([0.5, 1.0, 2.0, 5.0, 10.0, 30.0])
CLOCK = time.process_time


def chain(n: int) -> dict[str, np.ndarray]:
    K = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-K, -0.1 * np.eye(n)]])
    M = 1 if n == 1 else 2
    B = np.zeros((2 * n, M))
    B[n, 0] = 1.0
    B[2 * n - 1, M - 1] = 1.0
    N = 2 * n
    return dict(A=A, B=B, Q=np.eye(N), R=0.5 * np.eye(M), PT=np.eye(N))


def lq_problem(A, B, Q, R, PT) -> invimbed.BolzaProblem:
    import sympy as sp

    N, M = B.shape
    t = sp.Symbol("t")
    z = sp.Matrix(sp.symbols(f"z1:{N + 1}"))
    u = sp.Matrix(sp.symbols(f"u1:{M + 1}"))
    f = sp.Matrix(A) * z + sp.Matrix(B) * u
    running = ((z.T * sp.Matrix(Q) * z)[0] + (u.T * sp.Matrix(R) * u)[0]) / 2
    terminal = (z.T * sp.Matrix(PT) * z)[0] / 2
    return invimbed.from_sympy(t, list(z), list(u), list(f), running, terminal)


def riccati_ode(A, B, Q, R, PT, rtol, atol):
    N = A.shape[0]
    BRB = B @ np.linalg.solve(R, B.T)

    def rhs(s, y):
        P = y.reshape(N, N)
        return (A.T @ P + P @ A - P @ BRB @ P + Q).ravel()

    sol = solve_ivp(rhs, (0.0, HORIZONS[-1]), PT.ravel(), t_eval=HORIZONS, rtol=rtol,
                    atol=atol)
    if not sol.success:
        raise RuntimeError(sol.message)
    return np.moveaxis(sol.y.reshape(N, N, -1), -1, 0), sol.nfev


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = CLOCK()
    out = fn()
    return CLOCK() - t0, out


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def case(n: int, repeats: int, rtol: float, atol: float, full_p: bool,
         jet: bool = True) -> dict[str, Any]:
    d = chain(n)
    N, M = d["B"].shape
    x = np.random.default_rng(n).normal(size=N)
    x /= np.linalg.norm(x)
    problem = lq_problem(**d)
    depths = -HORIZONS

    def sweep(inputs, lq=False, pb=problem):
        res = invimbed.solve_optimal(pb, inputs, depths, n_controls=M,
                                     control_affine=True, rtol=rtol, atol=atol,
                                     estimate_error=False, linear_quadratic=lq)
        if not res.success:
            raise RuntimeError(res.message)
        assert res.linear_quadratic is bool(lq is None)
        return res

    A_, B_, Q_, R_, PT_ = (d[k] for k in ("A", "B", "Q", "R", "PT"))
    plain = invimbed.BolzaProblem(lambda t, z, u: z @ A_.T + u @ B_.T,
                                  lambda t, z, u: 0.5 * (np.einsum("bi,ij,bj->b", z, Q_, z)
                                                         + np.einsum("bi,ij,bj->b", u, R_, u)),
                                  lambda z: 0.5 * np.einsum("bi,ij,bj->b", z, PT_, z),
                                  vectorized=True)
    cases: dict[str, Callable[[], Any]] = {
        "Riccati, full P": lambda: sweep(np.eye(N), None),
        "Riccati, one x": lambda: sweep(x, None),
        "Riccati, calls": lambda: sweep(np.eye(N), None, plain)}
    if jet:
        cases["sweep, one x"] = lambda: sweep(x)
    if jet and full_p:
        cases["sweep, full P"] = lambda: sweep(np.eye(N))
    cases["Riccati ODE"] = lambda: riccati_ode(d["A"], d["B"], d["Q"], d["R"], d["PT"],
                                              rtol, atol)
    cases["CARE"] = lambda: solve_continuous_are(d["A"], d["B"], d["Q"], d["R"])
    # first calls: code generation (a one-step sweep) and scipy's own set-up
    first = {k: timed(fn)[0] for k, fn in cases.items() if not k.startswith("sweep")}
    first["sweep"] = timed(lambda: invimbed.solve_optimal(
        problem, x, [-0.01], n_controls=M, control_affine=True, method="rk4", step=0.01,
        estimate_error=False, linear_quadratic=False))[0] if jet else 0.0
    best = {k: np.inf for k in cases}
    out: dict[str, Any] = {}
    for _ in range(repeats):                                  # interleaved
        for k, fn in cases.items():
            dt, out[k] = timed(fn)
            best[k] = min(best[k], dt)
    P_ode, nfev_ode = out["Riccati ODE"]
    P_care = out["CARE"]
    gain_ode = np.stack([-np.linalg.solve(d["R"], d["B"].T @ P) for P in P_ode])
    agree = {"Riccati ODE": (None, None, rel(P_ode[-1], P_care))}
    nfev = {"Riccati ODE": nfev_ode, "CARE": None}
    for k in cases:
        if k.endswith("one x"):
            one = out[k]
            agree[k] = (max(rel(one.adjoint[i], P_ode[i] @ x) for i in range(len(HORIZONS))),
                        max(rel(one.feedback_jacobian[i], gain_ode[i])
                            for i in range(len(HORIZONS))),
                        rel(one.adjoint[-1], P_care @ x))
            nfev[k] = one.nfev
        elif k.endswith("full P") or k.endswith("calls"):
            full = out[k]
            P_sw = np.swapaxes(full.adjoint, 1, 2)           # column j = adjoint at e_j
            agree[k] = (max(rel(P_sw[i], P_ode[i]) for i in range(len(HORIZONS))),
                        max(rel(full.feedback_jacobian[i, 0], gain_ode[i])
                            for i in range(len(HORIZONS))),
                        rel(P_sw[-1], P_care))
            nfev[k] = full.nfev
    return dict(N=N, M=M, first=first, best=best, agree=agree, nfev=nfev)


def fmt(v: float | None, spec: str = ".1e") -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="N = 2 and 8 only, one timed repeat",
                   repeats_help="timed repeats (best kept; default 3, 1 with --quick)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--atol", type=float, default=1e-10)
    ap.add_argument("--n32-sweep", action="store_true",
                    help="also the jet sweep (linear_quadratic=False) at N = 32: minutes")
    ap.add_argument("--n32-full-p", action="store_true",
                    help="also the full-P sweep (32 inputs) at N = 32: many minutes")
    args = ap.parse_args(argv)
    repeats = repeats_of(args, full=3)
    sizes = (1, 2, 4) if args.quick else (1, 2, 4, 16)
    start = time.perf_counter()
    print("invimbed benchmark: LQR by the imbedding sweep (solve_optimal) vs Riccati ODE vs CARE")
    print(header("sympy", argv=argv))
    print("problem  : chain of N/2 masses and springs, forces on the end masses, Q = I, "
          "R = 0.5 I, P_T = I")
    print(f"depths   : s = q - p in {HORIZONS.tolist()} (one solve covers all); RK45, "
          f"rtol = {args.rtol:g}, atol = {args.atol:g}; best of {repeats} (CPU time)")
    print()
    head = (f"{'N':>3} {'M':>2}  {'method':<14} {'nfev':>6} {'first [s]':>10} {'time [s]':>10} "
            f"{'/ODE':>8} {'/CARE':>9} {'ms/eval':>8}  {'P vs ODE':>9} {'gain':>8} {'s=30 vs CARE':>12}")
    print(head)
    print("-" * len(head))
    for n in sizes:
        full_p = n < 16 or args.n32_full_p
        jet = n < 16 or args.n32_sweep
        r = case(n, repeats if n < 16 else max(1, repeats // 3) if not jet else 1,
                 args.rtol, args.atol, full_p, jet)
        ode, care = r["best"]["Riccati ODE"], r["best"]["CARE"]
        for k in ("Riccati, full P", "Riccati, one x", "Riccati, calls", "sweep, full P",
                  "sweep, one x", "Riccati ODE", "CARE"):
            if k not in r["best"]:
                print(f"{r['N']:>3} {r['M']:>2}  {k:<14} {'(not run: see --n32-sweep, --n32-full-p)'}")
                continue
            t = r["best"][k]
            nf = r["nfev"].get(k)
            per = f"{1e3 * t / nf:8.2f}" if nf and k not in ("Riccati ODE", "CARE") else f"{'-':>8}"
            pa, ga, ca = r["agree"].get(k, (None, None, None))
            label = "P x vs ODE" if k.endswith("one x") else "P vs ODE"
            print(f"{r['N']:>3} {r['M']:>2}  {k:<14} {fmt(nf, 'd') if nf else '-':>6} "
                  f"{r['first'].get(k, r['first']['sweep'] if k.startswith('sweep') else r['best'][k]):>10.3f} {t:>10.4f} {t / ode:>8.1f} {t / care:>9.0f} {per}  "
                  f"{fmt(pa):>9} {fmt(ga):>8} {fmt(ca):>12}" + ("" if pa is None else
                                                                f"   ({label})"))
        print()
    print("first: CPU time of the first call (for the sweeps: a one-step sweep, which "
          "generates the code);\ntime: best of the timed calls (one at N = 32). /ODE, /CARE: time over the Riccati ODE's or "
          "CARE's (> 1: the sweep is slower).\nms/eval: sweep time per right-hand-side "
          "evaluation. P vs ODE: largest relative difference over\nthe depths from the "
          "Riccati ODE (of P for full P, of P x for one x); gain: of -R^-1 B^T P;\ns=30 vs "
          "CARE: relative difference of P (P x) at s = 30 from solve_continuous_are.")
    if hasattr(os, "getloadavg"):
        print("load avg : %.2f %.2f %.2f (1, 5, 15 min) at the end" % os.getloadavg())
    print(f"total benchmark time {time.perf_counter() - start:.1f} s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
