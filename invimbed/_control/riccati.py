"""Linear-quadratic problems in `solve_optimal`: detection and the matrix Riccati sweep.

A Bolza problem is *linear-quadratic* (LQ) when, at every time, the dynamics are affine
and the losses quadratic (or affine) in the state ``z`` and the control ``theta``:

    f = A z + B theta + c,
    R = z^T Q z / 2 + z^T S theta + theta^T R_u theta / 2 + q_v . z + r_v . theta + r_0,
    T = z^T P_T z / 2 + t_v . z + t_0.

The value function is then exactly quadratic, ``V(p, x) = x^T P x / 2 + r . x + c_0``,
the optimal feedback affine, ``Psi = -R_u^-1 (B^T (P x + r) + S^T x + r_v)``, and the HJB
equation of `solve_optimal` is the matrix Riccati equation with its affine companions
(docs/optimal-control.md, "When the sweep is exact"):

    -dP/dp = A^T P + P A - (P B + S) R_u^-1 (B^T P + S^T) + Q,          P(q) = P_T,
    -dr/dp = A^T r + P c - (P B + S) R_u^-1 (B^T r + r_v) + q_v,        r(q) = t_v,
    -dc_0/dp = r . c - (B^T r + r_v)^T R_u^-1 (B^T r + r_v) / 2 + r_0,  c_0(q) = t_0.

The closed-loop output ``z(q; p, x) = Phi(p) x + phi(p)`` is affine in ``x`` too; it is
carried along in the same sweep (the imbedding's transport of ``Z``):
``dPhi/dp = -Phi (A - B K)``, ``dphi/dp = -Phi (c - B k)`` with ``Phi(q) = I``,
``phi(q) = 0``, ``K = R_u^-1 (B^T P + S^T)``, ``k = R_u^-1 (B^T r + r_v)``.

The coefficients are read off the problem's own functions by exact polynomial
interpolation with unit steps (values only: no finite-difference noise, whatever the
derivative provider). The structure is detected symbolically for `from_sympy`
problems (polynomial degree in ``z`` and ``theta``) and by a probe otherwise: the
interpolated model must reproduce ``f``, ``R`` and ``T`` at random points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.sweep.assembly import collect_results
from .._core.sweep.dense import attach_dense
from .._core.results.results import feedback_result
from .policy import policy_from_outcome
from .closed_loop import OptimalityError, failed_outcome, finish, integrate

#: Relative mismatch between a function and its interpolated affine/quadratic model
#: above which the problem is not linear-quadratic (or not control-affine).
PROBE_RTOL = 1e-8


@dataclass
class LQModel:
    """Coefficients of an LQ problem at one time (see the module docstring)."""

    A: np.ndarray
    B: np.ndarray
    c: np.ndarray
    Q: np.ndarray
    S: np.ndarray
    Ru: np.ndarray
    qv: np.ndarray
    rv: np.ndarray
    r0: float

    def close(self, other: "LQModel") -> bool:
        return all(np.allclose(getattr(self, k), getattr(other, k), rtol=1e-12, atol=1e-14)
                   for k in ("A", "B", "c", "Q", "S", "Ru", "qv", "rv", "r0"))


# -- exact interpolation of affine / quadratic functions --------------------------------------
def _quadratic_points(n: int) -> np.ndarray:
    """0, +-e_i and e_i + e_j (i < j): enough to interpolate a quadratic in n variables."""
    eye = np.eye(n)
    iu, ju = np.triu_indices(n, 1)
    return np.concatenate([np.zeros((1, n)), eye, -eye, eye[iu] + eye[ju]])


def _fit_quadratic(values: np.ndarray, n: int):
    """``(g0, grad, Hessian)`` of the quadratic through the values at `_quadratic_points`."""
    v0, vp, vm, vij = values[0], values[1:n + 1], values[n + 1:2 * n + 1], values[2 * n + 1:]
    grad = 0.5 * (vp - vm)
    H = np.diag(vp + vm - 2 * v0)
    iu, ju = np.triu_indices(n, 1)
    # quadratic: v(e_i + e_j) = v0 + g_i + g_j + (H_ii + H_jj)/2 + H_ij and
    # v(e_i) = v0 + g_i + H_ii / 2, so H_ij = v(e_i + e_j) - v(e_i) - v(e_j) + v0
    off = vij - vp[iu] - vp[ju] + v0
    H[iu, ju] = off
    H[ju, iu] = off
    return float(v0), grad, H


def _affine(provider, t: float, N: int, M: int):
    """``c, A, B`` of ``f = A z + B theta + c`` by central differences with unit steps
    (exact for affine ``f``)."""
    n = N + M
    eye = np.eye(n)
    W = np.concatenate([np.zeros((1, n)), eye, -eye])
    F = provider.derivative("f", t, W[:, :N], W[:, N:])
    J = (0.5 * (F[1:n + 1] - F[n + 1:])).T             # (N, n)
    return F[0], J[:, :N], J[:, N:]


def _quadratic(provider, which: str, t: float, N: int, M: int):
    n = N if which == "T" else N + M
    W = _quadratic_points(n)
    th = np.zeros((W.shape[0], M)) if which == "T" else W[:, N:]
    vals = provider.derivative(which, t, W[:, :N], th)
    return _fit_quadratic(np.asarray(vals, dtype=float), n)


def lq_model(provider, t: float, N: int, M: int) -> LQModel:
    """The coefficients of `LQModel` at time ``t`` (exact when the problem is LQ)."""
    c, A, B = _affine(provider, t, N, M)
    r0, g, H = _quadratic(provider, "R", t, N, M)
    return LQModel(A=A, B=B, c=c, Q=H[:N, :N], S=0.5 * (H[:N, N:] + H[N:, :N].T),
                   Ru=H[N:, N:], qv=g[:N], rv=g[N:], r0=r0)


def terminal_model(provider, q: float, N: int, M: int):
    """``(t_0, t_v, P_T)`` of the quadratic terminal loss."""
    return _quadratic(provider, "T", q, N, M)


def _mismatch(value, model, terms) -> float:
    """Largest relative mismatch between values and a model, against the terms' size."""
    scale = np.abs(value) + terms + np.finfo(float).tiny
    return float(np.max(np.abs(value - model) / scale))


