"""The closed-loop jet: `JetClosure` with the optimal feedback of Theorem 3 (eq. (13)).

At an optimal control the imbedded coefficient ``Psi(p, x) = theta(p; p, x)`` (eq. (7))
satisfies ``grad_theta R + [grad_theta f]^T Lam = 0`` at ``(p, x)`` (docs/theory.md,
"Optimality"). Solving it for ``Psi`` at every depth turns the sweep into a
dynamic-programming sweep for the value function, the Hamilton--Jacobi--Bellman equation

    -dV/dp = min_theta [ R(p, x, theta) + grad_x V . f(p, x, theta) ],

which for linear dynamics and quadratic losses is exactly the Riccati equation
(`invimbed._control.riccati`).

`FeedbackJetClosure` is the jet closure of `invimbed._core.closures.jet` (its state, its
transport equations, its fields and error estimates) with one difference: the Taylor
coefficients ``Phi`` and ``R`` that each order is transported with are those of the
closed loop, ``f(p, x + delta, Psi(p, x + delta))``, which depend on the state through
``Lam = grad V``. The jet carries ``V`` to degree ``K + 1`` and ``Z`` to degree ``K``; the
feedback's jet ``Psi(p, x + delta)`` follows from the optimality condition by the
implicit function theorem, computed as a fixed-point iteration on polynomials: with
``H_theta(delta) = R_theta(x + delta, Psi(delta)) + Lam(delta) . f_theta(x + delta,
Psi(delta))``,

    psi <- psi - [H_thetatheta(x, Psi_0)]^-1 H_theta(delta)

gains one correct degree per pass, and ``K`` passes give ``Psi`` to degree ``K``, which is
all that degree ``K + 1`` of ``V`` needs (its next degree is multiplied by ``H_theta(0) =
0``: the envelope theorem). ``Psi_0`` itself is found at each depth by a vectorised
(projected) Newton method on the Hamiltonian, or in one step when the problem is
control-affine with a quadratic running loss in ``theta`` (``control_affine=True``).
See docs/optimal-control.md, "The HJB sweep (Theorem 3)" and "The feedback's jet".
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from .._core.derivatives.finite_difference import central_quotient, relative_step, step_size
from .._core.sweep.assembly import collect_results, depth_gradient
from .._core.sweep.dense import attach_dense
from .._core.closures.base import Closure
from .._core.closures.jet import JetClosure
from .._core.problem.open_loop import OpenLoopControl
from .._core.derivatives.multiindex import (compose_split, index_lookup, monomials,
                                            multi_indices,
                                            n_coefficients, poly_derivatives, poly_mul)
from .._core.results.results import Draft, SolverWarning, feedback_result
from .._core.setup.settings import Accuracy
from .policy import policy_from_outcome
from .closed_loop import OptimalityError, finish, integrate

#: Newton's tolerance on the feedback with exact derivatives (relative step size).
DEFAULT_NEWTON_TOL = 1e-12

#: The fields of a closed-loop result (kept for the depths reached by `OptimalityError`).
FIELDS = ("z", "value", "adjoint", "feedback", "feedback_jacobian", "depth_grad")


def optimality_gradient(prov, p: float, x: np.ndarray, theta: np.ndarray,
                        lam: np.ndarray) -> np.ndarray:
    """``H_theta = grad_theta R + [grad_theta f]^T Lam`` at ``(p, x, theta)``, (B, M): the
    left-hand side of eq. (13), zero at an optimal control."""
    return _gradient(prov.derivative("R", p, x, theta, dth=1),
                     prov.derivative("f", p, x, theta, dth=1), lam)


def _gradient(R_theta: np.ndarray, f_theta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``R_theta + f_theta^T Lam`` (B, M), from ``R_theta`` (B, M), ``f_theta`` (B, N, M)."""
    return R_theta + np.einsum("bi,bim->bm", lam, f_theta)


class _Applied(OpenLoopControl):
    """The control slot of the closed loop: ``theta`` of size M, no parameters ``w``.

    ``theta`` is what the feedback applies at one depth, ``Psi(p, x_b)`` for every input
    row (B, M) (zeros in the closure, which computes its own). Along the closed loop
    ``dV/dp = -(Lam . f + R)`` at that control (the envelope theorem): the core's
    `depth_gradient` with it."""

    def __init__(self, theta: np.ndarray) -> None:
        self.w = np.empty(0)
        self.size = theta.shape[-1]
        self._rows = theta

    def _theta(self, t: float, piece: Any) -> np.ndarray:
        return self._rows


