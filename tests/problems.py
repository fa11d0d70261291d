"""Test problems that carry their exact solutions (in the spirit of scipy's
``fun_rational`` / ``sol_rational`` and torchdiffeq's ``y_exact``).

Every problem is a :class:`ProblemFunctions`: vectorised dynamics, running and
terminal losses together with *hand-written* derivative tensors, which
:meth:`ProblemFunctions.problem` turns into an :class:`invimbed.BolzaProblem`
(``vectorized=True``). The derivative tensors follow the package convention: a
leading batch axis, then the output axes, then the ``z`` axes, then the ``theta``
axes; e.g. ``f_ztheta[b, i, j, k] = d^2 f_i / dz_j dtheta_k``. Because a typo in a
hand-written tensor would silently corrupt every test built on it, the tests check
each of them against central differences of its parent (:data:`DERIVATIVE_PARENTS`).

Problems
--------
lq_functions, lq_problem, lq_closed_form
    Linear dynamics, quadratic losses, constant control: exact solution by matrix
    exponentials and Van Loan's block exponential.
logistic_functions, logistic_problem, logistic_closed_form
    ``dz/dt = theta z (1 - z)``: a nonlinear ODE with a closed-form flow.
pendulum_functions, vanderpol_functions
    Nonlinear problems with nonquadratic losses (no closed form; the tests use
    :func:`brute_force` and finite differences of it).
forced_double_pendulum
    A 4-state two-link pendulum as sympy expressions (the `tol` tests and benchmarks).
brute_force
    An independent forward solve of ``z`` and ``J`` with ``scipy.integrate.solve_ivp``.
lq_matrices
    A hypothesis strategy drawing random LQ data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import invimbed

__all__ = [
    "DERIVATIVE_KEYS",
    "DERIVATIVE_PARENTS",
    "ProblemFunctions",
    "brute_force",
    "forced_double_pendulum",
    "logistic_closed_form",
    "logistic_functions",
    "logistic_problem",
    "lq_closed_form",
    "lq_functions",
    "lq_matrices",
    "lq_problem",
    "pendulum_functions",
    "piecewise_theta",
    "vanderpol_functions",
]

#: The derivative names every test problem gives exactly.
DERIVATIVE_KEYS = ("f_z", "f_theta", "f_zz", "f_ztheta", "f_zzz",
                   "R_z", "R_theta", "R_zz", "R_ztheta", "R_zzz",
                   "T_z", "T_zz", "T_zzz")

#: ``key -> [(parent, variable), ...]``: ``key`` is the derivative of ``parent`` in
#: ``variable`` (``"z"`` or ``"theta"``), the new axis appended last and then moved to
#: its place (``z`` axes before ``theta`` axes). Mixed derivatives have two parents,
#: which checks the axis order as well as the values.
DERIVATIVE_PARENTS = {
    "f_z": [("f", "z")], "f_theta": [("f", "theta")], "f_zz": [("f_z", "z")],
    "f_ztheta": [("f_z", "theta"), ("f_theta", "z")], "f_zzz": [("f_zz", "z")],
    "R_z": [("R", "z")], "R_theta": [("R", "theta")], "R_zz": [("R_z", "z")],
    "R_ztheta": [("R_z", "theta"), ("R_theta", "z")], "R_zzz": [("R_zz", "z")],
    "T_z": [("T", "z")], "T_zz": [("T_z", "z")], "T_zzz": [("T_zz", "z")],
}


@dataclass
class ProblemFunctions:
    """Vectorised functions of a Bolza problem and their exact derivatives.

    Attributes
    ----------
    f : callable ``f(t, z (B, N), theta (B, M)) -> (B, N)``
    R : callable ``R(t, z, theta) -> (B,)``
    T : callable ``T(z) -> (B,)``
    derivatives : dict
        ``{"f_z": fn, ...}`` for every key of :data:`DERIVATIVE_KEYS`, same arguments
        as the function they differentiate (``T_*`` take ``z`` only).
    n_state, n_theta : int
        ``N`` and ``M``.
    q : float
        Output end of the depth interval.
    """

    f: Callable
    R: Callable
    T: Callable
    derivatives: dict
    n_state: int
    n_theta: int
    q: float = 0.0
    info: dict = field(default_factory=dict)

    def problem(self) -> invimbed.BolzaProblem:
        """The :class:`invimbed.BolzaProblem` with the exact derivatives, vectorised."""
        return invimbed.BolzaProblem(self.f, self.R, self.T, q=self.q, vectorized=True,
                                     derivatives=dict(self.derivatives))

    def evaluate(self, key: str, t: float, z: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Evaluate ``"f"``, ``"R"``, ``"T"`` or a derivative name on a batch."""
        fn = {"f": self.f, "R": self.R, "T": self.T}.get(key) or self.derivatives[key]
        if key[0] == "T":
            return np.asarray(fn(z), dtype=float)
        return np.asarray(fn(t, z, theta), dtype=float)