def probe_lq(provider, times, x: np.ndarray, rng: np.random.Generator,
             scale_theta: float = 1.0) -> str | None:
    """Check the interpolated models against the functions at random points.

    Returns None when ``f``, ``R`` and ``T`` match their affine/quadratic models to
    `PROBE_RTOL` at every probed time, else a description of the first mismatch."""
    N, M = provider.n_state, provider.n_theta
    sz = max(1.0, float(np.abs(x).max()))
    k = 3
    Z = x[rng.integers(0, x.shape[0], k)] + sz * rng.normal(size=(k, N))
    TH = scale_theta * rng.normal(size=(k, M))
    for t in times:
        m = lq_model(provider, t, N, M)
        f = provider.derivative("f", t, Z, TH)
        fm = m.c + Z @ m.A.T + TH @ m.B.T
        terms = np.abs(m.c) + np.abs(Z) @ np.abs(m.A).T + np.abs(TH) @ np.abs(m.B).T
        if _mismatch(f, fm, terms) > PROBE_RTOL:
            return f"the dynamics f are not affine in (z, theta) at t = {t:.6g}"
        W = np.concatenate([Z, TH], 1)
        r0, g, H = _quadratic(provider, "R", t, N, M)
        R = provider.derivative("R", t, Z, TH)
        Rm = r0 + W @ g + 0.5 * np.einsum("bi,ij,bj->b", W, H, W)
        terms = abs(r0) + np.abs(W) @ np.abs(g) + 0.5 * np.einsum("bi,ij,bj->b", np.abs(W),
                                                                 np.abs(H), np.abs(W))
        if _mismatch(R, Rm, terms) > PROBE_RTOL:
            return f"the running loss R is not quadratic in (z, theta) at t = {t:.6g}"
    t0, tv, PT = terminal_model(provider, times[0], N, M)
    T = provider.derivative("T", times[0], Z, None)
    Tm = t0 + Z @ tv + 0.5 * np.einsum("bi,ij,bj->b", Z, PT, Z)
    terms = abs(t0) + np.abs(Z) @ np.abs(tv) + 0.5 * np.einsum("bi,ij,bj->b", np.abs(Z),
                                                              np.abs(PT), np.abs(Z))
    if _mismatch(T, Tm, terms) > PROBE_RTOL:
        return "the terminal loss T is not quadratic in z"
    return None


