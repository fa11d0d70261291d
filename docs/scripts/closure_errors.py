"""Measure the depth error of each closure against the classical adjoint reference.

For a damped, forced pendulum and a Van der Pol oscillator (both nonlinear, with a
running and a terminal loss and a constant control ``w``), every closure of
:func:`invimbed.solve_imbedding` is run once over the depths ``s = q - p`` in
``S = 0.1, 0.2, 0.4, 0.8, 1.6`` and compared with
``solve_adjoint(rtol=1e-11, atol=1e-13)``, depth by depth. Exact derivatives are given
(``derivatives=``), so that what is measured is the closure's truncation error in
depth and not finite-difference noise.

Printed, as Markdown tables (pasted into docs/closures.md):

1. the absolute errors of ``z``, ``adjoint`` and ``param_grad`` at each depth, per
   closure, and the log-log slope in ``s`` of the error of every field (``z``,
   ``value``, ``adjoint``, ``param_grad``, ``depth_grad``), fitted over ``s <= 0.4``
   and over all depths;
2. for the jet, the relative error and ``error_estimate / true error``, per field;
3. the jet's error with the integrator at ``rtol=1e-6`` and at ``rtol=1e-10``: the
   same, because the error is the closure's, not the integrator's.

Rerun with ``python docs/scripts/closure_errors.py`` from the repository root
(a few seconds on two cores).
"""

from __future__ import annotations

import platform
import sys

import numpy as np
import scipy

import invimbed

S = np.array([0.1, 0.2, 0.4, 0.8, 1.6])
Q = 0.0
DEPTHS = Q - S
FIELDS = ("z", "value", "adjoint", "param_grad")
ALL = FIELDS + ("depth_grad",)
REF = dict(rtol=1e-11, atol=1e-13)


def zeros(z, *shape):
    return np.zeros((z.shape[0],) + shape)


# --- shared quadratic losses: R = a/2 |z|^2 + b/2 |theta|^2, T = 1/2 |z - y|^2 -------------
def quadratic_losses(a, b, y):
    y = np.asarray(y, float)

    def R(t, z, th):
        return 0.5 * a * np.sum(z**2, 1) + 0.5 * b * np.sum(th**2, 1)

    def T(z):
        return 0.5 * np.sum((z - y) ** 2, 1)

    N = y.size
    d = {
        "R_z": lambda t, z, th: a * z,
        "R_zz": lambda t, z, th: a * np.broadcast_to(np.eye(N), (z.shape[0], N, N)).copy(),
        "R_zzz": lambda t, z, th: zeros(z, N, N, N),
        "R_theta": lambda t, z, th: b * th,
        "R_ztheta": lambda t, z, th: zeros(z, N, th.shape[1]),
        "R_zztheta": lambda t, z, th: zeros(z, N, N, th.shape[1]),
        "T_z": lambda z: z - y,
        "T_zz": lambda z: np.broadcast_to(np.eye(N), (z.shape[0], N, N)).copy(),
        "T_zzz": lambda z: zeros(z, N, N, N),
    }
    return R, T, d


# --- damped, forced pendulum: z = (angle, velocity), theta = (damping c, torque u) ---------
def pendulum():
    def f(t, z, th):
        return np.stack([z[:, 1], -np.sin(z[:, 0]) - th[:, 0] * z[:, 1] + th[:, 1]], 1)

    def f_z(t, z, th):
        J = zeros(z, 2, 2)
        J[:, 0, 1] = 1.0
        J[:, 1, 0] = -np.cos(z[:, 0])
        J[:, 1, 1] = -th[:, 0]
        return J

    def f_zz(t, z, th):
        H = zeros(z, 2, 2, 2)
        H[:, 1, 0, 0] = np.sin(z[:, 0])
        return H

    def f_zzz(t, z, th):
        H = zeros(z, 2, 2, 2, 2)
        H[:, 1, 0, 0, 0] = np.cos(z[:, 0])
        return H

    def f_theta(t, z, th):
        G = zeros(z, 2, 2)
        G[:, 1, 0] = -z[:, 1]
        G[:, 1, 1] = 1.0
        return G

    def f_ztheta(t, z, th):
        G = zeros(z, 2, 2, 2)
        G[:, 1, 1, 0] = -1.0
        return G

    R, T, d = quadratic_losses(0.1, 0.01, [0.0, 0.0])
    d.update(f_z=f_z, f_zz=f_zz, f_zzz=f_zzz, f_theta=f_theta, f_ztheta=f_ztheta,
             f_zztheta=lambda t, z, th: zeros(z, 2, 2, 2, 2))
    problem = invimbed.BolzaProblem(f, R, T, q=Q, derivatives=d, vectorized=True)
    return "pendulum", problem, np.array([1.0, 0.5]), invimbed.Constant([0.3, 0.2])