def _bcast(mat: np.ndarray, batch: int) -> np.ndarray:
    return np.broadcast_to(mat, (batch,) + mat.shape).copy()


def _zeros(z: Any, *shape: int) -> Any:
    """Zeros of shape ``(len(z),) + shape`` in the namespace of ``z`` (numpy or cupy)."""
    return invimbed.array_namespace(z).zeros((len(z),) + shape)


# -- linear-quadratic ------------------------------------------------------------------
def lq_functions(A: Any, B: Any, Q: Any, Rth: Any, S: Any, PT: Any,
                 q: float = 0.0) -> ProblemFunctions:
    r"""Linear dynamics with quadratic running and terminal losses.

    .. math::

        f = A z + B\theta,\quad
        R = \tfrac12 z^T Q z + z^T S \theta + \tfrac12 \theta^T R_\theta \theta,\quad
        T = \tfrac12 z^T P_T z.

    Parameters
    ----------
    A : array_like, shape (N, N)
    B : array_like, shape (N, M)
        ``M = 0`` is allowed (no control).
    Q : array_like, shape (N, N)
    Rth : array_like, shape (M, M)
    S : array_like, shape (N, M)
    PT : array_like, shape (N, N)
        ``Q``, ``Rth`` and ``PT`` are used through their symmetric parts (which is all
        a quadratic form sees).
    q : float, default 0.0

    Returns
    -------
    ProblemFunctions
    """
    A, B, Q, Rth, S, PT = (np.asarray(a, dtype=float) for a in (A, B, Q, Rth, S, PT))
    N = A.shape[0]
    M = B.shape[1] if B.ndim == 2 else 0
    B = B.reshape(N, M)
    Rth = Rth.reshape(M, M)
    S = S.reshape(N, M)
    Qs, Rs, Ps = (0.5 * (m + m.T) for m in (Q, Rth, PT))

    def f(t, z, th):
        return z @ A.T + th @ B.T

    def R(t, z, th):
        return (0.5 * np.einsum("bi,ij,bj->b", z, Qs, z) + np.einsum("bi,ij,bj->b", z, S, th)
                + 0.5 * np.einsum("bi,ij,bj->b", th, Rs, th))

    def T(z):
        return 0.5 * np.einsum("bi,ij,bj->b", z, Ps, z)

    d = {
        "f_z": lambda t, z, th: _bcast(A, len(z)),
        "f_theta": lambda t, z, th: _bcast(B, len(z)),
        "f_zz": lambda t, z, th: _zeros(z, N, N, N),
        "f_ztheta": lambda t, z, th: _zeros(z, N, N, M),
        "f_zzz": lambda t, z, th: _zeros(z, N, N, N, N),
        "R_z": lambda t, z, th: z @ Qs + th @ S.T,
        "R_theta": lambda t, z, th: z @ S + th @ Rs,
        "R_zz": lambda t, z, th: _bcast(Qs, len(z)),
        "R_ztheta": lambda t, z, th: _bcast(S, len(z)),
        "R_zzz": lambda t, z, th: _zeros(z, N, N, N),
        "T_z": lambda z: z @ Ps,
        "T_zz": lambda z: _bcast(Ps, len(z)),
        "T_zzz": lambda z: _zeros(z, N, N, N),
        # the theta derivatives the jet sweep and the optimal feedback read: exact
        # (constant or zero), none by nested differences of the ones above
        "R_thetatheta": lambda t, z, th: _bcast(Rs, len(z)),
    }
    for which in ("f", "R"):
        out = (N,) if which == "f" else ()
        for dz, dth in ((0, 2), (2, 1), (1, 2), (0, 3), (3, 1)):
            key = f"{which}_{'z' * dz}{'theta' * dth}"
            if key not in d:
                d[key] = (lambda shape: lambda t, z, th: _zeros(z, *shape))(
                    out + (N,) * dz + (M,) * dth)
    return ProblemFunctions(f, R, T, d, N, M, float(q),
                            info=dict(A=A, B=B, Q=Qs, Rth=Rs, S=S, PT=Ps))


def lq_problem(A: Any, B: Any, Q: Any, Rth: Any, S: Any, PT: Any,
               q: float = 0.0) -> invimbed.BolzaProblem:
    """The :class:`invimbed.BolzaProblem` of :func:`lq_functions` (exact derivatives,
    ``vectorized=True``)."""
    return lq_functions(A, B, Q, Rth, S, PT, q).problem()


