"""Multiple shooting on the exact ensemble (docs/optimization.md, "Optimal control problems").

The horizon ``[p, q]`` is cut at the nodes ``t_k = q - H (1 - tau_k)``, ``k = 0..K``
(``H = q - p``, ``0 = tau_0 < ... < tau_K = 1``). The control is constant on every
interval, ``theta = u_k`` on ``[t_k, t_(k+1)]``, and every interval starts from its own
node state ``s_k`` (``s_0 = x``). The decision vector is ``w = (u_0, s_1, u_1, s_2, ...,
u_(K-1), s_K[, H])``, the horizon last where it is free.

Every interval is one row of ONE ensemble solve (`integrate_rows`, each row with its own
adaptive steps). A row carries, beside ``z`` and the running cost ``c``, the forward
sensitivities of both with respect to ``(s_k, u_k)``: the variational equations

```text
dS/dt  = f_z S + [0 | f_theta],      S(t_k)  = [I | 0]      (n x (n + m))
dcS/dt = R_z S + [0 | R_theta],      cS(t_k) = 0            (n + m)
```

so that the end state ``F_k``, the interval cost ``C_k`` and their exact Jacobians come
from one pass. The horizon enters through the ends of the rows only:
``dF/dt_(k+1) = f(t_(k+1), F_k, u_k)``, ``dF/dt_k = -S_s f(t_k, s_k, u_k)``, and for the
cost ``dC/dt_(k+1) = R(t_(k+1), ...)``, ``dC/dt_k = -R(t_k, s_k, u_k) - cS_s . f(t_k, s_k, u_k)``,
with ``dt_k/dH = tau_k - 1``. The objective is ``sum_k C_k + T(s_K)`` and the continuity
defects ``s_(k+1) - F_k`` are the equality constraints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._core.results.failures import row_failure_reason
from ..._backends import ocp_rows
from .sparsity import row_pattern
from .variational import first_order_rows, variational_rhs

from ..._core.integrators.ensemble import DONE, TABLEAUX, DenseRows, integrate_rows

#: What `solve_ocp` recommends for a stiff interval (its ensemble is explicit): the
#: implicit collocation transcription (`invimbed._control.ocp.collocation`), or shorter
#: intervals.
STIFF_REMEDY = ("use transcription='collocation' (Radau IIA collocation, implicit), or "
                "split the interval (more `intervals`, or a finer `grid` there)")


@dataclass
class IntervalSolve:
    """Everything one ensemble solve of the ``K`` intervals gives, at one ``w``."""

    F: np.ndarray          # (K, n) end states
    C: np.ndarray          # (K,) interval costs
    Fs: np.ndarray         # (K, n, n) dF/ds_k
    Fu: np.ndarray         # (K, n, m) dF/du_k
    Cs: np.ndarray         # (K, n)
    Cu: np.ndarray         # (K, m)
    FH: np.ndarray         # (K, n) dF/dH (zeros for a fixed horizon)
    CH: np.ndarray         # (K,)
    nfev: int
    nsteps: np.ndarray     # (K,) attempted steps per interval
    failure: str | None    # None, or where and why a row failed
    dense: DenseRows | None = None
    row0: int = 0          # the first of this solve's rows in ``dense``


class Shooting:
    """The multiple-shooting transcription of one problem, input and grid.

    Parameters
    ----------
    provider : DerivativeProvider
        The problem's derivatives (``f``, ``f_z``, ``f_theta``, ``R``, ``R_z``,
        ``R_theta``, ``T``, ``T_z`` are used).
    x : ndarray, shape (n,)
        The initial state ``s_0``.
    q : float
        The end of the horizon.
    tau : ndarray, shape (K + 1,)
        The nodes as fractions of the horizon, from 0 to 1.
    free_horizon : bool
        Whether ``H`` is a decision variable.
    horizon : float
        ``H`` where it is fixed.
    m : int
        The control size.
    """

    defect_name = "continuity defects"

    def __init__(self, provider, x: np.ndarray, q: float, tau: np.ndarray, *,
                 free_horizon: bool, horizon: float, m: int, method: str = "RK45",
                 rtol: float = 1e-8, atol: float = 1e-10, max_steps: int = 10_000,
                 first_step: float | None = None, max_step: float = np.inf,
                 backend: str = "auto") -> None:
        self.prov = provider
        self.backend = backend      # "auto", "numpy" or "numba" (`variational.rows_backend`)
        self.x = np.asarray(x, dtype=float)
        self.n = self.x.size
        self.m = m
        self.q = float(q)
        self.tau = np.asarray(tau, dtype=float)
        self.K = self.tau.size - 1
        self.free_horizon = free_horizon
        self.horizon = float(horizon)
        self.tableau = TABLEAUX[method]
        self.rtol, self.atol, self.max_steps = rtol, atol, max_steps
        self.first_step, self.max_step = first_step, max_step
        self.block = self.n + self.m
        self.n_vars = self.K * self.block + int(free_horizon)
        self.n_defects = self.K * self.n
        self._evals: tuple | None = None

    # -- the decision vector ---------------------------------------------------------
    def unpack(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """``(S, U, H)``: node states (K + 1, n) with ``S[0] = x``, controls (K, m), horizon."""
        n, m, K = self.n, self.m, self.K
        blocks = np.asarray(w[:K * self.block]).reshape(K, self.block)
        S = np.vstack([self.x[None, :], blocks[:, m:]])
        H = float(w[-1]) if self.free_horizon else self.horizon
        return S, blocks[:, :m], H

    def pack(self, S: np.ndarray, U: np.ndarray, H: float | None = None) -> np.ndarray:
        """The decision vector of node states ``S`` (K + 1, n; ``S[0]`` ignored),
        controls ``U`` (K, m) and horizon ``H``."""
        blocks = np.concatenate([np.reshape(U, (self.K, self.m)),
                                 np.reshape(S, (self.K + 1, self.n))[1:]], axis=1)
        w = blocks.ravel()
        if self.free_horizon:
            w = np.append(w, self.horizon if H is None else H)
        return w

    def u_index(self, k: int) -> np.ndarray:
        """Positions of ``u_k`` in ``w``."""
        return k * self.block + np.arange(self.m)

    def s_index(self, k: int) -> np.ndarray:
        """Positions of ``s_k`` (``k >= 1``) in ``w``."""
        return (k - 1) * self.block + self.m + np.arange(self.n)

    @property
    def h_index(self) -> int | None:
        return self.n_vars - 1 if self.free_horizon else None

    def times(self, H: float) -> np.ndarray:
        """The node times ``t_k = q - H (1 - tau_k)``."""
        return self.q - H * (1.0 - self.tau)

    # -- the ensemble solve ----------------------------------------------------------
    def solve(self, w: np.ndarray, *, record: bool = False) -> IntervalSolve:
        """Integrate every interval with its sensitivities, in one ensemble solve."""
        return self.solve_points(np.asarray(w, dtype=float)[None, :], record=record)[0]

    def solve_points(self, ws: np.ndarray, *, record: bool = False) -> list[IntervalSolve]:
        """`solve` at ``P`` decision vectors ``ws`` (P, n_vars), all ``P K`` intervals as
        the rows of ONE ensemble solve. Every row takes its own adaptive steps, so each
        point's result is the one `solve` gives it alone."""
        n, m, K, nm = self.n, self.m, self.K, self.block
        P = ws.shape[0]
        parts = [self.unpack(w) for w in ws]
        S = np.stack([a[0] for a in parts])                   # (P, K + 1, n)
        U = np.concatenate([a[1] for a in parts])             # (P K, m)
        t = np.stack([self.times(a[2]) for a in parts])       # (P, K + 1)
        f, f_z, f_u, R, R_z, R_u = self._evaluators()
        i_S = n + 1
        i_cS = i_S + n * nm
        run = first_order_rows(self.prov, self.backend)   # compiled (sympy problems, numba)
        fused = variational_rhs(self.prov) if run is None else None

        def rhs(tt, y, rows, piece):
            z = y[:, :n]
            u = U[rows]
            if fused is not None:                   # one generated call (sympy problems)
                return fused(tt, y, u)
            Sk = y[:, i_S:i_cS].reshape(-1, n, nm)
            dS = np.matmul(f_z(tt, z, u), Sk)
            dS[:, :, n:] += f_u(tt, z, u)
            dcS = np.einsum("ki,kij->kj", R_z(tt, z, u), Sk)
            dcS[:, n:] += R_u(tt, z, u)
            return np.concatenate([f(tt, z, u), R(tt, z, u)[:, None],
                                   dS.reshape(-1, n * nm), dcS], axis=1)

        y0 = np.zeros((P * K, i_cS + nm))
        y0[:, :n] = S[:, :-1].reshape(-1, n)
        S0 = np.zeros((P * K, n, nm))
        S0[:, np.arange(n), np.arange(n)] = 1.0
        y0[:, i_S:i_cS] = S0.reshape(P * K, -1)
        kw = dict(tableau=self.tableau, rtol=self.rtol, atol=self.atol,
                  max_steps=self.max_steps, first_step=self.first_step,
                  max_step=self.max_step, record=record)
        if run is not None:
            out = ocp_rows.integrate(run, t[:, :-1].ravel(), t[:, 1:].ravel(), y0, U, **kw)
        else:
            out = integrate_rows(rhs, t[:, :-1].ravel(), t[:, 1:].ravel(), y0, **kw)
        return [self._unpack_rows(out, j, S[j], U[j * K:(j + 1) * K], t[j])
                for j in range(P)]

    def generate(self) -> None:
        """Generate the code that `solve_points` runs (the provider's derivative code, and
        for a sympy problem the one right-hand side of `first_order_rows`, compiled, or
        of `variational_rhs`) now, once, rather than at the first solve."""
        self._evaluators()
        if first_order_rows(self.prov, self.backend) is None:
            variational_rhs(self.prov)

    def _evaluators(self) -> tuple:
        """``f, f_z, f_theta, R, R_z, R_theta`` of the provider, for the ensemble's loop."""
        if self._evals is None:
            self._evals = tuple(self.prov.evaluator(which, dz, dth)
                                for which in ("f", "R") for dz, dth in ((0, 0), (1, 0), (0, 1)))
        return self._evals

    def _unpack_rows(self, out, j: int, S: np.ndarray, U: np.ndarray,
                     t: np.ndarray) -> IntervalSolve:
        """The `IntervalSolve` of point ``j`` from rows ``j K .. (j + 1) K - 1``."""
        n, K, nm = self.n, self.K, self.block
        i_c, i_S = n, n + 1
        i_cS = i_S + n * nm
        r = slice(j * K, (j + 1) * K)
        y = out.y[r]
        sens = y[:, i_S:i_cS].reshape(K, n, nm)
        F, C = y[:, :n], y[:, i_c]
        Fs, Fu = sens[:, :, :n], sens[:, :, n:]
        Cs, Cu = y[:, i_cS:i_cS + n], y[:, i_cS + n:]
        FH = np.zeros((K, n))
        CH = np.zeros(K)
        failure = None
        status = out.status[r]
        bad = np.flatnonzero(status != DONE)
        if bad.size:
            k = int(bad[0])
            why = row_failure_reason(int(status[k]), self.max_steps, out.h_lambda[r][k],
                                     STIFF_REMEDY)
            failure = (f"the integration of shooting interval {k} ([{t[k]:.6g}, "
                       f"{t[k + 1]:.6g}]) failed at t = {out.t[r][k]:.6g}: {why}"
                       f" ({bad.size} of {K} intervals failed)")
        elif self.free_horizon:
            prov = self.prov
            f0 = prov.derivative("f", t[:-1], S[:-1], U)
            f1 = prov.derivative("f", t[1:], F, U)
            r0 = prov.derivative("R", t[:-1], S[:-1], U)
            r1 = prov.derivative("R", t[1:], F, U)
            d0, d1 = self.tau[:-1] - 1.0, self.tau[1:] - 1.0
            FH = d1[:, None] * f1 - d0[:, None] * np.einsum("kij,kj->ki", Fs, f0)
            CH = d1 * r1 - d0 * (r0 + np.einsum("ki,ki->k", Cs, f0))
        return IntervalSolve(F=F, C=C, Fs=Fs, Fu=Fu, Cs=Cs, Cu=Cu, FH=FH, CH=CH,
                             nfev=out.nfev, nsteps=out.nsteps[r], failure=failure,
                             dense=out.dense, row0=j * K)

    # -- objective and defects -------------------------------------------------------
    def objective(self, w: np.ndarray, sol: IntervalSolve) -> float:
        S, _, _ = self.unpack(w)
        terminal = self.prov.derivative("T", self.q, S[-1:], None)[0]
        return float(np.sum(sol.C) + terminal)

    def gradient(self, w: np.ndarray, sol: IntervalSolve) -> np.ndarray:
        S, _, _ = self.unpack(w)
        g = np.zeros(self.n_vars)
        blocks = g[:self.K * self.block].reshape(self.K, self.block)
        blocks[:, :self.m] = sol.Cu
        blocks[:-1, self.m:] = sol.Cs[1:]                 # s_(k+1) starts interval k+1
        blocks[-1, self.m:] = self.prov.derivative("T", self.q, S[-1:], None, dz=1)[0]
        if self.free_horizon:
            g[-1] = np.sum(sol.CH)
        return g

    def defects(self, w: np.ndarray, sol: IntervalSolve) -> np.ndarray:
        """``s_(k+1) - F_k``, shape (K n,)."""
        S, _, _ = self.unpack(w)
        return (S[1:] - sol.F).ravel()

    def defect_structure(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of the defects' Jacobian (COO), in the order of
        `defect_jacobian`'s values: the entries of ``F_s``, ``F_u`` that are not
        structurally zero (`invimbed._control.ocp.sparsity`: ``Y_p``'s pattern, the closure
        of the dependency graph of ``f`` over an interval; every entry for a provider
        without symbolic derivatives)."""
        rows, cols = self._defect_entries()
        keep = self._defect_keep()
        return rows[keep], cols[keep]

    def _defect_keep(self) -> np.ndarray:
        """Which entries of `_defect_entries` can be nonzero (found once)."""
        if getattr(self, "_keep_defects", None) is None:
            n, m, K = self.n, self.m, self.K
            pattern = row_pattern(self.prov)
            Yp = np.ones((n + 1, n + m), dtype=bool) if pattern is None else pattern.Y_p
            per = [np.ones(n, dtype=bool), Yp[:n, n:].ravel(), Yp[:n, :n].ravel()]
            if self.free_horizon:
                per.append(np.ones(n, dtype=bool))
            keep = np.tile(np.concatenate(per), (K, 1))
            keep[0, n + n * m:n + n * m + n * n] = False
            first = np.ones(keep.shape, dtype=bool)
            first[0, n + n * m:n + n * m + n * n] = False
            self._keep_defects = keep[first]
        return self._keep_defects

    def _defect_entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of every entry of the defects' blocks."""
        n, m, K = self.n, self.m, self.K
        rows, cols = [], []
        for k in range(K):
            r = k * n + np.arange(n)
            rows.append(r)                                  # d/ds_(k+1) = I
            cols.append(self.s_index(k + 1))
            rows.append(np.repeat(r, m))                    # d/du_k = -Fu
            cols.append(np.tile(self.u_index(k), n))
            if k:                                           # d/ds_k = -Fs
                rows.append(np.repeat(r, n))
                cols.append(np.tile(self.s_index(k), n))
            if self.free_horizon:
                rows.append(r)
                cols.append(np.full(n, self.h_index))
        return np.concatenate(rows), np.concatenate(cols)

    def defect_jacobian(self, sol: IntervalSolve) -> np.ndarray:
        """The values of the defects' Jacobian in the order of `defect_structure`: per
        interval ``I``, ``-Fu``, ``-Fs`` (not for interval 0: ``s_0`` is fixed), ``-FH``."""
        n, m, K = self.n, self.m, self.K
        parts = [np.ones((K, n)), -sol.Fu.reshape(K, n * m), -sol.Fs.reshape(K, n * n)]
        if self.free_horizon:
            parts.append(-sol.FH)
        vals = np.concatenate(parts, axis=1)
        keep = np.ones(vals.shape, dtype=bool)
        keep[0, n + n * m:n + n * m + n * n] = False
        return vals[keep][self._defect_keep()]

    # -- inside the intervals --------------------------------------------------------
    def interior(self, w: np.ndarray, sol: IntervalSolve, fractions: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """States inside every interval at the given fractions of it (from the dense
        output of a solve with ``record=True``) and their sensitivities.

        Returns ``(t, z, dz/ds_k, dz/du_k, dz/dH)`` with shapes (K, P), (K, P, n),
        (K, P, n, n), (K, P, n, m), (K, P, n).
        """
        n, m, K, nm = self.n, self.m, self.K, self.block
        S, U, H = self.unpack(w)
        t = self.times(H)
        P = fractions.size
        tt = t[:-1, None] + fractions[None, :] * (t[1:] - t[:-1])[:, None]
        rows = np.repeat(np.arange(K), P)
        y = sol.dense(tt.ravel(), rows + sol.row0)
        z = y[:, :n].reshape(K, P, n)
        sens = y[:, n + 1:n + 1 + n * nm].reshape(K, P, n, nm)
        zs, zu = sens[..., :n], sens[..., n:]
        zH = np.zeros((K, P, n))
        if self.free_horizon:
            f = self.prov.derivative("f", tt.ravel(), z.reshape(-1, n), U[rows]).reshape(K, P, n)
            f0 = self.prov.derivative("f", t[:-1], S[:-1], U)
            tau = self.tau[:-1, None] + fractions[None, :] * np.diff(self.tau)[:, None]
            d0 = self.tau[:-1] - 1.0
            zH = (tau - 1.0)[..., None] * f - d0[:, None, None] * np.einsum(
                "kpij,kj->kpi", zs, f0)
        return tt, z, zs, zu, zH
