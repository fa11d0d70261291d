"""Time to the optimum: optimize_control with imbedding gradients vs adjoint gradients.

Problem: a linear-quadratic problem with a piecewise-constant control on ``K`` equal
intervals of ``[p, q] = [-2, 0]``,

    dz/dt = A z + B u,   R = (z^T z + rho u^T u) / 2,   T = z^T z / 2,

``z`` of size ``N`` (a chain of damped oscillators, ``A`` fixed by ``N``), ``u`` of size 1,
all derivatives written by hand and vectorised. ``J(w)`` is quadratic in the ``K``
control values ``w``; its minimiser is computed in closed form (Van Loan block
exponentials per interval, then one linear solve), independent of invimbed.

For each ``(N, K, B)`` (``B`` inputs ``x``, the objective being the mean of ``J`` over them)
it runs ``invimbed.optimize_control(..., method="L-BFGS-B")`` from ``w = 0`` with
``gradient="imbedding"`` (one jet-1 sweep per evaluation, exact for LQ problems) and
``gradient="adjoint"`` (a forward and a backward solve per evaluation), same solver
tolerances and the same optimiser tolerance, and prints the wall time (best of
``--repeats``, interleaved), the evaluations, the right-hand-side evaluations of the
solvers, the distance of each optimum from the closed form and the time ratio
(adjoint / imbedding: ``> 1`` means the imbedding gradient is faster), in wall-clock
and in process CPU time (steadier on a shared machine).

Run:  python benchmarks/bench_optimize.py [--quick] [--repeats R] [--rtol 1e-8] [--atol 1e-10]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
from scipy.linalg import expm

import invimbed
from _machine import arguments, header, repeats_of
from invimbed._control.optimize import optimize_control   # invimbed.optimize_control once exported

P, Q_END, RHO = -2.0, 0.0, 0.1


def lq_data(N: int) -> tuple[np.ndarray, np.ndarray]:
    """A chain of N/2 damped oscillators (N even) or a damped chain (N odd), the control
    pushing the last state."""
    A = np.zeros((N, N))
    for i in range(N - 1):
        A[i, i + 1] = 1.0
        A[i + 1, i] = -1.0
    A -= 0.1 * np.eye(N)
    B = np.zeros((N, 1))
    B[-1, 0] = 1.0
    return A, B


def make_problem(N: int) -> invimbed.BolzaProblem:
    A, B = lq_data(N)
    M = 1

    def zeros(*shape):
        return lambda t, z, th: np.zeros((z.shape[0],) + shape)

    derivs = {
        "f_z": lambda t, z, th: np.broadcast_to(A, (z.shape[0], N, N)).copy(),
        "f_theta": lambda t, z, th: np.broadcast_to(B, (z.shape[0], N, M)).copy(),
        "f_zz": zeros(N, N, N), "f_ztheta": zeros(N, N, M), "f_zzz": zeros(N, N, N, N),
        "f_zztheta": zeros(N, N, N, M),
        "R_z": lambda t, z, th: z.copy(), "R_theta": lambda t, z, th: RHO * th,
        "R_zz": lambda t, z, th: np.broadcast_to(np.eye(N), (z.shape[0], N, N)).copy(),
        "R_ztheta": zeros(N, M), "R_zzz": zeros(N, N, N), "R_zztheta": zeros(N, N, M),
        "T_z": lambda z: z.copy(),
        "T_zz": lambda z: np.broadcast_to(np.eye(N), (z.shape[0], N, N)).copy(),
        "T_zzz": lambda z: np.zeros((z.shape[0], N, N, N)),
    }
    return invimbed.BolzaProblem(
        lambda t, z, th: z @ A.T + th @ B.T,
        lambda t, z, th: 0.5 * (np.sum(z * z, axis=1) + RHO * np.sum(th * th, axis=1)),
        lambda z: 0.5 * np.sum(z * z, axis=1),
        q=Q_END, derivatives=derivs, vectorized=True)


def closed_form_optimum(N: int, K: int, X: np.ndarray) -> np.ndarray:
    """``argmin_w mean_b J(w; x_b)`` by Van Loan's block exponential on each interval."""
    A, B = lq_data(N)
    M = 1
    knots = np.linspace(P, Q_END, K + 1)
    nv = N + K * M
    F = np.zeros((N + M, N + M))
    F[:N, :N], F[:N, N:] = A, B
    Qa = np.zeros((N + M, N + M))
    Qa[:N, :N], Qa[N:, N:] = np.eye(N), RHO * np.eye(M)
    H = np.zeros((nv, nv))
    L = np.hstack([np.eye(N), np.zeros((N, K * M))])
    for k in range(K):
        big = expm(np.block([[-F.T, Qa], [np.zeros_like(F), F]]) * (knots[k + 1] - knots[k]))
        Phi = big[N + M:, N + M:]
        E = np.zeros((M, nv))
        E[:, N + k * M:N + (k + 1) * M] = np.eye(M)
        Y = np.vstack([L, E])
        H += Y.T @ (Phi.T @ big[:N + M, N + M:]) @ Y
        L = Phi[:N] @ Y
    H += L.T @ L
    H = 0.5 * (H + H.T)
    return np.linalg.solve(H[N:, N:], -H[N:, :N] @ X.mean(axis=0))