def lq_closed_form(A: Any, B: Any, Q: Any, Rth: Any, S: Any, PT: Any, x: Any, w: Any,
                   p: float, q: float = 0.0) -> dict[str, np.ndarray]:
    r"""Exact output, loss and gradients of the LQ problem under ``theta(t) = w``.

    With ``zeta = (z, w)`` the closed loop is linear, ``zeta' = M_a zeta``,
    ``M_a = [[A, B], [0, 0]]``, and the running loss is ``zeta^T Q_a zeta / 2`` with
    ``Q_a = [[Q, S], [S^T, Rth]]``. With ``s = q - p`` and ``zeta_0 = (x, w)``,

    .. math::

        z(q) = [e^{M_a s} \zeta_0]_{:N},\qquad
        J = \tfrac12 \zeta_0^T P(s) \zeta_0,\qquad
        P(s) = e^{M_a^T s} P_0 e^{M_a s} + \int_0^s e^{M_a^T r} Q_a e^{M_a r} dr,

    ``P_0 = blockdiag(PT, 0)``; ``P`` solves the Lyapunov differential equation
    ``P' = M_a^T P + P M_a + Q_a``. The integral is Van Loan's: the upper-right block
    of ``expm(s [[-M_a^T, Q_a], [0, M_a]])`` premultiplied by ``e^{M_a^T s}``. Then
    ``grad_x J = (P zeta_0)[:N]``, ``dJ/dw = (P zeta_0)[N:]`` and
    ``dJ/dp = -dJ/ds = -zeta_0^T P'(s) zeta_0 / 2``.

    Parameters
    ----------
    A, B, Q, Rth, S, PT : array_like
        As in :func:`lq_functions` (``M = 0`` allowed: pass ``B`` of shape (N, 0)).
    x : array_like, shape (N,) or (K, N)
    w : array_like, shape (M,)
    p, q : float
        Depth and output end, ``p <= q``.

    Returns
    -------
    dict
        ``z`` (…, N), ``value`` (…), ``adjoint`` (…, N), ``param_grad`` (…, M),
        ``depth_grad`` (…), with the batch axis of ``x`` if it has one.
    """
    A, B, Q, Rth, S, PT = (np.asarray(a, dtype=float) for a in (A, B, Q, Rth, S, PT))
    N = A.shape[0]
    M = B.size // N
    B, Rth, S = B.reshape(N, M), np.reshape(Rth, (M, M)), S.reshape(N, M)
    Q, Rth, PT = (0.5 * (m + m.T) for m in (Q, Rth, PT))
    x = np.asarray(x, dtype=float)
    xb = np.atleast_2d(x)
    w = np.asarray(w, dtype=float).reshape(M)
    n = N + M
    Ma = np.zeros((n, n))
    Ma[:N, :N], Ma[:N, N:] = A, B
    Qa = np.block([[Q, S], [S.T, Rth]])
    P0 = np.zeros((n, n))
    P0[:N, :N] = PT
    s = float(q) - float(p)
    C = np.block([[-Ma.T, Qa], [np.zeros((n, n)), Ma]])
    E = expm(s * C)
    eM = E[n:, n:]                      # e^{Ma s}
    P = eM.T @ P0 @ eM + eM.T @ E[:n, n:]
    P = 0.5 * (P + P.T)
    dP = Ma.T @ P + P @ Ma + Qa
    zeta = np.hstack([xb, np.broadcast_to(w, (xb.shape[0], M))])  # (K, n)
    Pz = zeta @ P
    out = {
        "z": zeta @ eM.T[:, :N],
        "value": 0.5 * np.einsum("ki,ki->k", zeta, Pz),
        "adjoint": Pz[:, :N],
        "param_grad": Pz[:, N:],
        "depth_grad": -0.5 * np.einsum("ki,ij,kj->k", zeta, dP, zeta),
    }
    if x.ndim == 1:
        out = {k: v[0] for k, v in out.items()}
    return out


