"""The coupled pendulums of ``bench_backends.py`` and ``bench_njit_derivatives.py``,
written twice: per sample with ``numba.njit`` (what ``backend="numba"`` runs) and
vectorised with numpy (what ``backend="numpy"`` runs fastest), with their derivatives by
hand up to the second order (``NUMBA_DERIVATIVES``, ``NUMPY_DERIVATIVES``).

``N = 4`` states ``z = [phi1, phi2, omega1, omega2]``, ``M = 2`` torques ``theta``:

    d phi_i / dt   = omega_i,
    d omega_1 / dt = -sin(phi1) - k (phi1 - phi2) - c omega1 + theta_1,
    d omega_2 / dt = -sin(phi2) - k (phi2 - phi1) - c omega2 + theta_2,
    R = a (2 - cos phi1 - cos phi2) + rho |theta|^2 / 2,
    T = ((phi1 - 1)^2 + (phi2 - 1)^2 + omega1^2 + omega2^2) / 2,

``k, c, a, rho = K_SPRING, C_DAMP, A_RUN, RHO``; ``W`` the constant torque, ``DEPTHS``
64 depths on ``[-1, 0]`` and ``STEP`` one ``rk4`` step between consecutive depths;
``inputs(B)`` the inputs of a batch; ``problems(exact)`` the problems ``bench_backends.py``
and ``bench_memory.py`` time, ``sympy_problem()`` the same from sympy expressions.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

import invimbed

K_SPRING, C_DAMP, A_RUN, RHO = 0.5, 0.1, 0.2, 0.05
N, M = 4, 2
W = np.array([0.2, -0.1])
N_DEPTHS = 64
DEPTHS = np.linspace(0.0, -1.0, N_DEPTHS)
STEP = 1.0 / (N_DEPTHS - 1)


# -- per sample, for numba --------------------------------------------------------------
@njit(cache=True)
def f1(t, z, th):
    out = np.empty(4)
    out[0] = z[2]
    out[1] = z[3]
    out[2] = -np.sin(z[0]) - K_SPRING * (z[0] - z[1]) - C_DAMP * z[2] + th[0]
    out[3] = -np.sin(z[1]) - K_SPRING * (z[1] - z[0]) - C_DAMP * z[3] + th[1]
    return out


@njit(cache=True)
def f1_z(t, z, th):
    out = np.zeros((4, 4))
    out[0, 2] = 1.0
    out[1, 3] = 1.0
    out[2, 0] = -np.cos(z[0]) - K_SPRING
    out[2, 1] = K_SPRING
    out[2, 2] = -C_DAMP
    out[3, 0] = K_SPRING
    out[3, 1] = -np.cos(z[1]) - K_SPRING
    out[3, 3] = -C_DAMP
    return out


@njit(cache=True)
def f1_zz(t, z, th):
    out = np.zeros((4, 4, 4))
    out[2, 0, 0] = np.sin(z[0])
    out[3, 1, 1] = np.sin(z[1])
    return out


@njit(cache=True)
def f1_theta(t, z, th):
    out = np.zeros((4, 2))
    out[2, 0] = 1.0
    out[3, 1] = 1.0
    return out


@njit(cache=True)
def f1_ztheta(t, z, th):
    return np.zeros((4, 4, 2))


@njit(cache=True)
def f1_zztheta(t, z, th):
    return np.zeros((4, 4, 4, 2))


@njit(cache=True)
def R1(t, z, th):
    return A_RUN * (2.0 - np.cos(z[0]) - np.cos(z[1])) + 0.5 * RHO * (th[0] ** 2 + th[1] ** 2)


@njit(cache=True)
def R1_z(t, z, th):
    out = np.zeros(4)
    out[0] = A_RUN * np.sin(z[0])
    out[1] = A_RUN * np.sin(z[1])
    return out


@njit(cache=True)
def R1_zz(t, z, th):
    out = np.zeros((4, 4))
    out[0, 0] = A_RUN * np.cos(z[0])
    out[1, 1] = A_RUN * np.cos(z[1])
    return out


@njit(cache=True)
def R1_theta(t, z, th):
    return RHO * th.copy()


@njit(cache=True)
def R1_ztheta(t, z, th):
    return np.zeros((4, 2))


@njit(cache=True)
def R1_zztheta(t, z, th):
    return np.zeros((4, 4, 2))


@njit(cache=True)
def T1(z):
    return 0.5 * ((z[0] - 1.0) ** 2 + (z[1] - 1.0) ** 2 + z[2] ** 2 + z[3] ** 2)


@njit(cache=True)
def T1_z(z):
    out = z.copy()
    out[0] -= 1.0
    out[1] -= 1.0
    return out


@njit(cache=True)
def T1_zz(z):
    return np.eye(4)


NUMBA_DERIVATIVES = dict(f_z=f1_z, f_zz=f1_zz, f_theta=f1_theta, f_ztheta=f1_ztheta,
                         f_zztheta=f1_zztheta, R_z=R1_z, R_zz=R1_zz, R_theta=R1_theta,
                         R_ztheta=R1_ztheta, R_zztheta=R1_zztheta, T_z=T1_z, T_zz=T1_zz)


# -- vectorised, for numpy ----------------------------------------------------------------
def fv(t, z, th):
    p1, p2, w1, w2 = z.T
    return np.stack([w1, w2, -np.sin(p1) - K_SPRING * (p1 - p2) - C_DAMP * w1 + th[:, 0],
                     -np.sin(p2) - K_SPRING * (p2 - p1) - C_DAMP * w2 + th[:, 1]], axis=1)


def fv_z(t, z, th):
    out = np.zeros((z.shape[0], 4, 4))
    out[:, 0, 2] = out[:, 1, 3] = 1.0
    out[:, 2, 0] = -np.cos(z[:, 0]) - K_SPRING
    out[:, 2, 1] = out[:, 3, 0] = K_SPRING
    out[:, 2, 2] = out[:, 3, 3] = -C_DAMP
    out[:, 3, 1] = -np.cos(z[:, 1]) - K_SPRING
    return out


def fv_zz(t, z, th):
    out = np.zeros((z.shape[0], 4, 4, 4))
    out[:, 2, 0, 0] = np.sin(z[:, 0])
    out[:, 3, 1, 1] = np.sin(z[:, 1])
    return out


def fv_theta(t, z, th):
    out = np.zeros((z.shape[0], 4, 2))
    out[:, 2, 0] = out[:, 3, 1] = 1.0
    return out


def Rv(t, z, th):
    return A_RUN * (2.0 - np.cos(z[:, 0]) - np.cos(z[:, 1])) + 0.5 * RHO * np.sum(th ** 2, axis=1)


def Rv_z(t, z, th):
    out = np.zeros((z.shape[0], 4))
    out[:, 0] = A_RUN * np.sin(z[:, 0])
    out[:, 1] = A_RUN * np.sin(z[:, 1])
    return out


def Rv_zz(t, z, th):
    out = np.zeros((z.shape[0], 4, 4))
    out[:, 0, 0] = A_RUN * np.cos(z[:, 0])
    out[:, 1, 1] = A_RUN * np.cos(z[:, 1])
    return out


def Tv(z):
    return 0.5 * ((z[:, 0] - 1.0) ** 2 + (z[:, 1] - 1.0) ** 2 + z[:, 2] ** 2 + z[:, 3] ** 2)


def _zeros(*shape: int) -> Callable:
    return lambda t, z, th: np.zeros((z.shape[0],) + shape)


NUMPY_DERIVATIVES = dict(
    f_z=fv_z, f_zz=fv_zz, f_theta=fv_theta, f_ztheta=_zeros(4, 4, 2), f_zztheta=_zeros(4, 4, 4, 2),
    R_z=Rv_z, R_zz=Rv_zz, R_theta=lambda t, z, th: RHO * th, R_ztheta=_zeros(4, 2),
    R_zztheta=_zeros(4, 4, 2),
    T_z=lambda z: z - np.array([1.0, 1.0, 0.0, 0.0]),
    T_zz=lambda z: np.broadcast_to(np.eye(4), (z.shape[0], 4, 4)).copy())


def inputs(B: int) -> np.ndarray:
    return np.random.default_rng(B).normal(scale=0.5, size=(B, N))


def sympy_problem() -> invimbed.BolzaProblem:
    """The same pendulums from sympy expressions, numba code generated by the provider:
    the numpy backend loops it over the batch, the numba backend calls it per sample."""
    import sympy as sp

    t = sp.Symbol("t")
    z = sp.symbols("z0:4")
    th = sp.symbols("th0:2")
    f = [z[2], z[3], -sp.sin(z[0]) - K_SPRING * (z[0] - z[1]) - C_DAMP * z[2] + th[0],
         -sp.sin(z[1]) - K_SPRING * (z[1] - z[0]) - C_DAMP * z[3] + th[1]]
    R = A_RUN * (2 - sp.cos(z[0]) - sp.cos(z[1])) + RHO / 2 * (th[0] ** 2 + th[1] ** 2)
    T = ((z[0] - 1) ** 2 + (z[1] - 1) ** 2 + z[2] ** 2 + z[3] ** 2) / 2
    return invimbed.BolzaProblem.from_sympy(t, z, th, f, R, T, compile="numba")


def problems(exact: bool | str) -> tuple[invimbed.BolzaProblem, invimbed.BolzaProblem]:
    """(numba problem, numpy problem); ``exact="sympy"``: `sympy_problem` for both;
    ``exact="per-sample"``: the plain-Python per-sample functions and derivatives (the
    njit functions' ``py_func``) for both."""
    if exact == "sympy":
        prob = sympy_problem()
        return prob, prob
    if exact == "per-sample":
        d = {k: v.py_func for k, v in NUMBA_DERIVATIVES.items()}
        prob = invimbed.BolzaProblem(f1.py_func, R1.py_func, T1.py_func, derivatives=d)
        return prob, prob
    fd = "finite-differences"     # not the default (traced exact derivatives where it can)
    return (invimbed.BolzaProblem(f1, R1, T1, derivatives=NUMBA_DERIVATIVES if exact else fd),
            invimbed.BolzaProblem(fv, Rv, Tv, vectorized=True,
                                  derivatives=NUMPY_DERIVATIVES if exact else fd))
