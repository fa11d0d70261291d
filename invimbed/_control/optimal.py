"""Optimal feedback by invariant imbedding (Theorem 3, eq. (13); docs/theory.md, "Optimality").

At an optimal control the imbedded coefficient ``Psi(p, x) = theta(p; p, x)`` (eq.
(7)) satisfies ``grad_theta R + [grad_theta f]^T Lam = 0`` at ``(p, x)``. Solving it
for ``Psi`` at every depth turns the sweep into a dynamic-programming sweep for the value
function, the Hamilton--Jacobi--Bellman equation

    -dV/dp = min_theta [ R(p, x, theta) + grad_x V . f(p, x, theta) ],

which for linear dynamics and quadratic losses is exactly the Riccati equation.

The jet closure carries ``V`` to degree ``K + 1`` and the closed-loop output ``Z`` to
degree ``K`` as truncated polynomials in ``delta = x' - x`` (as in
`invimbed._core.closures.jet`), and the feedback's jet ``Psi(p, x + delta)`` follows from
the optimality condition by the implicit function theorem, computed as a fixed-point
iteration on polynomials: with ``H_theta(delta) = R_theta(x + delta, Psi(delta)) +
Lam(delta) . f_theta(x + delta, Psi(delta))``,

    psi <- psi - [H_thetatheta(x, Psi_0)]^-1 H_theta(delta)

gains one correct degree per pass, and ``K`` passes give ``Psi`` to degree ``K``, which is
all that degree ``K + 1`` of ``V`` needs (its next degree is multiplied by ``H_theta(0) =
0``: the envelope theorem). ``Psi_0`` itself is found at each depth by a vectorised
(projected) Newton method on the Hamiltonian, or in one step when the problem is
control-affine with a quadratic running loss in ``theta`` (``control_affine=True``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from .._core.closures.base import Closure, Layout
from .._core.closures.jet import transport
from .._core.controls import Constant
from .._core.derivatives.multiindex import (compose_split, monomials, multi_indices,
                                     n_coefficients, poly_derivatives, poly_mul)
from .._core.integrators import SCIPY_METHODS, integrate_fixed, integrate_scipy
from .._core.problem import BolzaProblem
from .._core.results import ImbeddingResult, SolverWarning
from .._core.setup import ALL_METHODS, parse_tol, prepare
from .._core.validation import as_float_array, check_choice, describe


#: Newton's tolerance on the feedback with exact derivatives (relative step size).
DEFAULT_NEWTON_TOL = 1e-12


class OptimalityError(ArithmeticError):
    """The pointwise minimisation of the Hamiltonian failed (not convex, no convergence)."""

    def __init__(self, p: float, message: str) -> None:
        super().__init__(f"{message} at depth p = {p:.10g}")
        self.p = p


class FeedbackJetClosure(Closure):
    """Closed-loop jet: ``V`` to degree ``K + 1``, ``Z`` to degree ``K``, with ``Psi(p, x)``
    either optimal (Theorem 3) or a given feedback ``policy(p, x)``."""

    name = "jet"

    def __init__(self, provider, x, q, n_controls: int, order: int = 1,
                 estimate_error: bool = True, bounds: np.ndarray | None = None,
                 control_affine: bool = False, theta0: np.ndarray | None = None,
                 policy: Callable | None = None, newton_tol: float | None = None,
                 max_newton: int = 50) -> None:
        control = Constant(np.zeros(n_controls))
        super().__init__(provider, control, x, q)
        self.order = order
        # the estimate: order K + 1 against K, and K - 1 against K for the convergence test
        self.orders = [order] + ([order + 1, order - 1] if estimate_error else [])
        self.has_error_estimate = estimate_error
        self.bounds = bounds
        self.control_affine = control_affine
        self.policy = policy
        self.newton_tol = DEFAULT_NEWTON_TOL if newton_tol is None else float(newton_tol)
        self.max_newton = max_newton
        #: whether a Newton iteration stopped at the derivatives' noise level rather than
        #: at ``newton_tol`` (finite differences); reported as a warning
        self.stopped_at_noise = False
        B, N, M = self.B, self.N, self.M
        start = np.zeros((B, M)) if theta0 is None else np.broadcast_to(theta0, (B, M)).copy()
        if bounds is not None:
            start = np.clip(start, bounds[:, 0], bounds[:, 1])
        self._warm = {K: start.copy() for K in self.orders}
        shapes = {}
        for K in self.orders:
            shapes[f"Z{K}"] = (B, N, n_coefficients(N, K))
            shapes[f"V{K}"] = (B, n_coefficients(N, K + 1))
        self.layout = Layout(shapes)

    # -- state ---------------------------------------------------------------------------
    def initial_state(self) -> np.ndarray:
        B, N = self.B, self.N
        top = max(self.orders)
        T = self.provider.taylor("T", self.q, self.x, None, top + 1)
        blocks = {}
        for K in self.orders:
            Z = np.zeros((B, N, n_coefficients(N, K)))
            Z[:, :, 0] = self.x
            if K >= 1:
                Z[:, :, 1:N + 1] = np.eye(N)
            blocks[f"Z{K}"] = Z
            blocks[f"V{K}"] = T[:, :n_coefficients(N, K + 1)]
        return self.layout.pack(blocks)

    # -- the feedback --------------------------------------------------------------------
    def hamiltonian_terms(self, p: float, theta: np.ndarray, lam: np.ndarray):
        """``H``, ``H_theta`` (B, M) and ``H_thetatheta`` (B, M, M) at ``(p, x, theta)``."""
        prov, x = self.provider, self.x
        f = prov.derivative("f", p, x, theta)
        R = prov.derivative("R", p, x, theta)
        g = prov.derivative("R", p, x, theta, dth=1) + np.einsum(
            "bi,bim->bm", lam, prov.derivative("f", p, x, theta, dth=1))
        Hm = prov.derivative("R", p, x, theta, dth=2) + np.einsum(
            "bi,bimn->bmn", lam, prov.derivative("f", p, x, theta, dth=2))
        return R + np.einsum("bi,bi->b", lam, f), g, Hm

    def _free(self, theta: np.ndarray, g: np.ndarray) -> np.ndarray:
        if self.bounds is None:
            return np.ones_like(theta, dtype=bool)
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]
        span = np.maximum(1.0, np.abs(self.bounds)).max(1) * 1e-12
        at_lo = (theta <= lo + span) & (g > 0)
        at_hi = (theta >= hi - span) & (g < 0)
        return ~(at_lo | at_hi)

    def _restricted_solve(self, Hm: np.ndarray, g: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Newton direction on the free components (zero on the active ones)."""
        B, M = g.shape
        eye = np.eye(M)
        Hf = np.where(free[:, :, None] & free[:, None, :], Hm, eye[None])
        gf = np.where(free, g, 0.0)
        return -np.linalg.solve(Hf, gf[..., None])[..., 0]

    def _step_noise(self, p: float, theta: np.ndarray, lam: np.ndarray,
                    eig_min: np.ndarray) -> float:
        """How far a Newton step can move from the noise of the derivatives alone:
        ``|delta H_theta| / lambda_min(H_thetatheta)``, with ``delta H_theta`` the estimated
        error of the finite-difference gradient (zero for exact derivatives)."""
        prov = self.provider
        err = getattr(prov, "derivative_error", None)
        levels = getattr(prov, "fd_levels", None)
        if err is None or levels is None or getattr(prov, "exact_derivatives", False):
            return 0.0
        if levels("R", 0, 1) == 0 and levels("f", 0, 1) == 0:      # exact gradients given
            return 0.0
        # truncation (Richardson, steps h and 2h) and rounding, eps |R + Lam . f| / h with
        # the central quotient's step h = eps^(1/3) max(1, |theta|)
        g_err = err("R", p, self.x, theta, dth=1) + np.einsum(
            "bi,bim->bm", np.abs(lam), err("f", p, self.x, theta, dth=1))
        size = np.abs(prov.derivative("R", p, self.x, theta)) + np.einsum(
            "bi,bi->b", np.abs(lam), np.abs(prov.derivative("f", p, self.x, theta)))
        h = np.finfo(float).eps ** (1 / 3) * np.maximum(1.0, np.abs(theta).max(axis=1))
        rounding = np.finfo(float).eps * size / h
        return float(np.max((np.linalg.norm(g_err, axis=1) + rounding) / eig_min))

    def optimal_theta(self, p: float, lam: np.ndarray, K: int) -> np.ndarray:
        """``Psi_0(p, x)``: minimise ``R + Lam_0 . f`` over theta (within the bounds).

        Damped Newton, stopped when a step moves theta by at most ``newton_tol`` (relative)
        or, with finite-difference derivatives, by at most ten times what the noise of the
        gradient alone moves it (`_step_noise`): a tolerance below the accuracy of the
        derivatives cannot be met (docs/optimal-control.md, "The HJB sweep")."""
        theta = self._warm[K].copy()
        noise = None
        for it in range(self.max_newton):
            H, g, Hm = self.hamiltonian_terms(p, theta, lam)
            eigs = np.linalg.eigvalsh(0.5 * (Hm + np.swapaxes(Hm, 1, 2)))
            eig = eigs.min(axis=1)
            if not np.all(eig > 0):
                raise OptimalityError(
                    p, "the Hamiltonian R + Lam . f is not strictly convex in theta "
                    f"(smallest eigenvalue of its theta-Hessian {eigs.min():.3g}); Theorem 3's "
                    "condition has no unique minimiser")
            free = self._free(theta, g)
            step = self._restricted_solve(Hm, g, free)
            if self.control_affine:
                new = theta + step
                if self.bounds is not None:
                    new = np.clip(new, self.bounds[:, 0], self.bounds[:, 1])
                    # active set changes: iterate the (exact) quadratic step
                    if np.array_equal(self._free(new, self.hamiltonian_terms(p, new, lam)[1]), free):
                        theta = new
                        break
                    theta = new
                    continue
                theta = new
                break
            # damped Newton on H (Armijo backtracking per batch row)
            alpha = np.ones((self.B, 1))
            for _ in range(30):
                trial = theta + alpha * step
                if self.bounds is not None:
                    trial = np.clip(trial, self.bounds[:, 0], self.bounds[:, 1])
                Ht = self.hamiltonian_terms(p, trial, lam)[0]
                ok = Ht <= H + 1e-4 * np.einsum("bm,bm->b", g, trial - theta) + 1e-14 * np.abs(H)
                if np.all(ok):
                    break
                alpha = np.where(ok[:, None], alpha, 0.5 * alpha)
            moved = np.abs(trial - theta).max()
            theta = trial
            if moved <= self.newton_tol * max(1.0, np.abs(theta).max()):
                break
            if noise is None:
                noise = self._step_noise(p, theta, lam, eig)
            if moved <= 10.0 * noise:
                self.stopped_at_noise = True
                break
        else:
            raise OptimalityError(p, f"Newton's method for Psi did not converge in "
                                  f"{self.max_newton} iterations")
        self._warm[K] = theta
        return theta

    def _policy_jet(self, p: float, K: int):
        """A given feedback ``policy(p, x) -> theta``: its jet by central differences."""
        if K > 1:
            raise ValueError("a given feedback policy is differentiated by finite differences: "
                             "order 1 only")
        B, N, M = self.B, self.N, self.M
        pol = self._call_policy(p, self.x)
        psi = np.zeros((B, M, n_coefficients(N, K)))
        if K == 1:
            h = np.finfo(float).eps ** (1 / 3) * np.maximum(1.0, np.abs(self.x))
            for j in range(N):
                e = np.zeros(N)
                e[j] = 1.0
                up = self._call_policy(p, self.x + h[:, j:j + 1] * e)
                dn = self._call_policy(p, self.x - h[:, j:j + 1] * e)
                psi[:, :, 1 + j] = (up - dn) / (2 * h[:, j:j + 1])
        return pol, psi

    def _call_policy(self, p: float, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self.policy(p, x), dtype=float)
        if out.shape != (x.shape[0], self.M):
            raise ValueError(f"`control` (a feedback policy) must return shape (B, M) = "
                             f"{(x.shape[0], self.M)} for x of shape {x.shape}, but returned "
                             f"shape {out.shape}")
        return out

    # -- the contract --------------------------------------------------------------------
    def closed_loop(self, p: float, V: np.ndarray, K: int):
        """Closed-loop ``Phi(delta)`` and ``R(delta)`` to degree ``K + 1`` for the state jet
        ``V`` (degree ``K + 1``), with the feedback ``Psi_0`` (B, M) and its jet ``psi``
        (B, M, C(N + K, K), no constant term)."""
        N, M, B = self.N, self.M, self.B
        L = K + 1
        lam = poly_derivatives(V, N, L)                           # Lam(delta), (B, N, c(K))
        if self.policy is not None:
            psi0, psi = self._policy_jet(p, K)
        else:
            psi0 = self.optimal_theta(p, lam[..., 0], K)
        Lj = max(L, 2)                   # degree 2 for the theta-Hessian (order K = 0)
        Fj = self.provider.taylor_joint("f", p, self.x, psi0, Lj)  # (B, N, nJ(Lj))
        Rj = self.provider.taylor_joint("R", p, self.x, psi0, Lj)  # (B, nJ(Lj))
        if self.policy is None:
            psi = self._feedback_jet(Fj, Rj, lam, psi0, K, Lj)
        if Lj > L:
            nJ = n_coefficients(N + M, L)
            Fj, Rj = Fj[..., :nJ], Rj[..., :nJ]
        psi_L = np.zeros((B, M, n_coefficients(N, L)))
        psi_L[..., :psi.shape[-1]] = psi
        mon = monomials(psi_L, N, L)
        Phi = compose_split(Fj, mon, N, M, L)
        R = compose_split(Rj, mon, N, M, L)
        return Phi, R, psi0, psi

    def _feedback_jet(self, Fj, Rj, lam, psi0, K, Lj):
        """The implicit-function-theorem jet of ``Psi`` from eq. (13) (module docstring);
        ``Fj``, ``Rj`` to degree ``Lj = max(K + 1, 2)``."""
        N, M, B = self.N, self.M, self.B
        L = K + 1
        idx1, idx2, fact2 = _theta_indices(N, M, Lj)
        lam0 = lam[..., 0]
        g = Rj[:, idx1] + np.einsum("bi,bim->bm", lam0, Fj[:, :, idx1])
        Hm = (Rj[:, idx2] + np.einsum("bi,bimn->bmn", lam0, Fj[:, :, idx2])) * fact2
        free = self._free(psi0, g)
        pair = free[:, :, None] & free[:, None, :]
        Hinv = np.linalg.inv(np.where(pair, Hm, np.eye(M)[None])) * pair
        nJ = n_coefficients(N + M, L)
        Fth = poly_derivatives(Fj[..., :nJ], N + M, L)[:, :, N:]   # (B, N, M, nJ(K))
        Rth = poly_derivatives(Rj[..., :nJ], N + M, L)[:, N:]      # (B, M, nJ(K))
        psi = np.zeros((B, M, n_coefficients(N, K)))
        for _ in range(K):
            mon = monomials(psi, N, K)
            Ht = compose_split(Rth, mon, N, M, K) + _dot_poly(
                compose_split(Fth, mon, N, M, K), lam, N, K)
            psi = psi - np.einsum("bmk,bkc->bmc", Hinv, Ht)
            psi[..., 0] = 0.0
        return psi

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        blocks = self.layout.unpack(y)
        out = {}
        for K in self.orders:
            V = blocks[f"V{K}"]
            Phi, R, _, _ = self.closed_loop(p, V, K)
            out[f"V{K}"] = -(transport(V, Phi, self.N, K + 1) + R)
            out[f"Z{K}"] = -transport(blocks[f"Z{K}"], Phi, self.N, K)
        return self.layout.pack(out)

    def fields(self, y: np.ndarray, K: int | None = None) -> dict[str, np.ndarray]:
        K = self.order if K is None else K
        b = self.layout.unpack(y)
        N = self.N
        return {"z": b[f"Z{K}"][..., 0].copy(), "value": b[f"V{K}"][..., 0].copy(),
                "adjoint": b[f"V{K}"][..., 1:N + 1].copy()}