def lq_matrices(max_n: int = 6, max_m: int = 3, min_m: int = 0):
    """Hypothesis strategy for LQ data ``dict(A, B, Q, Rth, S, PT)``.

    ``A = -c I + G / N`` with ``c`` in [0.6, 1.5] and ``|G_ij| <= 0.5`` so that
    ``||G / N||_2 <= 0.5 < c``: every eigenvalue has real part <= -0.1 (stable).
    ``Q = L L^T`` and ``PT = K K^T`` are positive semidefinite, ``Rth = L' L'^T + 0.5 I``
    positive definite; every entry of ``B``, ``S`` and the factors lies in [-1, 1].
    """
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    def mats(shape):
        return arrays(np.float64, shape,
                      elements=st.floats(-1.0, 1.0, allow_nan=False, allow_subnormal=False))

    @st.composite
    def strategy(draw):
        N = draw(st.integers(1, max_n))
        M = draw(st.integers(min_m, max_m))
        c = draw(st.floats(0.6, 1.5))
        A = -c * np.eye(N) + 0.5 * draw(mats((N, N))) / N
        B = draw(mats((N, M)))
        L = draw(mats((N, N)))
        K = draw(mats((N, N)))
        Lr = draw(mats((M, M)))
        S = 0.5 * draw(mats((N, M)))
        return dict(A=A, B=B, Q=L @ L.T, Rth=Lr @ Lr.T + 0.5 * np.eye(M), S=S, PT=K @ K.T)

    return strategy()


# -- logistic --------------------------------------------------------------------------
def logistic_functions(y: float = 0.3, c: float = 0.5, rho: float = 0.2,
                       q: float = 0.0) -> ProblemFunctions:
    r"""The logistic equation, a nonlinear ODE with a closed-form flow.

    ``dz/dt = theta z (1 - z)`` (``N = M = 1``), ``R = c z + rho theta^2 / 2``,
    ``T = (z - y)^2 / 2``. See :func:`logistic_closed_form`.
    """

    def f(t, z, th):
        return th * z * (1 - z)

    def R(t, z, th):
        return c * z[:, 0] + 0.5 * rho * th[:, 0] ** 2

    def T(z):
        return 0.5 * (z[:, 0] - y) ** 2

    one = lambda z: np.ones((len(z), 1, 1))  # noqa: E731
    d = {
        "f_z": lambda t, z, th: (th * (1 - 2 * z))[:, :, None],
        "f_theta": lambda t, z, th: (z * (1 - z))[:, :, None],
        "f_zz": lambda t, z, th: (-2 * th)[:, :, None, None],
        "f_ztheta": lambda t, z, th: (1 - 2 * z)[:, :, None, None],
        "f_zzz": lambda t, z, th: _zeros(z, 1, 1, 1, 1),
        "R_z": lambda t, z, th: np.full((len(z), 1), c),
        "R_theta": lambda t, z, th: rho * th,
        "R_zz": lambda t, z, th: _zeros(z, 1, 1),
        "R_ztheta": lambda t, z, th: _zeros(z, 1, 1),
        "R_zzz": lambda t, z, th: _zeros(z, 1, 1, 1),
        "T_z": lambda z: z - y,
        "T_zz": one,
        "T_zzz": lambda z: _zeros(z, 1, 1, 1),
    }
    return ProblemFunctions(f, R, T, d, 1, 1, float(q), info=dict(y=y, c=c, rho=rho))


def logistic_problem(y: float = 0.3, c: float = 0.5, rho: float = 0.2,
                     q: float = 0.0) -> invimbed.BolzaProblem:
    """The :class:`invimbed.BolzaProblem` of :func:`logistic_functions`."""
    return logistic_functions(y, c, rho, q).problem()


def logistic_closed_form(x: Any, w: float, p: float, q: float = 0.0, y: float = 0.3,
                         c: float = 0.5, rho: float = 0.2) -> dict[str, np.ndarray]:
    r"""Exact fields of :func:`logistic_functions` under ``theta(t) = w`` (``w != 0``).

    With ``s = q - p``, ``E = e^{w s}``, ``D = 1 - x + x E``:

    .. math::

        Z = x E / D,\quad \int_p^q z\,dt = \ln D / w,\quad
        \partial_x Z = E / D^2,\quad \partial_w Z = s x (1 - x) E / D^2,\quad
        \partial_s Z = w Z (1 - Z),

    so ``J = (Z - y)^2/2 + c ln(D)/w + rho w^2 s/2`` and

    * ``grad_x J = (Z - y) E/D^2 + c (E - 1)/(w D)``
    * ``dJ/dw = (Z - y) s x (1-x) E/D^2 + c (s x E/(w D) - ln(D)/w^2) + rho w s``
    * ``dJ/dp = -dJ/ds = -[(Z - y) w Z (1 - Z) + c Z + rho w^2 / 2]``.

    Parameters
    ----------
    x : float or array_like, shape (K,)
        Inputs; keep ``D > 0`` (e.g. ``0 < x < 1``).
    w : float
        The constant growth rate.
    p, q : float
    y, c, rho : float
        As in :func:`logistic_functions`.

    Returns
    -------
    dict
        ``z``, ``adjoint``, ``param_grad`` of shape (..., 1) and ``value``,
        ``depth_grad`` of shape (...), ``...`` the shape of ``x``.
    """
    x = np.asarray(x, dtype=float)
    w = float(np.reshape(w, -1)[0])
    s = float(q) - float(p)
    E = np.exp(w * s)
    D = 1 - x + x * E
    Z = x * E / D
    lnD = np.log(D)
    value = 0.5 * (Z - y) ** 2 + c * lnD / w + 0.5 * rho * w ** 2 * s
    adjoint = (Z - y) * E / D ** 2 + c * (E - 1) / (w * D)
    param_grad = ((Z - y) * s * x * (1 - x) * E / D ** 2
                  + c * (s * x * E / (w * D) - lnD / w ** 2) + rho * w * s)
    depth_grad = -((Z - y) * w * Z * (1 - Z) + c * Z + 0.5 * rho * w ** 2)
    return {"z": Z[..., None], "value": value, "adjoint": adjoint[..., None],
            "param_grad": param_grad[..., None], "depth_grad": depth_grad}


