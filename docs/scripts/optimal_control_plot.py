"""Value and feedback against depth for docs/optimal-control.md.

Writes two figures and prints the numbers quoted on the page:

* ``docs/img/optimal_lqr.png``: the double integrator of ``examples/lqr.py``
  (``A = [[0, 1], [0, 0]]``, ``B = [0, 1]^T``, ``Q = I``, ``R = 1``,
  ``P_T = diag(5, 1)``) at ``x = (1, 0)``: ``V(p, x)`` and ``Psi(p, x)`` from one
  ``solve_optimal`` sweep over 81 depths, against ``x^T P x / 2`` and ``-R^-1 B^T P x``
  from the Riccati ODE (``solve_ivp``) and from ``solve_continuous_are``.
* ``docs/img/optimal_vdp.png``: the Van der Pol oscillator of
  ``examples/bounded_control.py`` with ``|u| <= 1``, both regimes (A: the bound
  inactive along the optimal path; B: the bound active at ``x``): one sweep each (jet
  order 2, 41 depths) against ``solve_bvp`` on the Euler--Lagrange system (its control
  simulated forward), with, for B, the cost of holding ``u = -1`` (``solve_adjoint``).

Printed: the largest differences in the LQR figure, and a comparison with the direct
method ``invimbed.optimize_control`` (piecewise-constant controls on 20 intervals,
L-BFGS-B with the bounds, gradients from ``solve_adjoint``) at two depths per regime,
with wall times (the sweep's time covers all 41 depths).

Run from the repository root:  python docs/scripts/optimal_control_plot.py  (15 to 50 s)
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
from scipy.linalg import solve_continuous_are

import invimbed

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"


def load_example(name: str):
    """Import examples/<name>.py as a module (the same problems, one source)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lqr_figure(plt) -> None:
    lqr = load_example("lqr")
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    B = np.array([[0.0], [1.0]])
    Q, R, PT = np.eye(2), np.eye(1), np.diag([5.0, 1.0])
    x = np.array([1.0, 0.0])
    S = np.linspace(0.0, 8.0, 81)[1:]
    problem = lqr.lq_problem(A, B, Q, R, PT)
    t0 = time.perf_counter()
    res = invimbed.solve_optimal(problem, x, -S, n_controls=1, control_affine=True,
                                 rtol=1e-10, atol=1e-12, estimate_error=False)
    elapsed = time.perf_counter() - t0
    assert res.success, res.message
    P = lqr.riccati_ode(A, B, Q, R, PT, S)
    V_ref = np.array([0.5 * x @ P[s] @ x for s in S])
    u_ref = np.array([-(np.linalg.solve(R, B.T @ P[s]) @ x)[0] for s in S])
    P_inf = solve_continuous_are(A, B, Q, R)
    print(f"LQR (double integrator, x = {x.tolist()}): one sweep for {S.size} depths in "
          f"{elapsed:.2f} s; max |V - x^T P x / 2| = {np.abs(res.value - V_ref).max():.1e}, "
          f"max |Psi - (-R^-1 B^T P x)| = {np.abs(res.feedback[:, 0] - u_ref).max():.1e}; "
          f"at s = {S[-1]:g}, V - x^T P_care x / 2 = {res.value[-1] - 0.5 * x @ P_inf @ x:.1e}\n")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    S0 = np.concatenate([[0.0], S])
    ax1.plot(S0, np.concatenate([[0.5 * x @ PT @ x], res.value]), "-", lw=2,
             label="solve_optimal (one sweep)")
    ax1.plot(S[::4], V_ref[::4], "o", ms=5, mfc="none", label="Riccati ODE (solve_ivp)")
    ax1.axhline(0.5 * x @ P_inf @ x, color="0.4", ls="--", lw=1,
                label="solve_continuous_are")
    ax1.set_xlabel("horizon s = q - p")
    ax1.set_ylabel("V(p, x)")
    ax1.set_title("optimal cost-to-go, x = (1, 0)")
    ax1.legend()
    u_q = -(np.linalg.solve(R, B.T @ PT) @ x)[0]
    ax2.plot(S0, np.concatenate([[u_q], res.feedback[:, 0]]), "-", lw=2,
             label="Psi(p, x), solve_optimal")
    ax2.plot(S[::4], u_ref[::4], "o", ms=5, mfc="none", label="-R^-1 B^T P(p) x (Riccati ODE)")
    ax2.axhline(-(np.linalg.solve(R, B.T @ P_inf) @ x)[0], color="0.4", ls="--", lw=1,
                label="-R^-1 B^T P_care x")
    ax2.set_xlabel("horizon s = q - p")
    ax2.set_ylabel("u = Psi(p, x)")
    ax2.set_title("optimal feedback at x")
    ax2.legend()
    fig.suptitle("Double integrator, finite-horizon LQR: the HJB sweep is the Riccati equation",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(IMG / "optimal_lqr.png", dpi=110)
    print(f"wrote {(IMG / 'optimal_lqr.png').relative_to(ROOT)}\n")


def direct(problem, x, s, n=20):
    """optimize_control with a piecewise-constant control on n intervals, |u| <= 1."""
    control = invimbed.PiecewiseConstant(np.linspace(-s, 0.0, n + 1), np.zeros(n))
    t0 = time.perf_counter()
    res = invimbed.optimize_control(problem, x, control, gradient="adjoint", bounds=(-1.0, 1.0),
                                    rtol=1e-10, atol=1e-12, options={"gtol": 1e-10})
    return res, time.perf_counter() - t0


def vdp_figure(plt) -> None:
    bc = load_example("bounded_control")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    rows = []
    for row, (label, rho, x, smax) in enumerate(
            [("A", 1.0, np.array([0.5, 0.2]), 1.5), ("B", 0.1, np.array([1.0, 0.5]), 1.0)]):
        problem = bc.van_der_pol(rho)
        S = np.linspace(0.0, smax, 41)[1:]
        t0 = time.perf_counter()
        res = invimbed.solve_optimal(problem, x, -S, control_bounds=[[-1.0, 1.0]],
                                     control_affine=True, order=2, rtol=1e-10, atol=1e-12)
        t_sweep = time.perf_counter() - t0
        assert res.success, res.message
        marks = S[3::6]
        refs = [bc.pontryagin(x, -s, rho) for s in marks]
        J = np.array([r[0] for r in refs])
        u_p = np.array([r[1] for r in refs])
        ax_v, ax_u = axes[row]
        T0 = 0.5 * x @ x
        S0 = np.concatenate([[0.0], S])
        ax_v.plot(S0, np.concatenate([[T0], res.value]), "-", lw=2,
                  label="solve_optimal, jet order 2 (one sweep)")
        ax_v.fill_between(S, res.value - res.error_estimate.value,
                          res.value + res.error_estimate.value, alpha=0.3,
                          label="± error estimate")
        ax_v.plot(marks, J, "o", ms=6, mfc="none", label="solve_bvp (Euler-Lagrange)")
        u_q = float(np.clip(-x[1] / rho, -1, 1))
        ax_u.plot(S0, np.concatenate([[u_q], res.feedback[:, 0]]), "-", lw=2,
                  label="Psi(p, x), solve_optimal")
        ax_u.plot(marks, u_p, "o", ms=6, mfc="none", label="u(p) from solve_bvp")
        if label == "B":
            held = invimbed.solve_adjoint(problem, x, -S, control=invimbed.Constant([-1.0]),
                                          rtol=1e-10, atol=1e-12)
            ax_v.plot(S, held.value, "--", color="0.3", lw=1.2, label="cost of holding u = -1")
            # the end-point check of examples/bounded_control.py: Theorem 3's control at
            # the output z(q) (Lam = grad T = z(q)) has another active set than Psi(p, x)
            u_end = np.clip(-res.z[:, 1] / rho, -1.0, 1.0)
            flagged = np.sign(np.trunc(u_end)) != np.sign(np.trunc(res.feedback[:, 0]))
            if flagged.any():
                s_flag = S[np.argmax(flagged)]
                for ax in (ax_v, ax_u):
                    ax.axvspan(s_flag, smax, color="C3", alpha=0.08,
                               label="flagged: other active set at z(q)")
        ax_v.set_ylabel("V(p, x)")
        ax_u.set_ylabel("u = Psi(p, x)")
        ax_u.set_ylim(-1.1, 0.2 if label == "A" else 1.1)
        title = (f"{label}: rho = {rho}, x = {tuple(x.tolist())}: "
                 + ("bound inactive" if label == "A" else "bound active at x"))
        ax_v.set_title(title, fontsize=10)
        ax_u.set_title(title, fontsize=10)
        for ax in (ax_v, ax_u):
            ax.set_xlabel("horizon s = q - p")
            ax.legend(fontsize=8)
        for s in (0.5, smax):
            i = int(np.argmin(np.abs(S - s)))
            t0 = time.perf_counter()
            J_bvp = bc.pontryagin(x, -S[i], rho)[0]
            t_bvp = time.perf_counter() - t0
            d, t_direct = direct(problem, x, S[i])
            rows.append((label, S[i], res.value[i], res.error_estimate.value[i], t_sweep,
                         J_bvp, t_bvp, d.fun, t_direct, d.nit))
    fig.suptitle("Van der Pol with |u| <= 1: value and feedback against depth", fontsize=11)
    fig.tight_layout()
    fig.savefig(IMG / "optimal_vdp.png", dpi=110)
    print(f"wrote {(IMG / 'optimal_vdp.png').relative_to(ROOT)}\n")

    print("| regime | s | V, sweep (estimate) | sweep time (40 depths) | J, solve_bvp | "
          "time | J, optimize_control (20 pieces) | time | iterations |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (label, s, V, est, ts, Jb, tb, Jd, td, nit) in rows:
        print(f"| {label} | {s:.3g} | {V:.6f} ({est:.0e}) | {ts:.2f} s | {Jb:.6f} | {tb:.2f} s | "
              f"{Jd:.6f} | {td:.2f} s | {nit} |")
    print()


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    print(f"Python {platform.python_version()}, numpy {np.__version__}, scipy "
          f"{scipy.__version__}, invimbed {invimbed.__version__}, {platform.machine()} "
          f"{platform.system()}, {os.cpu_count()} CPUs\n")
    IMG.mkdir(parents=True, exist_ok=True)
    lqr_figure(plt)
    vdp_figure(plt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