# --- Van der Pol: theta = (mu,) ----------------------------------------------------------
def van_der_pol():
    def f(t, z, th):
        mu = th[:, 0]
        return np.stack([z[:, 1], mu * (1 - z[:, 0] ** 2) * z[:, 1] - z[:, 0]], 1)

    def f_z(t, z, th):
        mu = th[:, 0]
        J = zeros(z, 2, 2)
        J[:, 0, 1] = 1.0
        J[:, 1, 0] = -2 * mu * z[:, 0] * z[:, 1] - 1
        J[:, 1, 1] = mu * (1 - z[:, 0] ** 2)
        return J

    def f_zz(t, z, th):
        mu = th[:, 0]
        H = zeros(z, 2, 2, 2)
        H[:, 1, 0, 0] = -2 * mu * z[:, 1]
        H[:, 1, 0, 1] = H[:, 1, 1, 0] = -2 * mu * z[:, 0]
        return H

    def f_zzz(t, z, th):
        mu = th[:, 0]
        H = zeros(z, 2, 2, 2, 2)
        for idx in [(0, 0, 1), (0, 1, 0), (1, 0, 0)]:
            H[(slice(None), 1) + idx] = -2 * mu
        return H

    def f_theta(t, z, th):
        G = zeros(z, 2, 1)
        G[:, 1, 0] = (1 - z[:, 0] ** 2) * z[:, 1]
        return G

    def f_ztheta(t, z, th):
        G = zeros(z, 2, 2, 1)
        G[:, 1, 0, 0] = -2 * z[:, 0] * z[:, 1]
        G[:, 1, 1, 0] = 1 - z[:, 0] ** 2
        return G

    def f_zztheta(t, z, th):
        G = zeros(z, 2, 2, 2, 1)
        G[:, 1, 0, 0, 0] = -2 * z[:, 1]
        G[:, 1, 0, 1, 0] = G[:, 1, 1, 0, 0] = -2 * z[:, 0]
        return G

    R, T, d = quadratic_losses(0.1, 0.01, [1.0, 0.0])
    d.update(f_z=f_z, f_zz=f_zz, f_zzz=f_zzz, f_theta=f_theta, f_ztheta=f_ztheta,
             f_zztheta=f_zztheta)
    problem = invimbed.BolzaProblem(f, R, T, q=Q, derivatives=d, vectorized=True)
    return "Van der Pol", problem, np.array([1.5, -0.5]), invimbed.Constant([1.0])


def check_derivatives(problem, x, control):
    """The hand-written derivatives agree with central differences of the functions."""
    fd = invimbed.BolzaProblem(problem.dynamics, problem.running_loss, problem.terminal_loss,
                               q=Q, vectorized=True).provider(x.size, control.size)
    ex = problem.provider(x.size, control.size)
    z, th = x[None], control.theta(0.0)[None]
    for which, dz, dth in [("f", 1, 0), ("f", 2, 0), ("f", 3, 0), ("f", 0, 1), ("f", 1, 1),
                           ("f", 2, 1), ("R", 1, 0), ("R", 2, 0), ("R", 0, 1), ("T", 1, 0),
                           ("T", 2, 0)]:
        a = ex.derivative(which, 0.0, z, th, dz=dz, dth=dth)
        b = fd.derivative(which, 0.0, z, th, dz=dz, dth=dth)
        tol = 1e-3 if dz + dth == 3 else 1e-5  # three nested differences are noisy
        if not np.allclose(a, b, atol=tol):
            raise AssertionError(f"derivative {which} dz={dz} dth={dth} disagrees: {a} vs {b}")


def errors(res, ref, key):
    """Largest absolute error of field ``key`` at each depth."""
    return np.abs(res[key] - ref[key]).reshape(len(S), -1).max(1)


def slope(err, n=len(S)):
    """Least-squares slope of log(error) against log(s), over the ``n`` smallest depths."""
    return np.polyfit(np.log(S[:n]), np.log(err[:n]), 1)[0]


def fmt(v):
    return f"{v:.2e}"


