"""Finite-horizon LQR by invariant imbedding: the HJB sweep is the Riccati equation.

    dz/dt = A z + B u,   J(u; p, x) = int_p^q (z^T Q z + u^T R u) / 2 dt + z(q)^T P_T z(q) / 2.

``invimbed.solve_optimal`` sweeps the value function ``V(p, x)`` from ``p = q`` down to
every requested depth, choosing at each ``(p, x)`` the control that minimises
``R + grad_x V . f`` (Theorem 3, eq. (13)). For linear dynamics and quadratic losses
``V(p, x) = x^T P(p) x / 2`` exactly, the jet of order 1 carries it without truncation,
and ``P`` solves the Riccati differential equation

    -dP/dp = A^T P + P A - P B R^-1 B^T P + Q,   P(q) = P_T,

with the optimal feedback ``u = -R^-1 B^T P(p) x``. This script reads ``P(p)`` off the
sweep (the adjoint at ``x = e_j`` is ``P e_j``: one batch of N inputs), and prints it
next to

1. the Riccati ODE solved directly with ``scipy.integrate.solve_ivp`` on the matrix
   equation (same tolerances),
2. ``scipy.linalg.solve_continuous_are`` (the algebraic Riccati equation) for a long
   horizon, which ``P(p)`` approaches as ``q - p`` grows,
3. the feedback gain ``-R^-1 B^T P`` against the Jacobian of the sweep's feedback.

The sweep is forced here (``linear_quadratic=False``): by default ``solve_optimal``
recognises a linear-quadratic problem and solves the Riccati equation directly.

Default: a double integrator (N = 2, M = 1; a few seconds), without the error estimate
(``estimate_error=False``: order 1 is exact here, and the estimate carries order 2
alongside, which doubles the cost). ``--full``: more depths, the error estimate (it is
zero), and a chain of four masses and springs (N = 8, M = 2; about a minute).

Run:  python examples/lqr.py [--full]
"""

import argparse
import time

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from scipy.linalg import solve_continuous_are

import invimbed

RTOL, ATOL = 1e-10, 1e-12


def lq_problem(A, B, Q, R, PT):
    """The LQ problem from sympy (exact derivatives; order 1 needs no more than 2)."""
    N, M = B.shape
    t = sp.Symbol("t")
    z = sp.Matrix(sp.symbols(f"z1:{N + 1}"))
    u = sp.Matrix(sp.symbols(f"u1:{M + 1}"))
    f = sp.Matrix(A) * z + sp.Matrix(B) * u
    running = ((z.T * sp.Matrix(Q) * z)[0] + (u.T * sp.Matrix(R) * u)[0]) / 2
    terminal = (z.T * sp.Matrix(PT) * z)[0] / 2
    return invimbed.from_sympy(t, list(z), list(u), list(f), running, terminal)


def riccati_ode(A, B, Q, R, PT, horizons):
    """P(q - s) for each horizon s, by solve_ivp on the matrix Riccati equation in s."""
    N = A.shape[0]
    BRB = B @ np.linalg.solve(R, B.T)

    def rhs(s, y):
        P = y.reshape(N, N)
        return (A.T @ P + P @ A - P @ BRB @ P + Q).ravel()

    sol = solve_ivp(rhs, (0.0, max(horizons)), PT.ravel(), t_eval=np.sort(horizons),
                    rtol=RTOL, atol=ATOL)
    assert sol.success, sol.message
    return {s: sol.y[:, i].reshape(N, N) for i, s in enumerate(np.sort(horizons))}


def fmt(P):
    return np.array2string(P, precision=6, suppress_small=True, floatmode="fixed",
                           max_line_width=120)