@lru_cache(maxsize=None)
def _theta_indices(n: int, m: int, order: int):
    """Joint indices of ``e_theta_a`` (m,) and ``e_theta_a + e_theta_b`` (m, m), and the
    factor ``alpha!`` turning the latter's coefficients into second derivatives."""
    look = {tuple(int(v) for v in e): i for i, e in enumerate(multi_indices(n + m, order))}
    idx1 = np.zeros(m, dtype=np.int64)
    idx2 = np.zeros((m, m), dtype=np.int64)
    fact = np.ones((m, m))
    for a in range(m):
        e = [0] * (n + m)
        e[n + a] = 1
        idx1[a] = look[tuple(e)]
        for b in range(m):
            e2 = list(e)
            e2[n + b] += 1
            idx2[a, b] = look[tuple(e2)]
            fact[a, b] = 2.0 if a == b else 1.0
    return idx1, idx2, fact


def _dot_poly(F: np.ndarray, lam: np.ndarray, n: int, order: int) -> np.ndarray:
    """``sum_i lam_i(delta) F_i(delta)`` for F (B, N, M, c) and lam (B, N, c) -> (B, M, c)."""
    return poly_mul(F, lam[:, :, None, :], n, order).sum(axis=1)



def solve_optimal(problem: BolzaProblem, x: Any, depths: Any, *, n_controls: int | None = None,
                  control_bounds: Any = None, closure: str = "jet", order: int = 1,
                  method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                  step: float | None = None, estimate_error: bool = True,
                  control_affine: bool = False, linear_quadratic: bool | None = None,
                  theta0: Any = None, newton_tol: float | None = None, max_newton: int = 50,
                  tol: Any = None, **options: Any) -> ImbeddingResult:
    """Optimal feedback control of every depth by one imbedding sweep (Theorem 3).

    At each ``(p, x)`` the control ``Psi(p, x)`` minimises the Hamiltonian
    ``R + Lam . f`` (its first-order condition is eq. (13)), and the value function
    ``V(p, x)``, the optimal cost-to-go, obeys the HJB equation
    ``-dV/dp = min_theta [R + grad_x V . f]``. For linear-quadratic problems it is the
    matrix Riccati equation, solved directly (the Riccati path); otherwise the jet
    closure carries ``V`` as a Taylor polynomial (the HJB sweep). See
    docs/optimal-control.md.

    Parameters
    ----------
    problem : BolzaProblem
        Dynamics ``f(t, z, theta)`` and losses; ``theta`` is the control (size
        ``n_controls``). ``R`` must make the Hamiltonian strictly convex in ``theta``.
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
        Depths ``p_i <= q``; the horizon of depth ``p_i`` is ``q - p_i``.
    n_controls : int, optional
        ``M``; inferred from ``control_bounds`` or ``theta0`` when omitted.
    control_bounds : array_like, shape (M, 2), optional
        Box constraints ``lo <= theta <= hi`` (projected Newton; the feedback's jet is
        zero in the active components). Bounds rule out the Riccati path.
    closure : {"jet"}
        The closure of the HJB sweep (the jet; its order ``K`` carries ``V`` to degree
        ``K + 1``).
    order : int, default 1
        Jet order ``K`` (not used by the Riccati path, which is exact).
    method, rtol, atol, step
        As in `solve_imbedding`; the Riccati path integrates with the same method and
        tolerances.
    estimate_error : bool, default True
        Carry orders ``K + 1`` and ``K - 1`` alongside: the estimate is the difference
        between ``K`` and ``K + 1``, and a depth where the differences between successive
        orders of the value or the output do not shrink geometrically (the ratio test of
        `solve_imbedding`), or where the estimate is large, is not converged: ``success``
        is False, ``status`` -2 and the message names the depth
        (docs/optimal-control.md, "The error estimate"). The Riccati path reports a zero
        estimate (it is exact up to the integrator's tolerance).
    control_affine : bool, default False
        The registered fast path: ``f`` affine and ``R`` quadratic in ``theta``, so
        ``Psi`` is one (exact) Newton step. Checked by a probe at a few random points: a
        problem that is not control-affine raises `ValueError`.
    linear_quadratic : bool or None, default None
        Whether to take the Riccati path (``f`` affine in ``(z, theta)``, ``R`` and ``T``
        quadratic). ``None`` detects it: from the polynomial degrees of the expressions
        for `from_sympy` problems, by a probe (the functions against their interpolated
        affine/quadratic models at random points and three times) otherwise. ``True``
        declares it (still probed: a problem that is not LQ raises `ValueError`);
        ``False`` always runs the jet sweep.
    theta0 : array_like, shape (M,), optional
        Starting guess of the Newton iterations at ``p = q`` (then warm-started).
    newton_tol : float, optional
        Relative step size at which the pointwise Newton iteration stops; default
        ``1e-12``. With finite-difference derivatives it also stops once its steps are
        within ten times what the derivatives' own noise explains (a warning
        ``"newton_at_derivative_noise"`` says so).
    max_newton : int, default 50
        Iteration limit of the pointwise minimisation.
    tol : float or (float, float), optional
        ``(rtol, atol)`` (a float ``t`` means ``(t, t)``) the jet sweep's estimate must
        meet at every depth, with the convergence test of the series of orders ``K - 1``,
        ``K``, ``K + 1`` (docs: Accuracy). Without it the criterion is the estimate within
        10% of ``max(1, |field|)``. A depth that fails is status -2.

    Returns
    -------
    ImbeddingResult
        ``depths``, ``z`` (the output under the optimal feedback), ``value`` (the optimal
        cost-to-go ``V(p_i, x)``), ``adjoint`` (``grad_x V``), ``feedback``
        (``Psi(p_i, x)``, shape (n, [B,] M)), ``feedback_jacobian`` (``d Psi / d x``, shape
        (n, [B,] M, N)), ``depth_grad`` (``dV/dp = -min H``), ``error_estimate``,
        ``success``, ``status`` (`STATUS`), ``message``, ``nfev``, ``linear_quadratic``
        (whether the Riccati path ran), ``warnings`` (`SolverWarning` entries). A failure
        of the pointwise minimisation ends the sweep with ``success=False`` and names the
        depth.

    Raises
    ------
    ValueError
        Bad arguments; ``control_affine=True`` or ``linear_quadratic=True`` on a problem
        without that structure.

    Examples
    --------
    Finite-horizon LQR, ``dz/dt = u``, ``R = (z^2 + u^2)/2``: ``P(s) = tanh(s)``.

    >>> import numpy as np, invimbed
    >>> pb = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
    >>> res = invimbed.solve_optimal(pb, [1.0], [-1.0], n_controls=1, rtol=1e-10, atol=1e-12)
    >>> round(float(res.value[0]), 6), round(float(0.5 * np.tanh(1.0)), 6), res.linear_quadratic
    (0.380797, 0.380797, True)
    """
    from . import riccati as _riccati

    check_choice(closure, "closure", ("jet",))
    if linear_quadratic not in (None, True, False):
        raise ValueError(f"`linear_quadratic` must be None, True or False, but got "
                         f"{describe(linear_quadratic)}")
    bounds = None
    if control_bounds is not None:
        bounds = as_float_array(control_bounds, "control_bounds")
        if bounds.ndim != 2 or bounds.shape[1] != 2 or np.any(bounds[:, 0] > bounds[:, 1]):
            raise ValueError(f"`control_bounds` must have shape (M, 2) with lo <= hi, but got "
                             f"{describe(bounds)}")
    if theta0 is not None:
        theta0 = np.atleast_1d(as_float_array(theta0, "theta0"))
    if n_controls is None:
        if bounds is not None:
            n_controls = bounds.shape[0]
        elif theta0 is not None:
            n_controls = theta0.size
        else:
            raise ValueError("`n_controls` (the size M of theta) is required when neither "
                             "`control_bounds` nor `theta0` gives it")
    if not isinstance(n_controls, (int, np.integer)) or n_controls < 1:
        raise ValueError(f"`n_controls` must be a positive integer, but got {describe(n_controls)}")
    for name, arr in (("control_bounds", bounds), ("theta0", theta0)):
        if arr is not None and arr.shape[0] != n_controls:
            raise ValueError(f"`{name}` must have {n_controls} rows (n_controls), but has "
                             f"shape {arr.shape}")
    if not isinstance(order, (int, np.integer)) or isinstance(order, bool) or order < 1:
        raise ValueError(f"`order` must be an integer >= 1, but got {describe(order)}")
    if newton_tol is not None and not (np.isscalar(newton_tol) and newton_tol > 0):
        raise ValueError(f"`newton_tol` must be a positive number or None, but got "
                         f"{describe(newton_tol)}")
    if method == "disc":
        raise ValueError("`method` 'disc' (the paper's open-loop layers) is not available for "
                         "optimal feedback; use a scipy method or euler/midpoint/rk4")
    if linear_quadratic is True and bounds is not None:
        raise ValueError("`linear_quadratic=True` and `control_bounds` exclude each other: "
                         "with bounds the feedback saturates and the value is not quadratic")
    tol_pair = parse_tol(tol)
    dummy = Constant(np.zeros(n_controls) if theta0 is None else theta0)
    setup = prepare(problem, x, depths, dummy, method, rtol, atol, step, ALL_METHODS)
    p_min = float(setup.depths_desc[-1])
    if control_affine:
        _riccati.check_control_affine(setup.provider, setup.q, p_min, setup.x, bounds, theta0)
    if linear_quadratic is not False and bounds is None:
        is_lq, varying, reason = _riccati.detect_lq(problem, setup.provider, setup.x, setup.q,
                                                    p_min)
        if linear_quadratic is True and not is_lq:
            raise ValueError(f"`linear_quadratic=True` was given, but {reason}; drop it (or "
                             f"pass linear_quadratic=False) to run the jet sweep")
        if is_lq:
            res = _riccati.solve_riccati(setup, varying, method, rtol, atol, step,
                                         dict(options), bool(estimate_error))
            res.linear_quadratic = True
            res.setdefault("warnings", [])
            return res
    clo = FeedbackJetClosure(setup.provider, setup.x, setup.q, n_controls, order=int(order),
                             estimate_error=bool(estimate_error), bounds=bounds,
                             control_affine=control_affine, theta0=theta0,
                             newton_tol=newton_tol, max_newton=max_newton)
    if tol_pair is not None and not (estimate_error and len(clo.orders) == 3):
        raise ValueError(f"`tol` needs the error estimate and its convergence test "
                         f"(estimate_error=True, order >= 1), but got "
                         f"estimate_error={estimate_error!r}, order={order!r}")
    res = _sweep_feedback(setup, clo, method, rtol, atol, step, options, tol_pair)
    if bounds is not None and res.success:
        res.message += _branch_check(setup, res, bounds, n_controls, control_affine)
    res.linear_quadratic = False
    return res