def symbolic_lq(provider) -> tuple[bool, bool, str | None]:
    """For a `SympyProvider`: ``(is_lq, time_varying, reason)`` from the expressions'
    polynomial degrees in ``(z, theta)`` (exact)."""
    import sympy as sp

    gens = tuple(provider.z) + tuple(provider.theta)
    ex = provider.expressions

    def degree(e, vars_):
        e = sp.sympify(e)
        if not e.free_symbols & set(vars_):
            return 0
        if not e.is_polynomial(*vars_):
            return None
        return sp.Poly(e, *vars_).total_degree()

    for i, e in enumerate(ex["f"]):
        d = degree(e, gens)
        if d is None or d > 1:
            return False, False, f"the dynamics f[{i}] are not affine in (z, theta)"
    d = degree(ex["R"], gens)
    if d is None or d > 2:
        return False, False, "the running loss R is not quadratic in (z, theta)"
    d = degree(ex["T"], tuple(provider.z))
    if d is None or d > 2:
        return False, False, "the terminal loss T is not quadratic in z"
    varying = any(provider.t in sp.sympify(e).free_symbols for e in (*ex["f"], ex["R"]))
    return True, varying, None


def detect_lq(problem, provider, x: np.ndarray, q: float, p_min: float
              ) -> tuple[bool, bool, str | None]:
    """``(is_lq, time_varying, reason)``: symbolic for `from_sympy` problems, by a probe
    at three times (``q``, ``p_min`` and one between) otherwise."""
    from .._core.derivatives.symbolic import SympyProvider

    if isinstance(provider, SympyProvider):
        return symbolic_lq(provider)
    rng = np.random.default_rng(20240607)
    times = [q] if problem.autonomous or p_min == q else [q, p_min, q + 0.3819 * (p_min - q)]
    try:
        reason = probe_lq(provider, times, x, rng)
    except (ArithmeticError, ValueError, FloatingPointError) as exc:
        return False, False, f"the probe failed ({exc})"
    if reason is not None:
        return False, False, reason
    N, M = provider.n_state, provider.n_theta
    models = [lq_model(provider, t, N, M) for t in times]
    varying = not all(models[0].close(m) for m in models[1:])
    return True, varying, None