def main():
    print(f"Python {platform.python_version()}, numpy {np.__version__}, scipy "
          f"{scipy.__version__}, invimbed {invimbed.__version__}, {platform.machine()} "
          f"{platform.system()}\n")
    for make in (pendulum, van_der_pol):
        name, problem, x, w = make()
        check_derivatives(problem, x, w)
        ref = invimbed.solve_adjoint(problem, x, DEPTHS, control=w, **REF)
        assert ref.success, ref.message
        runs = {
            "jet": dict(closure="jet"),
            "stencil central": dict(closure="stencil"),
            "stencil forward": dict(closure="stencil", difference="forward"),
            "crop": dict(closure="crop"),
        }
        table = {}
        results = {}
        for label, kw in runs.items():
            res = invimbed.solve_imbedding(problem, x, DEPTHS, control=w, rtol=1e-10,
                                           atol=1e-12, **kw)
            assert res.status in (0, -2), res.message   # -2: the estimate says approximate
            results[label] = res
        # the discrete architecture: layers of width h, read at the depths S
        for h in (0.05, 0.025):
            grid = Q - np.arange(0, S[-1] + h / 2, h)
            res = invimbed.solve_imbedding(problem, x, grid, control=w, method="disc")
            assert res.status in (0, -2), res.message
            pick = [int(np.argmin(np.abs(grid - p))) for p in DEPTHS]
            results[f"disc h={h}"] = {k: res[k][pick] for k in ALL}
        labels = list(results)

        print(f"### {name}: x = {x.tolist()}, w = {w.w.tolist()}\n")
        for key in ("z", "adjoint", "param_grad"):
            table = {k: errors(results[k], ref, key) for k in labels}
            print(f"Absolute error of `{key}`:\n")
            print("| s | " + " | ".join(labels) + " |")
            print("|---" * (len(labels) + 1) + "|")
            for i, s in enumerate(S):
                print(f"| {s} | " + " | ".join(fmt(table[k][i]) for k in labels) + " |")
            print()
        print("Log-log slope of the error in s, per field, fitted over s = 0.1..0.4 / over "
              "all five depths:\n")
        print("| closure | " + " | ".join(ALL) + " |")
        print("|---" * (len(ALL) + 1) + "|")
        for k in labels:
            cells = [f"{slope(errors(results[k], ref, f), 3):.2f} / "
                     f"{slope(errors(results[k], ref, f)):.2f}" for f in ALL]
            print(f"| {k} | " + " | ".join(cells) + " |")
        print()

        jet = results["jet"]
        print("Jet: relative error, `|error| / |reference|` (largest entries), per field:\n")
        print("| s | " + " | ".join(ALL) + " |")
        print("|---" * (len(ALL) + 1) + "|")
        for i, s in enumerate(S):
            cells = [f"{errors(jet, ref, k)[i] / np.abs(ref[k][i]).max():.1e}" for k in ALL]
            print(f"| {s} | " + " | ".join(cells) + " |")
        print()

        print("Jet: `error_estimate / true error`, per field:\n")
        print("| s | " + " | ".join(FIELDS) + " |")
        print("|---" * (len(FIELDS) + 1) + "|")
        for i, s in enumerate(S):
            cells = []
            for k in FIELDS:
                true = np.abs(jet[k][i] - ref[k][i]).max()
                est = np.abs(jet.error_estimate[k][i]).max()
                cells.append(f"{est / true:.2f}")
            print(f"| {s} | " + " | ".join(cells) + " |")
        print()

        print("Jet error (largest over fields) against the integrator tolerance, and the "
              "largest difference between the two runs:\n")
        print("| s | rtol=1e-6, atol=1e-9 | rtol=1e-10, atol=1e-12 | difference |")
        print("|---|---|---|---|")
        loose = invimbed.solve_imbedding(problem, x, DEPTHS, control=w, rtol=1e-6, atol=1e-9)
        assert loose.success, loose.message
        tight = jet
        el = np.max([errors(loose, ref, k) for k in ALL], axis=0)
        et = np.max([errors(tight, ref, k) for k in ALL], axis=0)
        diff = np.max([errors(loose, tight, k) for k in ALL], axis=0)
        for i, s in enumerate(S):
            print(f"| {s} | {el[i]:.6e} | {et[i]:.6e} | {fmt(diff[i])} |")
        print(f"\nnfev: {loose.nfev} (rtol=1e-6) and {tight.nfev} (rtol=1e-10) for the "
              f"whole sweep; solve_adjoint(rtol=1e-11): {ref.nfev}.\n")


if __name__ == "__main__":
    sys.exit(main())
