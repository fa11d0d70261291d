"""Second-order sensitivities of the shooting rows (docs/optimization.md, "Which
Hessian"; the first-order variational equations read forward: docs/theory.md, "The
classical adjoint method").

Every shooting interval ``k`` is one row of one ensemble solve (`Shooting.solve_points`).
Here a row carries, beside its state ``z`` and running cost ``c`` (together the
augmented state ``y = (z, c)``, ``dy/dt = g = (f, R)``), the first and second
derivatives of ``y`` with respect to the row's parameters ``p = (s_k, u_k)``
(``P = n + m``): with ``W = d(z, u)/dp = [Y_p[:n]; 0 | I]``,

```text
dY_p/dt  = g_w W,                              Y_p(t_k)  = [I | 0] (z rows), 0 (c row)
dY_pp/dt = g_z Y_pp[:n] + g_ww[W, W],          Y_pp(t_k) = 0
```

the forward-over-forward variational equations (the second derivatives ``f_zz``,
``f_ztheta``, ``f_thetatheta``, ``R_zz``, ... of the derivative provider, eq. (4)'s
``f`` and ``R``). The horizon ``H`` moves both ends of the row, ``dt_k/dH = d_0 = tau_k -
1`` and ``dt_e/dH = d_e = tau_e - 1`` for a point ``t_e`` of the row (its end, or a point
inside it). With ``G = Y_s g(t_k) + e_c R(t_k)`` (``dy/dt_k = -G``) the derivatives in
``H`` follow from ``g`` and ``g_w`` at both ends, without another integration:

```text
y_H  = d_e g_e - d_0 G
y_pH = d_e g_we W_e - d_0 (Y_ps[g_0] + Y_s^ g_w0)
y_HH = d_e^2 (g_te + g_ze g_e) - 2 d_0 d_e g_ze G + d_0^2 (Y_ss[g_0, g_0] + Y_s^ g_z0 g_0 - Y_s^ g_t0)
```

(``Y_s^ = [Y_s | e_c]``, the end's derivative in the augmented start state). The
columns of ``Y_pp`` are integrated to ``HESSIAN_TOL_FACTOR`` times the solve's ``rtol``
and ``atol``, the state and ``Y_p`` to them (the numpy rows; the compiled rows of
`invimbed._backends.ocp_rows`, whose loop has one tolerance, carry ``Y_pp /
HESSIAN_TOL_FACTOR``: ``rtol`` and ``HESSIAN_TOL_FACTOR atol`` on ``Y_pp``). The time
derivatives ``g_t`` are central differences in ``t`` of ``g`` (zero for an autonomous
problem; the providers give derivatives in ``z`` and ``theta`` only).

Only the entries of ``Y_pp`` that are not structurally zero are integrated
(`invimbed._control.ocp.sparsity`, for a sympy provider); none at all where ``f`` and
``R`` are linear in ``(z, u)``: the first-order solve then serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import numpy as np

from ..._core.integrators.ensemble import DONE, integrate_rows
from ..._core.results.failures import row_failure_reason
from ..options import SolverFailure
from .shooting import STIFF_REMEDY, Shooting
from .sparsity import row_pattern
from .variational import second_order_rows
from ..._backends import ocp_rows

_T_REL = np.finfo(float).eps ** (1.0 / 3.0)
#: The factor on ``rtol`` and ``atol`` for the columns of ``Y_pp`` (per-column tolerances
#: of `integrate_rows`): a Hessian 100 times less accurate than the gradient keeps
#: Newton's steps (the Goddard rocket's rows take half the steps: 279 against 554).
HESSIAN_TOL_FACTOR = 100.0


def has_exact_second_derivatives(provider) -> bool:
    """Whether ``provider`` gives exact derivatives of every order (`invimbed.from_sympy`,
    traced functions, the user's derivatives completed by the trace): the condition for
    ``hessian="exact"`` to be the default of `invimbed.solve_ocp`."""
    return bool(getattr(provider, "exact_derivatives", False))


def _first_order_rows(sol, n: int, P: int) -> SimpleNamespace:
    """The rows ``(z, c, Y_p)`` of a first-order `IntervalSolve` (the same layout as
    `Shooting.solve_points`' ``(z, c, S, cS)``) as the outcome of `SecondOrderRows.solve`
    with no ``Y_pp``: ``y`` at the ends, ``dense``, ``nfev = 0``."""
    K = sol.F.shape[0]
    Yp = np.zeros((K, n + 1, P))
    Yp[:, :n, :n], Yp[:, :n, n:], Yp[:, n, :n], Yp[:, n, n:] = sol.Fs, sol.Fu, sol.Cs, sol.Cu
    y = np.concatenate([sol.F, sol.C[:, None], Yp.reshape(K, -1)], axis=1)
    dense = None
    if sol.dense is not None:
        def dense(tt, rows, _d=sol.dense, _r0=sol.row0):
            return _d(tt, np.asarray(rows) + _r0)
    return SimpleNamespace(y=y, dense=dense, nfev=0, status=np.full(K, DONE))


@dataclass
class PointDerivatives:
    """The augmented state ``y = (z, c)`` at points of the rows and its derivatives in
    the row's parameters ``e = (s_k, u_k[, H])`` (``E = n + m [+ 1]``)."""

    y: np.ndarray        # (..., n + 1)
    d1: np.ndarray       # (..., n + 1, E)
    d2: np.ndarray       # (..., n + 1, E, E)


class SecondOrderRows:
    """The shooting rows of `Shooting` with their second-order sensitivities.

    Parameters
    ----------
    sh : Shooting
        The transcription; its provider must give second derivatives.
    structural_zeros : bool, optional
        Leave out the entries of ``Y_pp`` that are structurally zero
        (`invimbed._control.ocp.sparsity`; default). False integrates every entry of
        the active rows (the reference the sparse rows equal).
    """

    def __init__(self, sh: Shooting, *, structural_zeros: bool = True) -> None:
        self.sh = sh
        self.structural_zeros = structural_zeros
        n, m = sh.n, sh.m
        self.P = n + m
        self.E = self.P + int(sh.free_horizon)
        self.i1 = n + 1                                  # Y_p starts
        self.i2 = self.i1 + (n + 1) * self.P             # Y_pp starts (its active rows)
        self.active: np.ndarray | None = None            # rows of y whose Y_pp can be nonzero
        self.columns: np.ndarray | None = None           # the entries of Y_pp[active] carried
        self._evals = None

    def _evaluators(self):
        if self._evals is None:
            prov = self.sh.prov
            self._evals = {(w, dz, dth): prov.evaluator(w, dz, dth) for w in "fR"
                           for dz, dth in ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2))}
        return self._evals

    def _g(self, t, z, u):
        """``g = (f, R)`` at the points, (B, n + 1)."""
        ev = self._evaluators()
        return np.concatenate([ev["f", 0, 0](t, z, u), ev["R", 0, 0](t, z, u)[:, None]], axis=1)

    def _g_w(self, t, z, u):
        """``g_w`` with ``w = (z, u)``, (B, n + 1, P)."""
        ev = self._evaluators()
        f = np.concatenate([ev["f", 1, 0](t, z, u), ev["f", 0, 1](t, z, u)], axis=2)
        r = np.concatenate([ev["R", 1, 0](t, z, u), ev["R", 0, 1](t, z, u)], axis=1)
        return np.concatenate([f, r[:, None, :]], axis=1)

    def _g_ww(self, t, z, u):
        """``g_ww``, (B, n + 1, P, P)."""
        ev = self._evaluators()
        out = []
        for w, lead in (("f", ()), ("R", None)):
            zz, zu, uu = (ev[w, 2, 0](t, z, u), ev[w, 1, 1](t, z, u), ev[w, 0, 2](t, z, u))
            if lead is None:
                zz, zu, uu = zz[:, None], zu[:, None], uu[:, None]
            top = np.concatenate([zz, zu], axis=3)
            bottom = np.concatenate([np.swapaxes(zu, 2, 3), uu], axis=3)
            out.append(np.concatenate([top, bottom], axis=2))
        return np.concatenate(out, axis=1)

    def _g_t(self, t, z, u):
        """``dg/dt`` by central differences in ``t`` (zero where ``g`` reads no ``t``)."""
        h = _T_REL * np.maximum(1.0, np.abs(t))
        return (self._g(t + h, z, u) - self._g(t - h, z, u)) / (2 * h)[:, None]

    def _W(self, Yp: np.ndarray) -> np.ndarray:
        """``d(z, u)/dp``, (B, P, P), from ``Y_p`` (B, n + 1, P)."""
        n = self.sh.n
        W = np.zeros((Yp.shape[0], self.P, self.P))
        W[:, :n] = Yp[:, :n]
        W[:, n:, n:] = np.eye(self.sh.m)
        return W

    def _carried(self, t: np.ndarray, S: np.ndarray, U: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(active, columns)``: the rows of ``y`` whose ``Y_pp`` can be nonzero and the
        flat positions in ``Y_pp[active]`` (A, P, P) of the entries integrated: the
        structurally nonzero ones of `invimbed._control.ocp.sparsity.row_pattern` for a
        sympy provider (exact zeros left out), else every entry of the rows found by
        `_active_rows`."""
        pattern = row_pattern(self.sh.prov)
        if pattern is None:
            active = self._active_rows(t, S, U)
            return active, np.arange(active.size * self.P * self.P)
        active = np.flatnonzero(pattern.Y_pp.any(axis=(1, 2)))
        if not self.structural_zeros:
            return active, np.arange(active.size * self.P * self.P)
        return active, np.flatnonzero(pattern.Y_pp[active])

    def _active_rows(self, t: np.ndarray, S: np.ndarray, U: np.ndarray) -> np.ndarray:
        """The rows ``i`` of ``y`` whose ``Y_pp[i]`` can be nonzero: those with
        ``g_ww[i]`` nonzero, and those whose ``g_z[i]`` reads such a row (the closure),
        found at the start nodes moved by random relative steps of 1e-2 (a zero there is
        taken as an exact zero: linear dynamics carry no second-order rows but the
        cost's). A false zero would make the Hessian inexact, never the solution wrong
        (optimality is judged from the exact gradients)."""
        n = self.sh.n
        rng = np.random.default_rng(0)
        pts = [S * (1 + 1e-2 * rng.uniform(-1, 1, S.shape)) + 1e-2 * rng.uniform(-1, 1, S.shape)
               for _ in range(2)]
        us = [U + 1e-2 * np.maximum(1.0, np.abs(U)) * rng.uniform(-1, 1, U.shape)
              for _ in range(2)]
        ww = np.concatenate([self._g_ww(t, z, u) for z, u in zip(pts, us)])
        gz = np.concatenate([self._g_w(t, z, u)[:, :, :n] for z, u in zip(pts, us)])
        nonzero = lambda a, axes: np.any((a != 0) | ~np.isfinite(a), axis=axes)  # noqa: E731
        active = nonzero(ww, (0, 2, 3))
        reads = nonzero(gz, 0)                                  # (n + 1, n)
        while True:
            grown = active | np.any(reads[:, active[:n]], axis=1)
            if np.array_equal(grown, active):
                return np.flatnonzero(active)
            active = grown

    # -- the ensemble solve -----------------------------------------------------------
    def solve(self, w: np.ndarray, *, record: bool = False,
              first_order: Callable | None = None):
        """One ensemble solve of the ``K`` rows with second-order sensitivities.

        Returns ``(out, S, U, t)``: the `RowsOutcome` and the node states, controls and
        node times at ``w``. Raises `SolverFailure` where a row fails. Where no entry of
        ``Y_pp`` can be nonzero (``f`` and ``R`` linear in ``(z, u)``) the rows are the
        first-order ones: ``first_order(w)`` (the NLP's cached `IntervalSolve`, with its
        dense output) serves them, if given, without a solve of their own (``out.nfev``
        0)."""
        sh = self.sh
        n, K, P = sh.n, sh.K, self.P
        S, U, H = sh.unpack(np.asarray(w, dtype=float))
        t = sh.times(H)
        i1, i2 = self.i1, self.i2
        if self.active is None:
            self.active, self.columns = self._carried(t[:-1], S[:-1], U)
        A, cols = self.active, self.columns
        if cols.size == 0 and first_order is not None:
            return _first_order_rows(first_order(w), n, P), S, U, t
        Az = A[A < n]                                        # active state rows
        pos_z = np.flatnonzero(A < n)

        def rhs(tt, y, rows, piece):
            z, u = y[:, :n], U[rows]
            B = len(rows)
            Yp = y[:, i1:i2].reshape(B, n + 1, P)
            Ypp = np.zeros((B, A.size * P * P))
            Ypp[:, cols] = y[:, i2:]
            Ypp = Ypp.reshape(B, A.size, P, P)
            gw = self._g_w(tt, z, u)
            W = self._W(Yp)
            dYp = np.matmul(gw, W)
            Wb = W[:, None]                                  # (B, 1, P, P)
            coupled = gw[:, A][:, :, Az] @ Ypp[:, pos_z].reshape(B, Az.size, P * P)
            dYpp = (coupled.reshape(B, -1)
                    + (np.swapaxes(Wb, 2, 3) @ self._g_ww(tt, z, u)[:, A] @ Wb).reshape(B, -1))
            return np.concatenate([self._g(tt, z, u), dYp.reshape(B, -1), dYpp[:, cols]],
                                  axis=1)

        y0 = np.zeros((K, i2 + cols.size))
        y0[:, :n] = S[:-1]
        Y0 = np.zeros((K, n + 1, P))
        Y0[:, np.arange(n), np.arange(n)] = 1.0
        y0[:, i1:i2] = Y0.reshape(K, -1)
        # the steps of every entry of Y_pp[active] carried: the error norm is an rms over
        # the columns, and the structural zeros left out add 0 to its sum but counted in
        # its mean; tolerances scaled by sqrt(all / carried) give the same norm
        c = np.sqrt((i2 + A.size * P * P) / y0.shape[1])
        loose = np.arange(y0.shape[1]) >= i2        # Y_pp: its own, looser tolerances
        rtol = c * np.where(loose, HESSIAN_TOL_FACTOR * sh.rtol, sh.rtol)
        atol = c * np.where(loose, HESSIAN_TOL_FACTOR * sh.atol, sh.atol)
        kw = dict(tableau=sh.tableau, max_steps=sh.max_steps, first_step=sh.first_step,
                  max_step=sh.max_step, record=record)
        point = second_order_rows(sh.prov, A, HESSIAN_TOL_FACTOR, sh.backend, cols)
        if point is None:
            out = integrate_rows(rhs, t[:-1], t[1:], y0, rtol=rtol, atol=atol, **kw)
        else:   # compiled: Y_pp carried over HESSIAN_TOL_FACTOR (`second_order_rows`)
            out = ocp_rows.integrate(point, t[:-1], t[1:], y0, U, rtol=c * sh.rtol,
                                     atol=c * sh.atol, **kw)
            out.y[:, i2:] *= HESSIAN_TOL_FACTOR
            if out.dense is not None:
                out.dense.y_old[:, i2:] *= HESSIAN_TOL_FACTOR
                out.dense.Q[:, i2:] *= HESSIAN_TOL_FACTOR
        bad = np.flatnonzero(out.status != DONE)
        if bad.size:
            k = int(bad[0])
            why = row_failure_reason(int(out.status[k]), sh.max_steps, out.h_lambda[k],
                                     STIFF_REMEDY)
            raise SolverFailure(f"the second-order integration of shooting interval {k} "
                                f"([{t[k]:.6g}, {t[k + 1]:.6g}]) failed at t = "
                                f"{out.t[k]:.6g}: {why}")
        return out, S, U, t

    def ends(self, w: np.ndarray, solved) -> PointDerivatives:
        """``y`` at the row ends ``t_(k+1)`` and its derivatives in ``e``, (K, ...)."""
        out, S, U, t = solved
        return self._at(out.y, S, U, t, t[1:], self.sh.tau[1:] - 1.0)

    def inside(self, w: np.ndarray, solved, fractions: np.ndarray
               ) -> tuple[np.ndarray, PointDerivatives]:
        """The times (K, Q) at ``fractions`` of every row and ``y`` there with its
        derivatives in ``e``, (K, Q, ...), from the dense output (``record=True``)."""
        out, S, U, t = solved
        sh = self.sh
        K, Q = sh.K, fractions.size
        tt = t[:-1, None] + fractions[None, :] * np.diff(t)[:, None]
        rows = np.repeat(np.arange(K), Q)
        y = out.dense(tt.ravel(), rows)
        tau = sh.tau[:-1, None] + fractions[None, :] * np.diff(sh.tau)[:, None]
        d = self._at(y, S[rows], U[rows], None, tt.ravel(), tau.ravel() - 1.0,
                     t0=t[:-1][rows], d0=sh.tau[:-1][rows] - 1.0)
        shape = (K, Q)
        return tt, PointDerivatives(d.y.reshape(shape + d.y.shape[1:]),
                                    d.d1.reshape(shape + d.d1.shape[1:]),
                                    d.d2.reshape(shape + d.d2.shape[1:]))

    def _at(self, y, S, U, t, te, de, *, t0=None, d0=None) -> PointDerivatives:
        """The `PointDerivatives` of rows whose state is ``y`` (B, width) at ``te``
        (``dt_e/dH = de``), started at ``t0`` (default the nodes ``t[:-1]``) from
        ``S`` (the start states; ``S[:-1]`` of the nodes where ``t`` is given)."""
        sh = self.sh
        n, P, E = sh.n, self.P, self.E
        if t is not None:
            S, t0, d0 = S[:-1], t[:-1], sh.tau[:-1] - 1.0
        B = y.shape[0]
        z = y[:, :n]
        Yp = y[:, self.i1:self.i2].reshape(B, n + 1, P)
        Ypp = np.zeros((B, n + 1, P, P))
        carried = np.zeros((B, self.active.size * P * P))
        carried[:, self.columns] = y[:, self.i2:]
        Ypp[:, self.active] = carried.reshape(B, self.active.size, P, P)
        d1 = np.zeros((B, n + 1, E))
        d2 = np.zeros((B, n + 1, E, E))
        d1[:, :, :P] = Yp
        d2[:, :, :P, :P] = Ypp
        if sh.free_horizon:
            ge, gwe, gte = self._g(te, z, U), self._g_w(te, z, U), self._g_t(te, z, U)
            g0, gw0, gt0 = self._g(t0, S, U), self._g_w(t0, S, U), self._g_t(t0, S, U)
            Ys = np.concatenate([Yp[:, :, :n], np.zeros((B, n + 1, 1))], axis=2)
            Ys[:, n, n] = 1.0                              # Y_s^ = [Y_s | e_c]
            G = np.einsum("bij,bj->bi", Ys, g0)
            de_, d0_ = de[:, None], d0[:, None]
            d1[:, :, P] = de_ * ge - d0_ * G
            Yps_g0 = np.einsum("bijx,bj->bix", Ypp[:, :, :n, :], g0[:, :n])
            cross = (de_[..., None] * np.matmul(gwe, self._W(Yp))
                     - d0_[..., None] * (Yps_g0 + np.matmul(Ys, gw0)))
            d2[:, :, :P, P] = d2[:, :, P, :P] = cross
            gze, gz0 = gwe[:, :, :n], gw0[:, :, :n]
            d2[:, :, P, P] = (
                de_ ** 2 * (gte + np.einsum("bij,bj->bi", gze, ge[:, :n]))
                - 2 * d0_ * de_ * np.einsum("bij,bj->bi", gze, G[:, :n])
                + d0_ ** 2 * (np.einsum("bijk,bj,bk->bi", Ypp[:, :, :n, :n], g0[:, :n],
                                        g0[:, :n])
                              + np.einsum("bij,bj->bi", Ys, np.einsum("bij,bj->bi", gz0,
                                                                      g0[:, :n]) - gt0)))
        return PointDerivatives(y[:, :n + 1], d1, d2)