def check_control_affine(provider, q: float, p_min: float, x: np.ndarray,
                         bounds: np.ndarray | None, theta0: np.ndarray | None) -> None:
    """Refute ``control_affine=True``: along random directions ``d`` in ``theta``, ``f`` at
    ``theta, theta + d, theta + 2 d`` must be collinear (second difference zero) and ``R``
    at ``theta + j d`` (j = 0..3) a quadratic (third difference zero)."""
    N, M = provider.n_state, provider.n_theta
    rng = np.random.default_rng(7)
    k = 3
    if bounds is not None:
        lo, hi = bounds[:, 0], bounds[:, 1]
        span = np.where(np.isfinite(hi - lo), hi - lo, 2.0)
        mid = np.where(np.isfinite(lo + hi), 0.5 * (lo + hi), np.where(np.isfinite(lo), lo + 1,
                                                                       np.where(np.isfinite(hi), hi - 1, 0.0)))
        TH = mid + 0.25 * span * rng.uniform(-1, 1, size=(k, M))
        D = 0.25 * span * rng.choice([-1.0, 1.0], size=(k, M)) * rng.uniform(0.5, 1, (k, M))
    else:
        s = max(1.0, float(np.abs(theta0).max())) if theta0 is not None else 1.0
        TH = s * rng.normal(size=(k, M))
        D = s * rng.normal(size=(k, M))
    sz = max(1.0, float(np.abs(x).max()))
    Z = x[rng.integers(0, x.shape[0], k)] + 0.5 * sz * rng.normal(size=(k, N))
    for t in (q, p_min):
        f = [provider.derivative("f", t, Z, TH + j * D) for j in range(3)]
        d2 = f[0] - 2 * f[1] + f[2]
        if _mismatch(d2, 0.0, np.abs(f[0]) + 2 * np.abs(f[1]) + np.abs(f[2])) > PROBE_RTOL:
            raise ValueError(
                "`control_affine=True` was given, but the dynamics f are not affine in theta: "
                f"at t = {t:.6g} f(theta), f(theta + d), f(theta + 2d) are not collinear (second "
                "difference {:.3g} relative); the one-step feedback would be wrong. Drop "
                "`control_affine=True` (Newton's method then finds the feedback)."
                .format(float(np.max(np.abs(d2) / (np.abs(f[0]) + 2 * np.abs(f[1]) + np.abs(f[2])
                                                   + np.finfo(float).tiny)))))
        R = [provider.derivative("R", t, Z, TH + j * D) for j in range(4)]
        d3 = R[0] - 3 * R[1] + 3 * R[2] - R[3]
        terms = np.abs(R[0]) + 3 * np.abs(R[1]) + 3 * np.abs(R[2]) + np.abs(R[3])
        if _mismatch(d3, 0.0, terms) > PROBE_RTOL:
            raise ValueError(
                "`control_affine=True` was given, but the running loss R is not quadratic in "
                f"theta: at t = {t:.6g} its third difference along theta does not vanish; the "
                "one-step feedback would be wrong. Drop `control_affine=True` (Newton's method "
                "then finds the feedback).")


# -- the Riccati sweep -------------------------------------------------------------------------
class RiccatiSweep:
    """Right-hand side and fields of the Riccati sweep; state ``[P, r, c_0, Phi, phi]``."""

    def __init__(self, provider, q: float, varying: bool) -> None:
        self.provider = provider
        self.N, self.M = provider.n_state, provider.n_theta
        self.q = q
        self.varying = varying
        self._const = None if varying else self._prepare(q)
        N = self.N
        self.sizes = [N * N, N, 1, N * N, N]
        self.offsets = np.cumsum([0] + self.sizes)

    def _prepare(self, t: float):
        m = lq_model(self.provider, t, self.N, self.M)
        Ru = 0.5 * (m.Ru + m.Ru.T)
        eig = np.linalg.eigvalsh(Ru) if self.M else np.ones(1)
        if not np.all(eig > 0):
            raise OptimalityError(
                t, "the Hamiltonian R + Lam . f is not strictly convex in theta (smallest "
                f"eigenvalue of its theta-Hessian {eig.min():.3g}); Theorem 3's condition has no "
                "unique minimiser")
        Ri = np.linalg.inv(Ru) if self.M else np.zeros((0, 0))
        # B R_u^-1 B^T etc., so that a right-hand side is a few small products
        return dict(m=m, Ri=Ri, RiBT=Ri @ m.B.T, RiST=Ri @ m.S.T, Rirv=Ri @ m.rv)

    def coefficients(self, p: float):
        return self._prepare(p) if self.varying else self._const

    def initial_state(self) -> np.ndarray:
        N = self.N
        t0, tv, PT = terminal_model(self.provider, self.q, N, self.M)
        return np.concatenate([PT.ravel(), tv, [t0], np.eye(N).ravel(), np.zeros(N)])

    def unpack(self, y: np.ndarray):
        N, o = self.N, self.offsets
        return (y[o[0]:o[1]].reshape(N, N), y[o[1]:o[2]], y[o[2]], y[o[3]:o[4]].reshape(N, N),
                y[o[4]:o[5]])

    def gains(self, co, P, r):
        """``K`` (M, N) and ``k`` (M,): ``Psi = -(K x + k)``."""
        K = co["RiBT"] @ P + co["RiST"]
        k = co["RiBT"] @ r + co["Rirv"]
        return K, k

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        co = self.coefficients(p)
        m = co["m"]
        P, r, _, Phi, _ = self.unpack(y)
        K, k = self.gains(co, P, r)
        G = P @ m.B + m.S                                   # (N, M); K = Ri G^T
        AtP = m.A.T @ P
        dP = -(AtP + AtP.T + m.Q - G @ K)
        dr = -(m.A.T @ r + P @ m.c - G @ k + m.qv)
        g0 = m.B.T @ r + m.rv
        dc = -(r @ m.c - 0.5 * g0 @ k + m.r0)
        Acl = m.A - m.B @ K
        dPhi = -(Phi @ Acl)
        dphi = -(Phi @ (m.c - m.B @ k))
        return np.concatenate([dP.ravel(), dr, [dc], dPhi.ravel(), dphi])

    def fields(self, p: float, y: np.ndarray, X: np.ndarray) -> dict[str, np.ndarray]:
        """The result fields of `solve_optimal` at depth ``p`` for the inputs ``X`` (B, N)."""
        co = self.coefficients(p)
        P, r, c0, Phi, phi = self.unpack(y)
        P = 0.5 * (P + P.T)
        K, k = self.gains(co, P, r)
        dP, dr, dc, _, _ = self.unpack(self.rhs(p, y))
        B = X.shape[0]
        PX = X @ P
        return {"z": X @ Phi.T + phi, "value": 0.5 * np.einsum("bi,bi->b", X, PX) + X @ r + c0,
                "adjoint": PX + r, "feedback": -(X @ K.T + k),
                "feedback_jacobian": np.broadcast_to(-K, (B,) + K.shape).copy(),
                "depth_grad": 0.5 * np.einsum("bi,ij,bj->b", X, dP, X) + X @ dr + dc}


