"""Radau IIA collocation: the implicit transcription of `solve_ocp` for stiff intervals
(docs/optimal-control.md, "Stiff intervals: Radau collocation"), of the Bolza problem of
eq. (4) (docs/theory.md, "The Bolza problem").

The horizon is cut at the same nodes as multiple shooting (`invimbed._control.ocp.shooting`),
``t_k = q - H (1 - tau_k)``, the control constant on each interval. Inside interval ``k``
(length ``h_k``) the state is the polynomial of degree ``d`` through the node state
``s_k`` (at fraction 0) and ``d`` collocation states ``X_k1 .. X_kd`` at the Radau IIA
points ``0 < c_1 < ... < c_d = 1`` (the zeros of ``P_d - P_(d-1)`` mapped to
``[0, 1]``, ``P`` Legendre's polynomials); the last is the next node, ``X_kd =
s_(k+1)``, so continuity holds by construction. The ODE is enforced at the points:

```text
G_kj = h_k f(t_kj, X_kj, u_k) - sum_(r=0..d) C_rj X_kr = 0,     j = 1..d,
J    = sum_k h_k sum_j b_j R(t_kj, X_kj, u_k) + T(s_K),
```

``C_rj = l_r'(c_j)`` the derivatives of the Lagrange basis on ``(0, c_1, .., c_d)`` and
``b_j`` the Radau IIA weights (for ``d >= 2`` the integrals of ``l_j``; ``d = 1`` is the
implicit Euler method, ``b_1 = 1``): an implicit Runge-Kutta method of order
``2 d - 1`` that is L-stable and stiffly accurate, so an interval far longer than the
dynamics' fastest time scale stays a well-posed equation (an explicit integrator needs
steps within its stability limit there). These are the equations of CasADi's
``direct_collocation`` example with ``collocation_points(d, "radau")``.

Every derivative is exact (the problem's provider): the Jacobian of ``G`` is block
sparse, and the Hessian of the Lagrangian ``sigma J + lambda^T G`` has one
``(n + m) x (n + m)`` block per collocation point, ``h_k (sigma b_j grad^2 R +
lambda_kj . grad^2 f)`` over ``(X_kj, u_k)``, and ``sigma T_zz`` at ``s_K``.

The decision vector is shooting's ``(u_0, s_1, .., u_(K-1), s_K)`` followed by the
interior collocation states ``X_kj``, ``j < d``, interval by interval, and the horizon
``H`` last where it is free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.polynomial import Polynomial
from numpy.polynomial import legendre

from .constraints import shift_index
from .shooting import Shooting

_EPS = np.finfo(float).eps


def radau_iia(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The Radau IIA collocation data of ``d`` points.

    Returns
    -------
    c : ndarray, shape (d,)
        The points in ``(0, 1]``, ``c_d = 1``.
    C : ndarray, shape (d + 1, d)
        ``C[r, j] = l_r'(c_j)``, the Lagrange basis on ``(0, c_1, .., c_d)``.
    b : ndarray, shape (d,)
        The weights, the integrals over ``[0, 1]`` of the Lagrange basis on ``c``
        (equal to ``int_0^1 l_j`` for ``d >= 2``).
    basis : list of numpy.polynomial.Polynomial
        ``l_0 .. l_d``.
    """
    coef = np.zeros(d + 1)
    coef[d], coef[d - 1] = 1.0, -1.0
    c = np.sort((legendre.legroots(coef).real + 1.0) / 2.0)
    c[-1] = 1.0
    nodes = np.concatenate([[0.0], c])
    basis = []
    for r in range(d + 1):
        others = np.delete(nodes, r)
        basis.append(Polynomial.fromroots(others) / np.prod(nodes[r] - others))
    C = np.array([[p.deriv()(cj) for cj in c] for p in basis])
    b = np.empty(d)                     # the quadrature on c_1 .. c_d (degree 2 d - 2)
    for j in range(d):
        others = np.delete(c, j)
        L = (Polynomial.fromroots(others) if others.size else Polynomial([1.0])) / np.prod(
            c[j] - others)
        b[j] = L.integ()(1.0) - L.integ()(0.0)
    return c, C, b, basis