def _branch_check(setup, res, bounds: np.ndarray, n_controls: int, control_affine: bool) -> str:
    """With bounds, the Hamiltonian's minimum is only piecewise smooth in ``Lam``: the jet
    expands ``V`` around ``x`` on one branch (one active set). Compare the active set of
    Theorem 3's control at ``(p, x)`` with the one at the end of the optimal path,
    ``(q, z(q))`` with ``Lam = grad T``; where they differ the path switches branch and the
    jet (and its estimate, which sees the same branch) cannot be trusted."""
    prov = setup.provider
    zq = res.z if setup.batched else res.z[:, None]
    fb = res.feedback if setup.batched else res.feedback[:, None]
    lo, hi = bounds[:, 0], bounds[:, 1]
    tol = 1e-9 * np.maximum(1.0, np.abs(bounds)).max(1)
    for i, p in enumerate(setup.depths):   # the results' order
        end = FeedbackJetClosure(prov, zq[i], setup.q, n_controls, order=1, estimate_error=False,
                                 bounds=bounds, control_affine=control_affine)
        lam = prov.derivative("T", setup.q, zq[i], None, dz=1)
        try:
            th_end = end.optimal_theta(setup.q, lam, 1)
        except OptimalityError:
            continue
        def side(th):  # -1 at the lower bound, +1 at the upper, 0 inside
            return np.where(th <= lo + tol, -1, np.where(th >= hi - tol, 1, 0))

        start, finish = side(fb[i]), side(th_end)
        if np.any(start != finish):
            names = {-1: "at its lower bound", 0: "inside its bounds", 1: "at its upper bound"}
            j = np.argwhere(start != finish)[0]
            return (f" Warning: at depth p = {p:.6g} the optimal control is "
                    f"{names[int(start[tuple(j)])]} at the start of the path and "
                    f"{names[int(finish[tuple(j)])]} at its end: the "
                    f"path switches between branches of the Hamiltonian, which the jet (and "
                    f"its error estimate) cannot see; the value may be wrong there. Check "
                    f"against a direct method (solve_bvp, optimize_control).")
    return ""