def solve_riccati(setup, varying: bool, method: str, rtol: float, atol: float,
                  step: float | None, options: dict, estimate_error: bool,
                  grid: np.ndarray | None = None, budget: Any = None) -> Any:
    """The Riccati sweep of every depth at once; a result like `solve_optimal`'s (an
    `OptimalityError` keeps the depths reached before it). ``grid`` and ``budget`` as in
    `invimbed._control.feedback.sweep_feedback` (the ``policy`` is exact: affine in
    ``z``)."""
    prov = setup.provider
    N, M, B = prov.n_state, prov.n_theta, setup.x.shape[0]
    try:
        sweep = RiccatiSweep(prov, setup.q, varying)
    except OptimalityError as exc:      # not convex at q: no depth is reached
        outcome = failed_outcome(setup, 2 * N * N + 2 * N + 1, exc)
    else:
        outcome = integrate(sweep.rhs, sweep.initial_state(), setup, method, rtol, atol, step,
                            options, grid=grid, budget=budget)

    def per_depth(p: float, y: np.ndarray):
        fl = sweep.fields(p, y, setup.x)
        return fl, {k: np.zeros_like(fl[k]) for k in ("z", "value", "adjoint")}

    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N), "feedback": (B, M),
              "feedback_jacobian": (B, M, N), "depth_grad": (B,)}
    res = collect_results(setup, outcome, per_depth, shapes, closure="riccati (linear-quadratic)",
                          method=method, with_errors=estimate_error)
    res = attach_dense(res, setup, outcome, per_depth, shapes,
                       closure="riccati (linear-quadratic)", method=method,
                       with_errors=estimate_error, build=feedback_result)

    def jet_at(p: float, y: np.ndarray) -> np.ndarray:
        fl = sweep.fields(p, y, setup.x)
        return np.concatenate([fl["feedback"][..., None], fl["feedback_jacobian"]], axis=-1)

    res = res.but(policy=policy_from_outcome(outcome, jet_at, setup.x, 1))
    return finish(res, outcome, tuple(shapes))
