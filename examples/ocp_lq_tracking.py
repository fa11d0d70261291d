"""Linear-quadratic tracking of a sine, by multiple shooting, against Riccati.

    dz1/dt = z2,   dz2/dt = -z1 - 0.5 z2 + u,   z(0) = (0, 0),
    J = int_0^5 ((z1 - sin t)^2 + 0.1 u^2) dt.

The reference is exact for the same discretisation (K equal intervals, u constant on
each): the sine comes from the exosystem ``dw/dt = (w2, -w1)``, ``w(0) = (0, 1)``, so
the augmented state ``(z, w)`` is linear; Van Loan's matrix exponential
(``scipy.linalg.expm``) gives the exact sampled dynamics and cost of an interval, and a
discrete Riccati recursion their optimum. The continuous Riccati equation
(``scipy.integrate.solve_ivp``) gives the limit K -> infinity. Grid: K = 20 equal
intervals (more than the 10 asked for), J within 1e-7 relative of the discrete Riccati
optimum.

Run: ``python examples/ocp_lq_tracking.py [--intervals K] [--plot PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp

import invimbed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ocp_gallery as gallery  # noqa: E402  (the gallery's shared plot and check)

X0, TF, RHO = [0.0, 0.0], 5.0, 0.1
# the augmented linear system (z1, z2, w1, w2), u; cost xi' Q xi + u' R u
A = np.array([[0.0, 1.0, 0.0, 0.0], [-1.0, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0],
              [0.0, 0.0, -1.0, 0.0]])
B = np.array([[0.0], [1.0], [0.0], [0.0]])
E = np.array([1.0, 0.0, -1.0, 0.0])                  # z1 - w1 = z1 - sin t
Q, R = np.outer(E, E), np.array([[RHO]])
XI0 = np.array(X0 + [0.0, 1.0])


def dynamics(z, u):
    return [z[1], -z[0] - 0.5 * z[1] + u[0]]


def riccati_discrete(K: int) -> float:
    """The exact optimum over controls constant on K equal intervals."""
    return gallery.sampled_lq_optimum(A, B, Q, R, np.zeros_like(Q), TF / K, K, XI0)


def riccati_continuous() -> float:
    """The optimum over all controls: -dP/dt = A'P + PA - P B R^-1 B' P + Q, P(TF) = 0."""
    def rhs(t, p):
        P = p.reshape(4, 4)
        return -(A.T @ P + P @ A - P @ B @ np.linalg.solve(R, B.T @ P) + Q).ravel()
    sol = solve_ivp(rhs, (TF, 0.0), np.zeros(16), rtol=1e-11, atol=1e-12)
    return float(XI0 @ sol.y[:, -1].reshape(4, 4) @ XI0)


SPEC = dict(n=2, m=1, x0=X0, grid=lambda K: np.linspace(0.0, TF, K + 1), dynamics=dynamics)


def problem() -> invimbed.BolzaProblem:
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], dynamics([z1, z2], [u]),
                               (z1 - sp.sin(t)) ** 2 + RHO * u ** 2, q=TF)


def solve(intervals: int = 20, **kwargs):
    # a quadratic program: with the exact Hessian (the default) IPOPT needs one iteration
    return invimbed.solve_ocp(problem(), X0, grid=SPEC["grid"](intervals), **kwargs)


def plot(res, path: str) -> None:
    gallery.plot(res, path, f"LQ tracking: J = {res.fun:.6f} (discrete Riccati "
                 f"{riccati_discrete(len(res.controls)):.6f})",
                 state_title="state z1, z2; reference sin t (dashed)", reference=np.sin)


def main(argv: list[str]) -> None:
    K = gallery.intervals(argv)
    res = solve(K)
    ref, limit = riccati_discrete(K), riccati_continuous()
    gallery.check("LQ tracking", res, res.fun, ref, 1e-7,
                  f"J = {res.fun:.8f}, discrete Riccati {ref:.8f}, continuous Riccati "
                  f"{limit:.8f}; ")
    assert limit <= ref                  # more controls can only lower the optimum
    gallery.maybe_plot(argv, lambda path: plot(res, path))


if __name__ == "__main__":
    main(sys.argv[1:])