def run_case(N: int, K: int, B: int, repeats: int, tol: dict, gtol: float) -> dict[str, Any]:
    problem = make_problem(N)
    rng = np.random.default_rng(N * 100 + K * 10 + B)
    X = rng.uniform(-1.0, 1.0, size=(B, N))
    w_ref = closed_form_optimum(N, K, X)
    control = invimbed.PiecewiseConstant(np.linspace(P, Q_END, K + 1), np.zeros(K))
    options = {"gtol": gtol, "ftol": 1e-15, "maxiter": 500}
    x = X if B > 1 else X[0]
    calls = {g: (lambda g=g: optimize_control(problem, x, control, gradient=g, options=options,
                                              **tol))
             for g in ("imbedding", "adjoint")}
    best = {g: np.inf for g in calls}
    best_cpu = {g: np.inf for g in calls}
    results = {g: fn() for g, fn in calls.items()} if repeats > 1 else {}   # warm-up
    for _ in range(repeats):
        for g, fn in calls.items():
            t0, c0 = time.perf_counter(), time.process_time()
            results[g] = fn()
            best[g] = min(best[g], time.perf_counter() - t0)
            best_cpu[g] = min(best_cpu[g], time.process_time() - c0)
    row = {"N": N, "K": K, "B": B}
    scale = max(np.abs(w_ref).max(), 1e-300)
    for g, res in results.items():
        row[g] = {"time": best[g], "cpu": best_cpu[g], "nit": int(res.nit),
                  "nsolve": int(res.nsolve), "nfev_solver": int(res.nfev_solver),
                  "success": bool(res.success),
                  "err": float(np.abs(res.x - w_ref).max() / scale)}
    row["ratio"] = best["adjoint"] / best["imbedding"]
    row["cpu_ratio"] = best_cpu["adjoint"] / best_cpu["imbedding"]
    return row


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'N':>3} {'K':>3} {'B':>3}  {'gradient':<10} {'wall [s]':>9} {'cpu [s]':>8} "
            f"{'nit':>4} {'solves':>6} {'rhs evals':>9} {'|w - w*|/|w*|':>13}   "
            f"{'adjoint/imbedding wall, cpu':>27}")
    lines = [head, "-" * len(head)]
    for r in rows:
        for g in ("imbedding", "adjoint"):
            c = r[g]
            ratio = f"{r['ratio']:.2f}, {r['cpu_ratio']:.2f}" if g == "imbedding" else ""
            flag = "" if c["success"] else " (not converged)"
            lines.append(f"{r['N']:>3} {r['K']:>3} {r['B']:>3}  {g:<10} {c['time']:>9.3f} "
                         f"{c['cpu']:>8.3f} {c['nit']:>4} {c['nsolve']:>6} {c['nfev_solver']:>9} "
                         f"{c['err']:>13.1e}   {ratio:>27}{flag}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="one small case (N = 2, K = 4, B = 1), one timed repeat",
                       repeats_help="timed repeats per case, best taken (default 3, 1 with "
                                    "--quick)")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    parser.add_argument("--gtol", type=float, default=1e-9,
                        help="L-BFGS-B projected-gradient tolerance (both gradients)")
    args = parser.parse_args(argv)
    repeats = repeats_of(args, full=3)
    if repeats < 1:
        parser.error(f"--repeats must be at least 1, got {repeats}")
    cases = [(2, 4, 1)] if args.quick else [(2, 4, 1), (2, 16, 1), (4, 8, 1), (4, 8, 16),
                                            (8, 8, 1)]
    print("invimbed benchmark: optimize_control, imbedding vs adjoint gradients")
    print(header(argv=argv))
    print(f"problem  : LQ, dz/dt = A z + B u on [p, q] = [{P:g}, {Q_END:g}], u piecewise "
          f"constant on K intervals, R = (|z|^2 + {RHO:g}|u|^2)/2, T = |z|^2/2")
    print(f"optimiser: L-BFGS-B from w = 0, gtol = {args.gtol:g}; solves RK45 rtol = "
          f"{args.rtol:g}, atol = {args.atol:g}; best of {repeats} timed repeat(s)")
    print()
    t0 = time.perf_counter()
    tol = dict(rtol=args.rtol, atol=args.atol)
    rows = [run_case(N, K, B, repeats, tol, args.gtol) for N, K, B in cases]
    print(format_table(rows))
    print("wall, cpu: wall-clock and process CPU time of the whole optimisation (including the")
    print("final forward trajectory), best of the repeats; on a shared machine the CPU time is")
    print("the steadier of the two;")
    print("solves: objective evaluations (one solve each); rhs evals: right-hand-side evaluations")
    print("of all solves; |w - w*|/|w*|: max distance from the closed-form optimum, relative.")
    print(f"total benchmark time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