def optimality_residual(problem: BolzaProblem, x: Any, depths: Any, control: Any, *,
                        n_controls: int | None = None, **solve_kwargs: Any) -> np.ndarray:
    """The Theorem 3 residual ``grad_theta R + [grad_theta f]^T Lam`` at ``(p_i, x)``.

    Zero at every depth for an optimal control (eq. (13)): users check a solution they
    got elsewhere with it.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
    control : Constant, PiecewiseConstant, Control, or callable ``policy(p, x) -> theta``
        An open-loop control (``Lam`` from `solve_imbedding`) or a feedback policy taking
        ``x`` of shape (B, N) and returning (B, M) (``Lam`` from the closed-loop jet, its
        Jacobian by central differences; give ``n_controls``).
    **solve_kwargs
        Passed to the sweep (``rtol``, ``atol``, ``method``...).

    Returns
    -------
    ndarray, shape (n, M) or (n, B, M)
    """
    from .._core.controls import OpenLoopControl
    from .._core.imbedding import solve_imbedding

    if isinstance(control, OpenLoopControl):
        res = solve_imbedding(problem, x, depths, control=control, **solve_kwargs)
        if not res.success:
            raise ArithmeticError(f"the imbedding sweep failed: {res.message}")
        setup = prepare(problem, x, depths, control, "RK45", 1e-6, 1e-9, None, ALL_METHODS)
        lam = res.adjoint if setup.batched else res.adjoint[:, None]
        out = []
        for p, L in zip(setup.depths, lam):
            th = np.broadcast_to(control.theta(p), (setup.x.shape[0], control.size))
            out.append(_residual(setup.provider, p, setup.x, th, L))
        out = np.stack(out)
        return out if setup.batched else out[:, 0]
    if not callable(control):
        raise TypeError(f"`control` must be an invimbed control or a feedback policy "
                        f"callable, but got {describe(control)}")
    if n_controls is None:
        raise ValueError("`n_controls` is required with a feedback policy")
    method = solve_kwargs.pop("method", "RK45")
    rtol, atol = solve_kwargs.pop("rtol", 1e-6), solve_kwargs.pop("atol", 1e-9)
    step = solve_kwargs.pop("step", None)
    setup = prepare(problem, x, depths, Constant(np.zeros(n_controls)), method, rtol, atol,
                    step, ALL_METHODS)
    clo = FeedbackJetClosure(setup.provider, setup.x, setup.q, n_controls, order=1,
                             estimate_error=False, policy=control)
    res = _sweep_feedback(setup, clo, method, rtol, atol, step, solve_kwargs)
    if not res.success:
        raise ArithmeticError(f"the closed-loop sweep failed: {res.message}")
    lam = res.adjoint if setup.batched else res.adjoint[:, None]
    th_all = res.feedback if setup.batched else res.feedback[:, None]
    out = np.stack([_residual(setup.provider, p, setup.x, th, L)
                    for p, th, L in zip(setup.depths, th_all, lam)])
    return out if setup.batched else out[:, 0]