def run(name, A, B, Q, R, PT, horizons, show_matrices, estimate):
    N, M = B.shape
    print(f"=== {name}: N = {N}, M = {M} ===")
    problem = lq_problem(A, B, Q, R, PT)
    t0 = time.perf_counter()
    res = invimbed.solve_optimal(problem, np.eye(N), -horizons, n_controls=M,
                                 control_affine=True, rtol=RTOL, atol=ATOL,
                                 estimate_error=estimate, linear_quadratic=False)
    t_sweep = time.perf_counter() - t0
    assert res.success, res.message
    t0 = time.perf_counter()
    P_ode = riccati_ode(A, B, Q, R, PT, horizons)
    t_ode = time.perf_counter() - t0
    P_care = solve_continuous_are(A, B, Q, R)
    print(f"one imbedding sweep for {horizons.size} horizons: {t_sweep:.2f} s "
          f"({res.nfev} evaluations); Riccati ODE (solve_ivp): {t_ode:.3f} s\n")
    print(f"{'s = q - p':>10} {'|P_sweep - P_ode|/|P_ode|':>27} {'|P - P_care|/|P_care|':>23} "
          f"{'gain error':>11} {'est. value':>11}")
    worst = 0.0
    for i, s in enumerate(horizons):
        P = res.adjoint[i].T                    # adjoint at x = e_j is P e_j
        Pr = P_ode[s]
        rel = np.abs(P - Pr).max() / np.abs(Pr).max()
        gap = np.abs(P - P_care).max() / np.abs(P_care).max()
        gain = -np.linalg.solve(R, B.T @ Pr)    # u = gain x
        # every batch row has the same feedback Jacobian d Psi / d x = gain
        gain_err = np.abs(res.feedback_jacobian[i] - gain).max() / np.abs(gain).max()
        # the value at x = e_j is P_jj / 2
        assert np.allclose(res.value[i], 0.5 * np.diag(Pr), rtol=1e-7, atol=1e-12)
        print(f"{s:>10.3g} {rel:>27.2e} {gap:>23.2e} {gain_err:>11.2e} "
              + (f"{np.abs(res.error_estimate.value[i]).max():>11.1e}" if estimate else
                 f"{'-':>11}"))
        worst = max(worst, rel, gain_err)
        if show_matrices and i in (0, horizons.size - 1):
            print(f"\n  P(q - {s:g}) from the sweep:\n  " + fmt(P).replace("\n", "\n  "))
            print("  from the Riccati ODE:\n  " + fmt(Pr).replace("\n", "\n  "))
            print(f"  feedback gain d Psi/d x from the sweep: {fmt(res.feedback_jacobian[i, 0])}")
            print(f"  -R^-1 B^T P from the Riccati ODE:       {fmt(gain)}\n")
    if show_matrices:
        print("  solve_continuous_are:\n  " + fmt(P_care).replace("\n", "\n  "))
    # the jet of order 1 is exact here: agreement to the integrators' tolerance, and a
    # zero error estimate; the longest horizon is at the algebraic Riccati solution
    assert worst < 1e-7, worst
    if estimate:
        assert np.abs(res.error_estimate.value).max() < 1e-9
    long = np.abs(res.adjoint[-1].T - P_care).max() / np.abs(P_care).max()
    assert long < 1e-6, long
    print(f"\nlargest relative difference from the Riccati ODE (P and gain): {worst:.1e}; "
          f"at s = {horizons[-1]:g}, |P - P_care| / |P_care| = {long:.1e}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="also an 8-state chain of masses, and more depths")
    args = ap.parse_args()

    # double integrator: position and velocity, force u; P_care = [[sqrt 3, 1], [1, sqrt 3]]
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    B = np.array([[0.0], [1.0]])
    Q, R, PT = np.eye(2), np.eye(1), np.diag([5.0, 1.0])
    horizons = (np.array([0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0]) if args.full
                else np.array([0.25, 0.5, 1.0, 2.0, 5.0, 20.0]))
    run("double integrator", A, B, Q, R, PT, horizons, show_matrices=True,
        estimate=args.full)

    if args.full:
        # four unit masses in a chain of unit springs, forces on the first and the last
        n = 4
        K = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
        A = np.block([[np.zeros((n, n)), np.eye(n)], [-K, -0.1 * np.eye(n)]])
        B = np.zeros((2 * n, 2))
        B[n, 0] = B[2 * n - 1, 1] = 1.0
        run("chain of 4 masses", A, B, np.eye(2 * n), 0.5 * np.eye(2), np.eye(2 * n),
            np.array([0.5, 1.0, 2.0, 5.0, 10.0, 30.0]), show_matrices=False, estimate=False)


if __name__ == "__main__":
    main()