class FeedbackJetClosure(JetClosure):
    """Closed-loop jet: ``V`` to degree ``K + 1``, ``Z`` to degree ``K``, with ``Psi(p, x)``
    either optimal (Theorem 3) or a given feedback ``policy(p, x)``.

    Everything but the source of the coefficients is `JetClosure`'s: the carried orders
    (``K``; ``K + 1`` too with ``estimate_error``, for the estimate; ``K - 1`` too with
    ``ratio_test``, which the convergence test of a ``tol`` needs), `initial_state`, the transport of each order
    (`JetClosure._rhs_jet`), `fields`, `error_estimate` and `lower_difference`. What
    differs: `rhs` transports each order with its own closed-loop coefficients
    (`closed_loop`), and `lower_difference` does not ratio-test the costate. The control
    is a feedback, so there are no parameters ``w`` and no paper's layer recursion
    (`disc_step` refuses).
    """

    def __init__(self, provider, x, q, n_controls: int, order: int = 1,
                 estimate_error: bool = True, bounds: np.ndarray | None = None,
                 control_affine: bool = False, theta0: np.ndarray | None = None,
                 policy: Callable | None = None, newton_tol: float | None = None,
                 max_newton: int = 50, ratio_test: bool = False) -> None:
        # the open-loop jet with a control slot of size M and no parameters; the jet of
        # order K - 1 only where the ratio test asks for it: it is the first to blow up
        # as the horizon grows, and would stop a sweep that orders K and K + 1 carry on
        super().__init__(provider, _Applied(np.zeros((1, n_controls))), x, q, order=order,
                         estimate_error=estimate_error, ratio_test=ratio_test)
        self.bounds = bounds
        self.control_affine = control_affine
        self.policy = policy
        self.newton_tol = DEFAULT_NEWTON_TOL if newton_tol is None else float(newton_tol)
        self.max_newton = max_newton
        #: whether a Newton iteration stopped at the derivatives' noise level rather than
        #: at ``newton_tol`` (finite differences); reported as a warning
        self.stopped_at_noise = False
        B, M = self.B, self.M
        start = np.zeros((B, M)) if theta0 is None else np.broadcast_to(theta0, (B, M)).copy()
        if bounds is not None:
            start = np.clip(start, bounds[:, 0], bounds[:, 1])
        self._warm = {K: start.copy() for K in self.orders}
        self._codes: dict[tuple[str, int], Callable] = {}

    # -- what differs from the open-loop jet ----------------------------------------------
    def carried_orders(self) -> list[int]:
        """`JetClosure.carried_orders` with the block of ``K - 1`` last: ``K``, ``K + 1``,
        ``K - 1`` (the adaptive integrator's steps, and so the results, depend on the block
        order at the level of rounding). ``K - 1`` only with the ratio test."""
        K = self.order
        return ([K] + ([K + 1] if self.has_error_estimate else [])
                + ([K - 1] if self.has_ratio_test else []))

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        """`JetClosure`'s transport of every order (`JetClosure._rhs_jet`), each with the
        closed-loop ``Phi`` and ``R`` of its own ``V`` (`closed_loop`)."""
        blocks = self.layout.unpack(y)
        out = {}
        for K in self.orders:
            Phi, R, _, _ = self.closed_loop(p, blocks[f"V{K}"], K)
            out.update(self._rhs_jet(K, blocks, {"Phi": Phi, "R": R}))
        return self.layout.pack(out)

    def lower_difference(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        """`JetClosure.lower_difference` for ``z`` and ``value`` only: the costate is not
        ratio-tested (an infinite ``d_(K-1)``), since at moderate depths its series
        alternates while the value and the output converge (docs/optimal-control.md,
        "The error estimate and its convergence test")."""
        low = super().lower_difference(y)
        if low is not None:
            low["adjoint"] = np.full_like(low["adjoint"], np.inf)
        return low

    def disc_step(self, p_new: float, p_old: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        return Closure.disc_step(self, p_new, p_old, y, piece)

    # -- the feedback --------------------------------------------------------------------
    def _code(self, which: str, dth: int = 0) -> Callable:
        """The provider's code of ``d^dth which / d theta^dth`` (`evaluator`): the Newton
        iteration calls it on the well-formed ``(p, x, theta)`` it builds itself, so the
        per-call checks of `derivative` are left out (the same values)."""
        code = self._codes.get((which, dth))
        if code is None:
            code = self._codes[which, dth] = self.provider.evaluator(which, 0, dth)
        return code

    def hamiltonian(self, p: float, theta: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """``H = R + Lam . f`` (B,) at ``(p, x, theta)``."""
        x = self.x
        return self._code("R")(p, x, theta) + np.einsum("bi,bi->b", lam,
                                                         self._code("f")(p, x, theta))

    def hamiltonian_gradient(self, p: float, theta: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """``H_theta`` (B, M) at ``(p, x, theta)`` (`optimality_gradient`)."""
        x = self.x
        return _gradient(self._code("R", 1)(p, x, theta), self._code("f", 1)(p, x, theta), lam)

    def hamiltonian_terms(self, p: float, theta: np.ndarray, lam: np.ndarray,
                          H: np.ndarray | None = None, value: bool = True):
        """``H``, ``H_theta`` (B, M) and ``H_thetatheta`` (B, M, M) at ``(p, x, theta)``
        (``H`` itself as given, where it is known there; None with ``value=False``, for
        the control-affine step, which does not read it)."""
        x = self.x
        Hm = self._code("R", 2)(p, x, theta) + np.einsum(
            "bi,bimn->bmn", lam, self._code("f", 2)(p, x, theta))
        if H is None and value:
            H = self.hamiltonian(p, theta, lam)
        return H, self.hamiltonian_gradient(p, theta, lam), Hm

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
        if self.bounds is None:        # every component free
            return -np.linalg.solve(Hm, g[..., None])[..., 0]
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
        h = step_size(relative_step(1), np.abs(theta).max(axis=1))
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
        H = None         # H at theta where the line search computed it
        for it in range(self.max_newton):
            H, g, Hm = self.hamiltonian_terms(p, theta, lam, H, value=not self.control_affine)
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
                    if np.array_equal(self._free(new, self.hamiltonian_gradient(p, new, lam)),
                                      free):
                        theta = new
                        break
                    theta, H = new, None
                    continue
                theta = new
                break
            # damped Newton on H (Armijo backtracking per batch row)
            alpha = np.ones((self.B, 1))
            for _ in range(30):
                trial = theta + alpha * step
                if self.bounds is not None:
                    trial = np.clip(trial, self.bounds[:, 0], self.bounds[:, 1])
                Ht = self.hamiltonian(p, trial, lam)
                ok = Ht <= H + 1e-4 * np.einsum("bm,bm->b", g, trial - theta) + 1e-14 * np.abs(H)
                if np.all(ok):
                    break
                alpha = np.where(ok[:, None], alpha, 0.5 * alpha)
            moved = np.abs(trial - theta).max()
            theta, H = trial, Ht
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
            h = step_size(relative_step(1), self.x)
            for j in range(N):
                e = np.zeros(N)
                e[j] = 1.0
                up = self._call_policy(p, self.x + h[:, j:j + 1] * e)
                dn = self._call_policy(p, self.x - h[:, j:j + 1] * e)
                psi[:, :, 1 + j] = central_quotient(up, dn, h[:, j:j + 1])
        return pol, psi

    def _call_policy(self, p: float, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self.policy(p, x), dtype=float)
        if out.shape != (x.shape[0], self.M):
            raise ValueError(f"`control` (a feedback policy) must return shape (B, M) = "
                             f"{(x.shape[0], self.M)} for x of shape {x.shape}, but returned "
                             f"shape {out.shape}")
        return out

    # -- the closed loop -----------------------------------------------------------------
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
        # f and R composed in one call (each row's sums are those of two calls)
        both = compose_split(np.concatenate([Fj, Rj[:, None]], axis=1),
                             monomials(psi_L, N, L), N, M, L)
        return both[:, :N], both[:, N], psi0, psi

    def _feedback_jet(self, Fj, Rj, lam, psi0, K, Lj):
        """The implicit-function-theorem jet of ``Psi`` from eq. (13) (module docstring);
        ``Fj``, ``Rj`` to degree ``Lj = max(K + 1, 2)``."""
        N, M, B = self.N, self.M, self.B
        L = K + 1
        idx1, idx2, fact2 = _theta_indices(N, M, Lj)
        lam0 = lam[..., 0]
        Hm = (Rj[:, idx2] + np.einsum("bi,bimn->bmn", lam0, Fj[:, :, idx2])) * fact2
        if self.bounds is None:        # every component free
            Hinv = np.linalg.inv(Hm)
        else:
            g = Rj[:, idx1] + np.einsum("bi,bim->bm", lam0, Fj[:, :, idx1])
            free = self._free(psi0, g)
            pair = free[:, :, None] & free[:, None, :]
            Hinv = np.linalg.inv(np.where(pair, Hm, np.eye(M)[None])) * pair
        nJ = n_coefficients(N + M, L)
        Fth = poly_derivatives(Fj[..., :nJ], N + M, L)[:, :, N:]   # (B, N, M, nJ(K))
        Rth = poly_derivatives(Rj[..., :nJ], N + M, L)[:, N:]      # (B, M, nJ(K))
        # R_theta and f_theta composed in one call: (B, M + N M, c)
        coef = np.concatenate([Rth, Fth.reshape(B, N * M, -1)], axis=1)
        psi = np.zeros((B, M, n_coefficients(N, K)))
        for k in range(K):
            # the first pass composes with psi = 0: the coefficients without theta (the
            # products with the zero monomials add exact zeros)
            both = (coef[..., _z_part(N, M, K)] if k == 0 else
                    compose_split(coef, monomials(psi, N, K), N, M, K))
            Ht = both[:, :M] + _dot_poly(both[:, M:].reshape(B, N, M, -1), lam, N, K)
            psi = psi - np.einsum("bmk,bkc->bmc", Hinv, Ht)
            psi[..., 0] = 0.0
        return psi


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


@lru_cache(maxsize=None)
def _z_part(n: int, m: int, order: int) -> np.ndarray:
    """The joint indices (``n`` then ``m`` variables) of ``(alpha, 0)`` for each ``alpha``
    of ``multi_indices(n, order)``: ``g(x + delta, theta_0)``'s coefficients."""
    look = index_lookup(n + m, order)
    return np.array([look[tuple(int(v) for v in a) + (0,) * m]
                     for a in multi_indices(n, order)], dtype=np.int64)


def _dot_poly(F: np.ndarray, lam: np.ndarray, n: int, order: int) -> np.ndarray:
    """``sum_i lam_i(delta) F_i(delta)`` for F (B, N, M, c) and lam (B, N, c) -> (B, M, c)."""
    return poly_mul(F, lam[:, :, None, :], n, order).sum(axis=1)


def sweep_feedback(setup, clo: FeedbackJetClosure, method: str, rtol: float, atol: float,
                   step: float | None, options: dict[str, Any],
                   grid: np.ndarray | None = None,
                   budget: Any = None) -> Draft:
    """The closed-loop sweep of ``clo`` to every depth of ``setup``: a result like
    `solve_optimal`'s (``feedback``, ``feedback_jacobian`` and the core's depth gradient
    added to the jet's fields; an `OptimalityError` keeps the depths reached).

    The accuracy criterion is ``setup.accuracy``'s (`assess`) where ``clo`` carries the
    ratio test of the series ``K - 1``, ``K``, ``K + 1`` (docs/accuracy.md), the default
    10% rule otherwise. With ``grid`` (`sweep.integrate`) the result's ``policy`` is the
    sweep's feedback (`invimbed._control.policy.SweepFeedback`); ``budget`` is the
    `sweep.SweepBudget`."""
    outcome = integrate(clo.rhs, clo.initial_state(), setup, method, rtol, atol, step,
                        options, grid=grid, budget=budget)
    B, N, M = clo.B, clo.N, clo.M

    def per_depth(p: float, y: np.ndarray):
        fl = clo.fields(y)
        V = clo.layout.unpack(y)[f"V{clo.order}"]
        try:
            _, _, psi0, psi = clo.closed_loop(p, V, clo.order)
        except OptimalityError as exc:    # ends the result at this depth (collect_results)
            outcome.extra.setdefault("optimality_error", exc)
            raise
        fl["feedback"] = psi0
        fl["feedback_jacobian"] = psi[..., 1:N + 1]
        fl["depth_grad"] = depth_gradient(replace(setup, control=_Applied(psi0)), p,
                                          fl["adjoint"])
        return fl, clo.error_estimate(y), clo.lower_difference(y)

    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N), "feedback": (B, M),
              "feedback_jacobian": (B, M, N), "depth_grad": (B,)}
    assembly = dict(closure="jet (optimal feedback)", method=method,
                    with_errors=clo.has_error_estimate,
                    accuracy=setup.accuracy if clo.has_ratio_test else Accuracy())
    res = collect_results(setup, outcome, per_depth, shapes, **assembly)
    res = attach_dense(res, setup, outcome, per_depth, shapes, build=feedback_result,
                       **assembly)
    if clo.stopped_at_noise:
        res = res.but(warnings=res.get("warnings", []) + [SolverWarning(
            "newton_at_derivative_noise",
            "Newton's method for the feedback stopped at the noise level of the "
            "finite-difference derivatives (above `newton_tol`); give exact derivatives "
            "(from_sympy, or `derivatives=`) for a tighter feedback.")])

    def jet_at(p: float, y: np.ndarray) -> np.ndarray:
        _, _, psi0, psi = clo.closed_loop(p, clo.layout.unpack(y)[f"V{clo.order}"], clo.order)
        coef = np.array(psi)
        coef[..., 0] = psi0
        return coef

    res = res.but(policy=policy_from_outcome(outcome, jet_at, clo.x, clo.order, clo.bounds))
    return finish(res, outcome, FIELDS)