# -- pendulum --------------------------------------------------------------------------
def pendulum_functions(a: float = 1.0, forcing: float = 0.3, omega: float = 1.3,
                       c: float = 0.4, kv: float = 0.2, rho: float = 0.1, sigma: float = 0.15,
                       kT: float = 1.0, target: tuple[float, float] = (0.5, -0.2),
                       q: float = 0.0) -> ProblemFunctions:
    r"""A forced, damped pendulum with a controlled torque and damping.

    ``z = (phi, v)``, ``theta = (u, b)`` (``N = M = 2``):

    .. math::

        f = (v,\; -a \sin\phi - b v + u + \varepsilon \cos(\omega t)),

        R = c (1 - \cos\phi) + \tfrac{k_v}2 v^2 + \tfrac\rho2 (u^2 + b^2) + \sigma v u,

        T = k_T (1 - \cos(\phi - \phi^*)) + \tfrac14 (v - v^*)^4.

    The dynamics depend on ``t`` (``forcing = epsilon``), ``f_ztheta`` and ``R_ztheta``
    are nonzero and ``T`` is not quadratic, with a nonzero third derivative.
    """
    phs, vs = target

    def f(t, z, th):
        phi, v = z[:, 0], z[:, 1]
        u, b = th[:, 0], th[:, 1]
        return np.stack([v, -a * np.sin(phi) - b * v + u + forcing * np.cos(omega * t)], axis=1)

    def R(t, z, th):
        phi, v = z[:, 0], z[:, 1]
        u, b = th[:, 0], th[:, 1]
        return c * (1 - np.cos(phi)) + 0.5 * kv * v ** 2 + 0.5 * rho * (u ** 2 + b ** 2) + sigma * v * u

    def T(z):
        return kT * (1 - np.cos(z[:, 0] - phs)) + 0.25 * (z[:, 1] - vs) ** 4

    def f_z(t, z, th):
        out = _zeros(z, 2, 2)
        out[:, 0, 1] = 1.0
        out[:, 1, 0] = -a * np.cos(z[:, 0])
        out[:, 1, 1] = -th[:, 1]
        return out

    def f_theta(t, z, th):
        out = _zeros(z, 2, 2)
        out[:, 1, 0] = 1.0
        out[:, 1, 1] = -z[:, 1]
        return out

    def f_zz(t, z, th):
        out = _zeros(z, 2, 2, 2)
        out[:, 1, 0, 0] = a * np.sin(z[:, 0])
        return out

    def f_ztheta(t, z, th):
        out = _zeros(z, 2, 2, 2)
        out[:, 1, 1, 1] = -1.0
        return out

    def f_zzz(t, z, th):
        out = _zeros(z, 2, 2, 2, 2)
        out[:, 1, 0, 0, 0] = a * np.cos(z[:, 0])
        return out

    def R_z(t, z, th):
        return np.stack([c * np.sin(z[:, 0]), kv * z[:, 1] + sigma * th[:, 0]], axis=1)

    def R_theta(t, z, th):
        return np.stack([rho * th[:, 0] + sigma * z[:, 1], rho * th[:, 1]], axis=1)

    def R_zz(t, z, th):
        out = _zeros(z, 2, 2)
        out[:, 0, 0] = c * np.cos(z[:, 0])
        out[:, 1, 1] = kv
        return out

    def R_ztheta(t, z, th):
        out = _zeros(z, 2, 2)
        out[:, 1, 0] = sigma
        return out

    def R_zzz(t, z, th):
        out = _zeros(z, 2, 2, 2)
        out[:, 0, 0, 0] = -c * np.sin(z[:, 0])
        return out

    def T_z(z):
        return np.stack([kT * np.sin(z[:, 0] - phs), (z[:, 1] - vs) ** 3], axis=1)

    def T_zz(z):
        out = _zeros(z, 2, 2)
        out[:, 0, 0] = kT * np.cos(z[:, 0] - phs)
        out[:, 1, 1] = 3 * (z[:, 1] - vs) ** 2
        return out

    def T_zzz(z):
        out = _zeros(z, 2, 2, 2)
        out[:, 0, 0, 0] = -kT * np.sin(z[:, 0] - phs)
        out[:, 1, 1, 1] = 6 * (z[:, 1] - vs)
        return out

    d = dict(f_z=f_z, f_theta=f_theta, f_zz=f_zz, f_ztheta=f_ztheta, f_zzz=f_zzz, R_z=R_z,
             R_theta=R_theta, R_zz=R_zz, R_ztheta=R_ztheta, R_zzz=R_zzz, T_z=T_z, T_zz=T_zz,
             T_zzz=T_zzz)
    return ProblemFunctions(f, R, T, d, 2, 2, float(q))