def _residual(prov, p, x, theta, lam):
    return prov.derivative("R", p, x, theta, dth=1) + np.einsum(
        "bi,bim->bm", lam, prov.derivative("f", p, x, theta, dth=1))


def _sweep_feedback(setup, clo: FeedbackJetClosure, method, rtol, atol, step, options,
                    tol=None):
    from .._core.integrators.common import Outcome
    from .._core.setup import collect_results

    y0 = clo.initial_state()
    rhs = clo.rhs
    try:
        if method in SCIPY_METHODS:
            if step is not None:
                options.setdefault("max_step", float(step))
            outcome = integrate_scipy(rhs, y0, setup.q, setup.depths_desc, np.empty(0),
                                      setup.piece_of, method=method, rtol=rtol, atol=atol,
                                      **options)
        else:
            outcome = integrate_fixed(rhs, y0, setup.q, setup.depths_desc, np.empty(0),
                                      setup.piece_of, method=method, step=step)
    except OptimalityError as exc:
        outcome = Outcome(ys=np.full((setup.depths_desc.size, y0.size), np.nan), success=False,
                          message=f"Optimal feedback failed: {exc}.", failed_at=exc.p)
    B, N, M = clo.B, clo.N, clo.M
    K = clo.order
    converge = len(clo.orders) == 3          # orders K, K + 1, K - 1

    def per_depth(p: float, y: np.ndarray):
        fl = clo.fields(y)
        V = clo.layout.unpack(y)[f"V{clo.order}"]
        Phi, R, psi0, psi = clo.closed_loop(p, V, clo.order)
        fl["feedback"] = psi0
        fl["feedback_jacobian"] = psi[..., 1:N + 1]
        fl["depth_grad"] = -(np.einsum("bi,bi->b", fl["adjoint"], Phi[..., 0]) + R[..., 0])
        err = clo.error_estimate(y)
        if not converge:
            return fl, err
        # the ratio test of `assess`: d_(K-1) = |F_K - F_(K-1)| against d_K = err; the
        # costate is not ratio-tested (an infinite d_(K-1)): at moderate depths its series
        # alternates while value and output converge (docs/optimal-control.md)
        lo = clo.fields(y, K - 1)
        lower = {k: np.abs(fl[k] - lo[k]) for k in ("z", "value")}
        lower["adjoint"] = np.full_like(fl["adjoint"], np.inf)
        return fl, err, lower

    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N), "feedback": (B, M),
              "feedback_jacobian": (B, M, N), "depth_grad": (B,)}
    # without `tol` the criterion is the default 10% rule of `assess`; with it, the ratio
    # test of the series K - 1, K, K + 1 as well (docs/accuracy.md)
    res = collect_results(setup, outcome, per_depth, shapes,
                          closure="jet (optimal feedback)", method=method,
                          with_errors=clo.has_error_estimate,
                          tol=tol if converge else None)
    res.setdefault("warnings", [])
    if clo.stopped_at_noise:
        res.warnings.append(SolverWarning(
            "newton_at_derivative_noise",
            "Newton's method for the feedback stopped at the noise level of the "
            "finite-difference derivatives (above `newton_tol`); give exact derivatives "
            "(from_sympy, or `derivatives=`) for a tighter feedback."))
    return res