@dataclass
class CollocationEval:
    """The functions and first derivatives at every collocation point, at one ``w``
    (what `Collocation.solve` gives; the place of shooting's `IntervalSolve`)."""

    X: np.ndarray          # (K, d, n) collocation states, X[:, -1] = s_(k+1)
    t: np.ndarray          # (K, d) their times
    f: np.ndarray          # (K, d, n)
    R: np.ndarray          # (K, d)
    f_z: np.ndarray        # (K, d, n, n)
    f_u: np.ndarray        # (K, d, n, m)
    R_z: np.ndarray        # (K, d, n)
    R_u: np.ndarray        # (K, d, m)
    F: np.ndarray          # (K, n) s_k + h_k sum_j b_j f_kj (the Runge-Kutta step's end)
    C: np.ndarray          # (K,) interval costs h_k sum_j b_j R_kj
    nfev: int
    failure: str | None
    h: np.ndarray | None = None        # (K,) the interval lengths H (tau_(k+1) - tau_k)
    H: float = 0.0                     # the horizon
    f_t: np.ndarray | None = None      # (K, d, n) df/dt (free horizon only)
    R_t: np.ndarray | None = None      # (K, d)


class Collocation(Shooting):
    """The Radau IIA collocation transcription of one problem, input and grid.

    It keeps shooting's nodes (the first ``K (n + m)`` entries of the decision vector,
    `unpack`, `u_index`, `s_index`, `times`, the objective) and what
    `invimbed._control.ocp.nlp.ShootingNLP` and the constraint blocks read of a
    transcription, with ``solve`` evaluating the functions at the collocation points
    instead of integrating the intervals.

    Parameters
    ----------
    provider, x, q, tau, free_horizon, horizon, m
        As `Shooting`'s; the provider's second derivatives serve the exact Hessian.
        With a free horizon ``H`` (last in the decision vector) ``h_k = H (tau_(k+1) -
        tau_k)`` and ``t_kj = q - H (1 - theta_kj)`` move with it; derivatives in ``t``
        (where the problem depends on it) are central differences (`time_derivative`).
    degree : int
        ``d``, the collocation points per interval (order ``2 d - 1``).
    """

    defect_name = "collocation equations"

    def __init__(self, provider, x: np.ndarray, q: float, tau: np.ndarray, *,
                 horizon: float, m: int, degree: int = 3, free_horizon: bool = False) -> None:
        super().__init__(provider, x, q, tau, free_horizon=free_horizon, horizon=horizon,
                         m=m)
        self.d = int(degree)
        self.c, self.C, self.b, self.basis = radau_iia(self.d)
        self.n_inner = self.K * (self.d - 1) * self.n
        self.n_vars = self.K * self.block + self.n_inner + int(free_horizon)
        self.n_defects = self.K * self.d * self.n
        self.dtau = np.diff(self.tau)
        # the collocation points as fractions of the horizon, theta_kj (K, d)
        self.theta = self.tau[:-1, None] + self.c[None, :] * self.dtau[:, None]
        n, d, K = self.n, self.d, self.K
        # positions in w of X_kr, r = 0..d (r = 0: s_k, -1 for the fixed s_0)
        idx = np.empty((K, d + 1, n), dtype=int)
        for k in range(K):
            idx[k, 0] = self.s_index(k) if k else -1
            idx[k, d] = self.s_index(k + 1)
            for j in range(1, d):
                idx[k, j] = self.inner_index(k, j)
        self.x_index = idx

    # -- the decision vector (shooting's layout, then the interior states) -------------
    def states(self, w: np.ndarray) -> np.ndarray:
        """``X_kr`` for ``r = 0..d`` (K, d + 1, n): the node, the collocation states."""
        w = np.asarray(w, dtype=float)
        X = w[np.maximum(self.x_index, 0)]
        X[0, 0] = self.x
        return X

    def pack(self, S: np.ndarray, U: np.ndarray, H: float | None = None) -> np.ndarray:
        """The decision vector of node states ``S`` (K + 1, n; ``S[0]`` ignored) and
        controls ``U`` (K, m), the interior collocation states at their interval's end
        node ``s_(k+1)``: on a stiff interval the state reaches its slow manifold early
        (docs/optimal-control.md, "Stiff intervals", measures the choice)."""
        S = np.reshape(S, (self.K + 1, self.n))
        blocks = np.concatenate([np.reshape(U, (self.K, self.m)), S[1:]], axis=1)
        inner = np.repeat(S[1:], self.d - 1, axis=0)
        w = np.concatenate([blocks.ravel(), inner.ravel()])
        if self.free_horizon:
            w = np.append(w, self.horizon if H is None else H)
        return w

    def inner_index(self, k: int, j: int) -> np.ndarray:
        """Positions of the interior collocation state ``X_kj`` (``1 <= j < d``)."""
        return self.K * self.block + ((k * (self.d - 1) + j - 1) * self.n
                                      + np.arange(self.n))

    def inner_positions(self) -> np.ndarray:
        """Positions of all interior collocation states (their state bounds)."""
        return self.K * self.block + np.arange(self.n_inner)

    def moved_index(self, shift: int) -> np.ndarray:
        """For each entry of the decision vector, the entry it takes when the solution
        moves ``shift`` intervals on (`invimbed.OCPSolver`'s warm start): interval ``k``'s
        control, end node and interior states from interval ``min(k + shift, K - 1)``,
        the horizon staying (shooting's `shift_index` on both parts of the layout)."""
        K = self.K
        nodes = shift_index(K, self.block, shift)
        inner = shift_index(K, (self.d - 1) * self.n, shift, int(self.free_horizon))
        return np.concatenate([nodes, K * self.block + inner])

    # -- the evaluation ----------------------------------------------------------------
    def point_times(self, H: float) -> np.ndarray:
        """The collocation times ``t_kj = q - H (1 - theta_kj)`` (K, d)."""
        return self.q - H * (1.0 - self.theta)

    def solve(self, w: np.ndarray, *, record: bool = False) -> CollocationEval:
        """``f``, ``R`` and their first derivatives at every collocation point, in one
        vectorised call each (``record`` is shooting's; nothing to record here)."""
        n, m, K, d = self.n, self.m, self.K, self.d
        Xall = self.states(w)
        _, U, H = self.unpack(w)
        X = Xall[:, 1:]
        t = self.point_times(H)
        z, u, tt = X.reshape(-1, n), np.repeat(U, d, axis=0), t.ravel()
        evals = self._evaluators()
        f, f_z, f_u, R, R_z, R_u = (g(tt, z, u) for g in evals)
        f_t = R_t = None
        if self.free_horizon:
            f_t = time_derivative(evals[0], tt, z, u).reshape(K, d, n)
            R_t = time_derivative(evals[3], tt, z, u).reshape(K, d)
        f, R = f.reshape(K, d, n), R.reshape(K, d)
        failure = None
        finite = [np.all(np.isfinite(np.reshape(a, (K, d, -1))), axis=2)
                  for a in (f, R, f_z, f_u, R_z, R_u)]
        bad = ~np.logical_and.reduce(finite)
        if np.any(bad):
            k, j = (int(a[0]) for a in np.nonzero(bad))
            failure = (f"the dynamics or the running loss (or a first derivative) is not "
                       f"finite at collocation point {j + 1} of interval {k} (t = "
                       f"{t[k, j]:.6g}, z = "
                       f"{np.array2string(X[k, j], precision=6)}, u = "
                       f"{np.array2string(U[k], precision=6)}; {int(bad.sum())} points)")
        h = H * self.dtau
        hb = h[:, None] * self.b[None, :]
        return CollocationEval(
            X=X, t=t, f=f, R=R, f_z=f_z.reshape(K, d, n, n), f_u=f_u.reshape(K, d, n, m),
            R_z=R_z.reshape(K, d, n), R_u=R_u.reshape(K, d, m),
            F=Xall[:, 0] + np.einsum("kj,kji->ki", hb, f), C=np.sum(hb * R, axis=1),
            nfev=1, failure=failure, h=h, H=H, f_t=f_t, R_t=R_t)

    def solve_points(self, ws: np.ndarray, *, record: bool = False) -> list:
        """`solve` at each row of ``ws``."""
        return [self.solve(w) for w in ws]

    # -- objective (shooting's: sum_k C_k + T(s_K)) and defects --------------------------
    def gradient(self, w: np.ndarray, sol: CollocationEval) -> np.ndarray:
        S, _, _ = self.unpack(w)
        g = np.zeros(self.n_vars)
        hb = sol.h[:, None] * self.b[None, :]
        np.add.at(g, self.x_index[:, 1:].ravel(), (hb[..., None] * sol.R_z).ravel())
        g[self.s_index(self.K)] += self.prov.derivative("T", self.q, S[-1:], None, dz=1)[0]
        u_pos = self.block * np.arange(self.K)[:, None] + np.arange(self.m)[None, :]
        g[u_pos] = np.einsum("kj,kjm->km", hb, sol.R_u)
        if self.free_horizon:                # C_k = H dtau_k sum_j b_j R(q - H (1 - theta))
            db = self.dtau[:, None] * self.b[None, :]
            g[-1] = np.sum(db * (sol.R + sol.H * (self.theta - 1.0) * sol.R_t))
        return g

    def defects(self, w: np.ndarray, sol: CollocationEval) -> np.ndarray:
        """``G_kj``, shape (K d n,), in the order (interval, point, state)."""
        X = self.states(w)
        G = sol.h[:, None, None] * sol.f - np.einsum("rj,kri->kji", self.C, X)
        return G.ravel()

    def defect_structure(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of the defects' Jacobian (COO), in the order of
        `defect_jacobian`'s values: per point ``(k, j)`` the block over ``X_kj`` (n x n),
        the diagonals over the other states ``X_kr`` (``s_0`` fixed: none), ``u_k``
        (n x m), and ``H`` (n x 1) where it is free."""
        if not hasattr(self, "_pattern"):
            n, m, d, K = self.n, self.m, self.d, self.K
            row = (np.arange(K)[:, None, None] * d + np.arange(d)[None, :, None]) * n \
                + np.arange(n)[None, None, :]                                  # (K, d, n)
            others = np.array([[r for r in range(d + 1) if r != j] for j in range(1, d + 1)])
            kk = np.arange(K)[:, None, None]
            rows = [np.repeat(row, n, axis=2),
                    np.tile(row, (1, 1, d)),
                    np.repeat(row, m, axis=2)]
            cols = [np.tile(self.x_index[:, 1:], (1, 1, n)).reshape(K, d, n * n),
                    self.x_index[kk, others[None]].reshape(K, d, d * n),
                    np.broadcast_to(np.tile(np.arange(m) + self.block * kk, (1, 1, n)),
                                    (K, d, n * m))]
            if self.free_horizon:
                rows.append(row)
                cols.append(np.full((K, d, n), self.h_index))
            rows, cols = np.concatenate(rows, axis=2), np.concatenate(cols, axis=2)
            self._keep = cols >= 0
            self._others = others
            self._pattern = rows[self._keep], cols[self._keep]
        return self._pattern

    def defect_jacobian(self, sol: CollocationEval) -> np.ndarray:
        """The values of the defects' Jacobian in the order of `defect_structure`."""
        n, m, d, K = self.n, self.m, self.d, self.K
        self.defect_structure()
        diag = np.diagonal(self.C[1:]).copy()                         # C[j, j - 1]
        h = sol.h[:, None, None, None]
        own = h * sol.f_z - diag[None, :, None, None] * np.eye(n)
        Co = -self.C[self._others, np.arange(d)[:, None]]              # (d, d): -C[r, j - 1]
        other = np.broadcast_to(np.repeat(Co, n, axis=1)[None], (K, d, d * n))
        vals = [own.reshape(K, d, n * n), other, (h * sol.f_u).reshape(K, d, n * m)]
        if self.free_horizon:                # d/dH of h_k f(q - H (1 - theta_kj), ...)
            vals.append(self.dtau[:, None, None] * (
                sol.f + sol.H * (self.theta - 1.0)[..., None] * sol.f_t))
        return np.concatenate(vals, axis=2)[self._keep]

    # -- inside the intervals ------------------------------------------------------------
    def interior(self, w: np.ndarray, sol: CollocationEval, fractions: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, None, None, None]:
        """The collocation polynomials at the given fractions of every interval: ``(t,
        z, None, None, None)``, shapes (K, P), (K, P, n) (no sensitivities: the path
        constraints of the collocation transcription hold at the nodes)."""
        _, _, H = self.unpack(w)
        t = self.times(H)
        tt = t[:-1, None] + fractions[None, :] * (H * self.dtau)[:, None]
        L = np.array([[p(a) for p in self.basis] for a in fractions])      # (P, d + 1)
        z = np.einsum("pr,kri->kpi", L, self.states(w))
        return tt, z, None, None, None


#: The transcriptions of `solve_ocp`.
TRANSCRIPTIONS = ("shooting", "collocation")


def time_derivative(g, t: np.ndarray, z: np.ndarray, u: np.ndarray, *,
                    second: bool = False) -> np.ndarray:
    """``dg/dt`` (``second``: ``d^2 g / dt^2``) of an evaluator ``g(t, z, u)`` at the
    rows' times ``t`` (B,), by central differences with the step ``eps^(1/3) max(1,
    |t|)`` (``eps^(1/4)`` for the second): the providers give derivatives in ``z`` and
    ``theta`` only. Exactly 0 where ``g`` does not depend on ``t``."""
    dt = _EPS ** (0.25 if second else 1.0 / 3.0) * np.maximum(1.0, np.abs(t))
    up, down = np.asarray(g(t + dt, z, u)), np.asarray(g(t - dt, z, u))
    dt = dt.reshape((-1,) + (1,) * (up.ndim - 1))
    if second:
        return (up - 2.0 * np.asarray(g(t, z, u)) + down) / dt ** 2
    return (up - down) / (2.0 * dt)


def check_collocation(hessian: str, path_points: int) -> None:
    """Refuse what the collocation transcription does not take, naming the argument."""
    if hessian == "finite-differences":
        raise ValueError("hessian='finite-differences' differences shooting's exact "
                         "gradients; transcription='collocation' has its exact Hessian "
                         "(the default, hessian='auto') or L-BFGS (hessian='limited-memory')")
    if path_points:
        raise ValueError(f"path_points = {path_points}: transcription='collocation' "
                         f"enforces path constraints and state bounds at the nodes and "
                         f"bounds the collocation states; pass path_points=0, or more "
                         f"`intervals`")