def forced_double_pendulum(g: float = 3.0, amp: float = 2.0) -> tuple:
    """A two-link pendulum (unit masses and lengths) with a torque ``amp sin(3t)`` on the
    first link plus the constant control ``u``: ``(t, z, theta, f, R, T)`` as sympy
    objects, for ``invimbed.from_sympy`` or a ``SympyProvider`` (no closed form; the tests
    compare with `solve_adjoint`)."""
    import sympy as sp

    t, u = sp.Symbol("t"), sp.Symbol("u")
    a, b, va, vb = sp.symbols("a b va vb")
    d = a - b
    den = 3 - sp.cos(2 * a - 2 * b)
    aa = (-3 * g * sp.sin(a) - g * sp.sin(a - 2 * b)
          - 2 * sp.sin(d) * (vb ** 2 + va ** 2 * sp.cos(d))) / den
    bb = 2 * sp.sin(d) * (2 * va ** 2 + 2 * g * sp.cos(a) + vb ** 2 * sp.cos(d)) / den
    f = [va, vb, aa + u + amp * sp.sin(3 * t), bb]
    R = 0.1 * (a ** 2 + b ** 2) + 0.05 * u ** 2
    T = (1 - sp.cos(a - 1)) + (1 - sp.cos(b)) + 0.05 * (va ** 2 + vb ** 2)
    return t, [a, b, va, vb], [u], f, R, T


# -- no control, no running loss ---------------------------------------------------------
def no_control_f(t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    """``dz/dt`` of a problem without control (``theta`` of size 0) or running loss, the
    time in ``f``: one sample (for ``numba.njit``)."""
    return np.array([z[1], -np.sin(z[0]) - 0.1 * z[1] * t])


def no_control_T(z: np.ndarray) -> float:
    """The terminal loss of `no_control_f`'s problem (the integer 1: the trace prints as
    `no_control_sympy`'s expressions, so both get the same generated code)."""
    return (z[0] - 1) ** 2 + z[0] * z[1] ** 2


def no_control_sympy() -> Any:
    """`no_control_f`'s problem from sympy expressions (``R`` absent). Its generated code
    is that of the per-sample functions traced: numba compiles it once for both (the
    modules are cached by their source). Skips without sympy."""
    import pytest

    sp = pytest.importorskip("sympy")
    t, a, b = sp.symbols("t a b")
    return invimbed.BolzaProblem.from_sympy(t, [a, b], [], [b, -sp.sin(a) - 0.1 * b * t], None,
                                            (a - 1) ** 2 + a * b ** 2)


# -- Van der Pol -----------------------------------------------------------------------
def sympy_pendulum(compile: str | None = None, a: float = 1.0, forcing: float = 0.3,
                   omega: float = 1.3, c: float = 0.4, kv: float = 0.2, rho: float = 0.1,
                   sigma: float = 0.15, kT: float = 1.0,
                   target: tuple[float, float] = (0.5, -0.2)) -> Any:
    """`pendulum_functions`' problem built with ``invimbed.from_sympy`` (exact derivatives
    of every order from the symbolic provider; ``compile`` as there). Skips without
    sympy."""
    import pytest

    sp = pytest.importorskip("sympy")
    import invimbed

    phs, vs = target
    t = sp.Symbol("t")
    z = sp.symbols("q v")
    th = sp.symbols("u c")
    f = [z[1], -a * sp.sin(z[0]) - th[1] * z[1] + th[0] + forcing * sp.cos(omega * t)]
    R = (c * (1 - sp.cos(z[0])) + kv / 2 * z[1] ** 2 + rho / 2 * (th[0] ** 2 + th[1] ** 2)
         + sigma * z[1] * th[0])
    T = kT * (1 - sp.cos(z[0] - phs)) + (z[1] - vs) ** 4 / 4
    return invimbed.from_sympy(t, z, th, f, R, T, compile=compile)


def vanderpol_functions(alpha: float = 0.3, beta: float = 0.1, kappa: float = 0.2,
                        gamma: float = 0.25, target: tuple[float, float] = (1.0, -0.5),
                        q: float = 0.0) -> ProblemFunctions:
    r"""The Van der Pol oscillator with the damping ``mu`` and a forcing ``u`` as controls.

    ``z = (x, v)``, ``theta = (mu, u)`` (``N = M = 2``):

    .. math::

        f = (v,\; \mu (1 - x^2) v - x + u),

        R = \tfrac\alpha2 (x^2 + v^2) + \tfrac\beta4 x^4 + \tfrac\kappa2 u^2
            + \gamma \mu x v,

        T = \ln(1 + |z - z^*|^2).

    ``f`` is cubic in ``z`` (nonzero ``f_zzz``) and bilinear in ``(z, mu)``.
    """
    y = np.asarray(target, dtype=float)

    def f(t, z, th):
        x, v = z[:, 0], z[:, 1]
        mu, u = th[:, 0], th[:, 1]
        return np.stack([v, mu * (1 - x ** 2) * v - x + u], axis=1)

    def R(t, z, th):
        x, v = z[:, 0], z[:, 1]
        mu, u = th[:, 0], th[:, 1]
        return (0.5 * alpha * (x ** 2 + v ** 2) + 0.25 * beta * x ** 4 + 0.5 * kappa * u ** 2
                + gamma * mu * x * v)

    def T(z):
        return np.log1p(np.sum((z - y) ** 2, axis=1))

    def f_z(t, z, th):
        x, v, mu = z[:, 0], z[:, 1], th[:, 0]
        out = _zeros(z, 2, 2)
        out[:, 0, 1] = 1.0
        out[:, 1, 0] = -2 * mu * x * v - 1
        out[:, 1, 1] = mu * (1 - x ** 2)
        return out

    def f_theta(t, z, th):
        x, v = z[:, 0], z[:, 1]
        out = _zeros(z, 2, 2)
        out[:, 1, 0] = (1 - x ** 2) * v
        out[:, 1, 1] = 1.0
        return out

    def f_zz(t, z, th):
        x, v, mu = z[:, 0], z[:, 1], th[:, 0]
        out = _zeros(z, 2, 2, 2)
        out[:, 1, 0, 0] = -2 * mu * v
        out[:, 1, 0, 1] = out[:, 1, 1, 0] = -2 * mu * x
        return out

    def f_ztheta(t, z, th):
        x, v = z[:, 0], z[:, 1]
        out = _zeros(z, 2, 2, 2)
        out[:, 1, 0, 0] = -2 * x * v
        out[:, 1, 1, 0] = 1 - x ** 2
        return out

    def f_zzz(t, z, th):
        mu = th[:, 0]
        out = _zeros(z, 2, 2, 2, 2)
        out[:, 1, 0, 0, 1] = out[:, 1, 0, 1, 0] = out[:, 1, 1, 0, 0] = -2 * mu
        return out

    def R_z(t, z, th):
        x, v, mu = z[:, 0], z[:, 1], th[:, 0]
        return np.stack([alpha * x + beta * x ** 3 + gamma * mu * v,
                         alpha * v + gamma * mu * x], axis=1)

    def R_theta(t, z, th):
        x, v, u = z[:, 0], z[:, 1], th[:, 1]
        return np.stack([gamma * x * v, kappa * u], axis=1)

    def R_zz(t, z, th):
        x, mu = z[:, 0], th[:, 0]
        out = _zeros(z, 2, 2)
        out[:, 0, 0] = alpha + 3 * beta * x ** 2
        out[:, 0, 1] = out[:, 1, 0] = gamma * mu
        out[:, 1, 1] = alpha
        return out

    def R_ztheta(t, z, th):
        x, v = z[:, 0], z[:, 1]
        out = _zeros(z, 2, 2)
        out[:, 0, 0] = gamma * v
        out[:, 1, 0] = gamma * x
        return out

    def R_zzz(t, z, th):
        out = _zeros(z, 2, 2, 2)
        out[:, 0, 0, 0] = 6 * beta * z[:, 0]
        return out

    def T_z(z):
        dz = z - y
        g = 1 + np.sum(dz ** 2, axis=1)
        return 2 * dz / g[:, None]

    def T_zz(z):
        dz = z - y
        g = (1 + np.sum(dz ** 2, axis=1))[:, None, None]
        return 2 * np.eye(2) / g - 4 * np.einsum("bi,bj->bij", dz, dz) / g ** 2

    def T_zzz(z):
        dz = z - y
        g = (1 + np.sum(dz ** 2, axis=1))[:, None, None, None]
        eye = np.eye(2)
        sym = (np.einsum("ij,bk->bijk", eye, dz) + np.einsum("ik,bj->bijk", eye, dz)
               + np.einsum("jk,bi->bijk", eye, dz))
        return -4 * sym / g ** 2 + 16 * np.einsum("bi,bj,bk->bijk", dz, dz, dz) / g ** 3

    d = dict(f_z=f_z, f_theta=f_theta, f_zz=f_zz, f_ztheta=f_ztheta, f_zzz=f_zzz, R_z=R_z,
             R_theta=R_theta, R_zz=R_zz, R_ztheta=R_ztheta, R_zzz=R_zzz, T_z=T_z, T_zz=T_zz,
             T_zzz=T_zzz)
    return ProblemFunctions(f, R, T, d, 2, 2, float(q))


# -- independent references --------------------------------------------------------------
def piecewise_theta(knots: Any, values: Any) -> Callable[[float], np.ndarray]:
    """``theta(t) = values[k]`` for ``knots[k] <= t < knots[k + 1]``, written without
    :mod:`invimbed` (the last interval is closed; ``values`` of shape (K, M) or (K,))."""
    knots = np.asarray(knots, dtype=float)
    values = np.asarray(values, dtype=float)
    values = values[:, None] if values.ndim == 1 else values

    def theta(t: float) -> np.ndarray:
        k = int(np.searchsorted(knots, t, side="right")) - 1
        return values[min(max(k, 0), len(values) - 1)]

    return theta


def brute_force(fns: ProblemFunctions, x: Any, p: float, theta: Any,
                breakpoints: Any = (), rtol: float = 1e-13, atol: float = 1e-14,
                method: str = "DOP853") -> tuple[np.ndarray, np.ndarray]:
    """``z(q)`` and ``J`` by one forward ``solve_ivp`` of ``(z, int R)`` from ``p`` to ``q``.

    Independent of :mod:`invimbed`: it calls only the problem's own functions.

    Parameters
    ----------
    fns : ProblemFunctions
    x : array_like, shape (K, N)
        A batch of inputs, integrated as one system (so finite differences taken
        across the batch share one step sequence).
    p : float
    theta : array_like, shape (M,) or (K, M), or callable ``theta(t) -> (M,) or (K, M)``
        The control. A callable is evaluated once per interval between consecutive
        ``breakpoints`` (at its midpoint): piecewise-constant controls only.
    breakpoints : array_like
        Times where ``theta`` jumps.
    rtol, atol : float
    method : str

    Returns
    -------
    zq : ndarray, shape (K, N)
    J : ndarray, shape (K,)
    """
    x = np.atleast_2d(np.asarray(x, dtype=float))
    K, N = x.shape
    q = fns.q
    th_fn = theta if callable(theta) else (lambda t: theta)
    ends = [p] + sorted(b for b in np.asarray(breakpoints, float).ravel() if p < b < q) + [q]
    y = np.concatenate([x.ravel(), np.zeros(K)])
    for lo, hi in zip(ends[:-1], ends[1:]):
        if hi <= lo:
            continue
        th = np.broadcast_to(np.asarray(th_fn(0.5 * (lo + hi)), dtype=float),
                             (K, fns.n_theta))

        def rhs(t, yy, th=th):
            z = yy[:K * N].reshape(K, N)
            return np.concatenate([fns.f(t, z, th).ravel(), fns.R(t, z, th)])

        sol = solve_ivp(rhs, (lo, hi), y, method=method, rtol=rtol, atol=atol)
        if sol.status != 0:
            raise RuntimeError(f"brute_force: solve_ivp failed: {sol.message}")
        y = sol.y[:, -1]
    zq = y[:K * N].reshape(K, N)
    return zq, y[K * N:] + fns.T(zq)


class _Opaque:
    def value(self, z):
        return z


_OPAQUE = _Opaque()


def uncompilable_dynamics(t: float, z: np.ndarray, th: np.ndarray) -> np.ndarray:
    """Dynamics numba cannot compile (a method call on a Python object, ``_OPAQUE``):
    the accelerated backends must refuse them naming the function and numba's reason."""
    return _OPAQUE.value(z)
