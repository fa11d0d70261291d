"""The jet closure: Taylor coefficients of each field around ``x`` (DESIGN.md section 3).

A field ``U(p, x + delta)`` is carried as its derivative tensors ``U_k = D^k U(p, x)``,
``k = 0..L`` (full, symmetric tensors). The transport term of
``dU/dp = -grad_x U . Phi - S_U`` has, at order ``k``, the Leibniz expansion

    D^k (grad U . Phi) = sum_{j=0..k} C(k, j) Sym[ U_{j+1} . Phi_j' ],   j' = k - j

where ``Phi_m = D^m_z f(p, x, theta(p))`` and ``.`` contracts ``U``'s first derivative
axis with ``Phi``'s output axis. The order-``L`` equation needs ``U_{L+1}``, which is
dropped: that is the truncation. Carried orders, for a jet of order ``K``:

* ``Z`` (Thm 1, eq. z-inim-t): orders ``0..K``, no source, ``Z_1(q) = I``;
* ``V`` (the loss): orders ``0..K+1`` with source ``D^k R``; ``Lam = V_1`` (eq. lam-def)
  is therefore carried to order ``K`` *as the gradient of V*, so the source of
  Theorem 2 (eq. lam-inim), ``[grad_z f]^T Lam + grad_z R``, appears by itself in the
  order-1 equation and Lam never drifts from the gradient of the value;
* ``W = Lam_w`` (eq. aug-lam-th-pde): orders ``0..K`` with source
  ``D^k ([grad_w f]^T Lam + grad_w R)``.

For affine dynamics with at most quadratic losses ``Z_2 = V_3 = 0`` exactly, so order 1
is exact (the Riccati transformation). Otherwise, in the depth ``s = q - p``: the dropped
``Z_{K+1}`` starts at 0 and grows like ``s``, so ``Z_0`` errs by ``O(s^(K+2))``; the dropped
``V_{K+2}`` starts at ``D^(K+2) T(x)``, so ``Lam = V_1`` errs by ``O(s^(K+1))`` and ``V_0``
by ``O(s^(K+2))`` when that is non-zero (a non-quadratic terminal loss for ``K = 1``), and
by ``O(s^(K+2))`` and ``O(s^(K+3))`` when it vanishes. None of it shrinks with the
integrator's step. The error estimate
carries the jet of order ``K + 1`` alongside (sharing every derivative evaluation) and
reports the difference.

``crop=True`` replaces the ``Z_1`` equation by the continuous form of the paper's
eq. cropping, ``dZ_1/dp = -grad_z Phi`` (the factor ``Z_1`` in ``Z_1 . grad Phi``
cropped to the identity); kept to reproduce the paper, not recommended: it is not
exact even for ``dz/dt = a z`` (``Z_1 = 1 + a s`` instead of ``e^(a s)``). The paper
prints the layer form without the step factor ``p_i - p_{i+1}``; with the unit steps of
its experiments the two agree up to the sign of the step, which we take from
eq. disc-update. The other fields are carried as in the jet of order 1.
"""

from __future__ import annotations

from math import comb, prod
from typing import Any

import numpy as np

from .._derivatives import symmetrize
from .base import Closure, Layout


def _contract(U: np.ndarray, Phi: np.ndarray, out_nd: int) -> np.ndarray:
    """``U[b, *o, i, *a] Phi[b, i, *c] -> [b, *o, *a, *c]``."""
    B = U.shape[0]
    o = U.shape[1:1 + out_nd]
    a = U.shape[2 + out_nd:]
    c = Phi.shape[2:]
    N = Phi.shape[1]
    P, na, nc = prod(o), prod(a), prod(c)
    U2 = U.reshape(B, P, N, na).transpose(0, 1, 3, 2).reshape(B, P * na, N)
    res = np.matmul(U2, Phi.reshape(B, N, nc))
    return res.reshape((B,) + o + a + c)


def transport(U: list[np.ndarray], Phi: list[np.ndarray], out_nd: int) -> list[np.ndarray]:
    """Derivative tensors of ``grad_x U . Phi`` up to the order carried (``U_{L+1} = 0``)."""
    L = len(U) - 1
    res = []
    for k in range(L + 1):
        acc = np.zeros_like(U[k])
        for j in range(min(k, L - 1) + 1):
            acc = acc + comb(k, j) * _contract(U[j + 1], Phi[k - j], out_nd)
        res.append(symmetrize(acc, k))
    return res


def param_source(G: list[np.ndarray], Lam: list[np.ndarray], Rw: list[np.ndarray],
                 order: int) -> list[np.ndarray]:
    """Derivative tensors of ``[grad_w f]^T Lam + grad_w R`` up to ``order``.

    ``G[j]`` has axes (B, N, n_w, *[N]*j), ``Lam[m]`` (B, N, *[N]*m), ``Rw[k]``
    (B, n_w, *[N]*k).
    """
    res = []
    for k in range(order + 1):
        acc = Rw[k].copy()
        for j in range(k + 1):
            Gj = G[j]
            B, N, nw = Gj.shape[:3]
            Lm = Lam[k - j]
            t = np.einsum("biwa,bic->bwac", Gj.reshape(B, N, nw, -1), Lm.reshape(B, N, -1))
            acc = acc + comb(k, j) * t.reshape((B, nw) + (N,) * k)
        res.append(symmetrize(acc, k))
    return res


class JetClosure(Closure):
    """Jet of order ``K`` for ``Z``, ``K + 1`` for ``V`` (so ``Lam`` is its gradient), ``K``
    for ``Lam_w``; see the module docstring for the equations."""

    name = "jet"
    supports_disc = True

    def __init__(self, provider, control, x, q, order: int = 1, estimate_error: bool = True,
                 crop: bool = False) -> None:
        super().__init__(provider, control, x, q)
        self.order = int(order)
        self.crop = crop
        if crop:
            self.name = "crop"
        self.orders = [self.order] + ([self.order + 1] if estimate_error and not crop else [])
        self.has_error_estimate = len(self.orders) > 1
        B, N, nw = self.B, self.N, self.nw
        shapes: dict[str, tuple[int, ...]] = {}
        for K in self.orders:
            for k in range(K + 1):
                shapes[f"Z{K}_{k}"] = (B, N) + (N,) * k
            for k in range(K + 2):
                shapes[f"V{K}_{k}"] = (B,) + (N,) * k
            if nw:
                for k in range(K + 1):
                    shapes[f"W{K}_{k}"] = (B, nw) + (N,) * k
        self.layout = Layout(shapes)
        top = max(self.orders)
        self.f_order = top + 1   # V of order K+1 needs D^(K+1) f and D^(K+1) R
        self.w_order = top       # W of order K needs D^K of grad_w f, grad_w R

    # -- the contract ------------------------------------------------------------------
    def initial_state(self) -> np.ndarray:
        B, N = self.B, self.N
        x = self.x
        T = [self.provider.derivative("T", self.q, x, None, dz=k) for k in range(self.f_order + 1)]
        blocks = {}
        for K in self.orders:
            blocks[f"Z{K}_0"] = x
            if K >= 1:
                blocks[f"Z{K}_1"] = np.broadcast_to(np.eye(N), (B, N, N))
            for k in range(2, K + 1):
                blocks[f"Z{K}_{k}"] = np.zeros((B, N) + (N,) * k)
            for k in range(K + 2):
                blocks[f"V{K}_{k}"] = T[k]
            if self.nw:
                for k in range(K + 1):
                    blocks[f"W{K}_{k}"] = np.zeros((B, self.nw) + (N,) * k)
        return self.layout.pack(blocks)

    def coefficients(self, p: float, piece: Any = None) -> dict[str, list[np.ndarray]]:
        """Derivative tensors of ``f``, ``R`` (and their ``w`` gradients) at ``(p, x)``."""
        prov = self.provider
        x = self.x
        th = self._theta(p, piece, self.B)
        Phi = [prov.derivative("f", p, x, th, dz=k) for k in range(self.f_order + 1)]
        R = [prov.derivative("R", p, x, th, dz=k) for k in range(self.f_order + 1)]
        coef = {"Phi": Phi, "R": R}
        if self.nw:
            J = self._param_jacobian(p, piece)  # (M, nw)
            G, Rw = [], []
            for j in range(self.w_order + 1):
                fj = prov.derivative("f", p, x, th, dz=j, dth=1) @ J  # (B, N, *[N]*j, nw)
                G.append(np.moveaxis(fj, -1, 2))
                rj = prov.derivative("R", p, x, th, dz=j, dth=1) @ J  # (B, *[N]*j, nw)
                Rw.append(np.moveaxis(rj, -1, 1))
            coef["G"] = G
            coef["Rw"] = Rw
        return coef

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        coef = self.coefficients(p, piece)
        blocks = self.layout.unpack(y)
        out = {}
        for K in self.orders:
            out.update(self._rhs_jet(K, blocks, coef))
        return self.layout.pack(out)

    def _rhs_jet(self, K: int, blocks: dict, coef: dict) -> dict[str, np.ndarray]:
        Phi, R = coef["Phi"], coef["R"]
        Z = [blocks[f"Z{K}_{k}"] for k in range(K + 1)]
        V = [blocks[f"V{K}_{k}"] for k in range(K + 2)]
        out = {}
        tZ = transport(Z, Phi, 1)
        if self.crop:
            tZ[1] = Phi[1]
        for k in range(K + 1):
            out[f"Z{K}_{k}"] = -tZ[k]
        tV = transport(V, Phi, 0)
        for k in range(K + 2):
            out[f"V{K}_{k}"] = -(tV[k] + R[k])
        if self.nw:
            W = [blocks[f"W{K}_{k}"] for k in range(K + 1)]
            tW = transport(W, Phi, 1)
            sW = param_source(coef["G"], V[1:], coef["Rw"], K)
            for k in range(K + 1):
                out[f"W{K}_{k}"] = -(tW[k] + sW[k])
        return out

    def fields(self, y: np.ndarray, K: int | None = None) -> dict[str, np.ndarray]:
        K = self.order if K is None else K
        b = self.layout.unpack(y)
        return {
            "z": b[f"Z{K}_0"].copy(),
            "value": b[f"V{K}_0"].copy(),
            "adjoint": b[f"V{K}_1"].copy(),
            "param_grad": b[f"W{K}_0"].copy() if self.nw else np.zeros((self.B, 0)),
        }

    def error_estimate(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        if not self.has_error_estimate:
            return None
        lo = self.fields(y, self.orders[0])
        hi = self.fields(y, self.orders[1])
        return {k: np.abs(hi[k] - lo[k]) for k in lo}

    # -- the paper's discrete recursion -------------------------------------------------
    def disc_step(self, p_new: float, p_old: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        """One layer of eqs. disc-update and disc-lam, from ``p_old = p_{i+1}`` to
        ``p_new = p_i``, with ``Phi`` and every coefficient taken at ``p_i``.

        ``Z_i = Z_{i+1} - h grad Z_{i+1} . Phi(p_i)`` (disc-update), and
        ``Lam_i = Lam_{i+1} - h [grad Lam_i . Phi(p_i) + [grad_z f]^T Lam_{i+1} + grad_z R]``
        (disc-lam, with the running-loss term): the Jacobian ``grad Lam`` is the one at
        ``p_i``, updated first, as the paper writes it. ``h = p_i - p_{i+1}``. The
        Jacobians themselves take one forward-Euler step of their jet-1 (or crop)
        equations. Jet order 1 only.
        """
        if self.order != 1:
            raise ValueError(f"method='disc' (the paper's layer recursion) is defined for "
                             f"jet order 1, but order={self.order}")
        h = p_new - p_old
        coef = self.coefficients(p_new, piece)
        Phi, R = coef["Phi"], coef["R"]
        blocks = self.layout.unpack(y)
        new = {}
        for K in self.orders:
            # K == 1 here (the estimate is disabled for method='disc')
            Z0, Z1 = blocks[f"Z{K}_0"], blocks[f"Z{K}_1"]
            V0, V1, V2 = (blocks[f"V{K}_{k}"] for k in range(3))
            A = Phi[1]
            AT = np.swapaxes(A, 1, 2)
            new[f"Z{K}_1"] = Z1 - h * (A if self.crop else Z1 @ A)
            new[f"Z{K}_0"] = Z0 - h * np.einsum("bij,bj->bi", Z1, Phi[0])
            hess_f = np.einsum("bi,bijk->bjk", V1, Phi[2])
            V2n = V2 - h * (V2 @ A + AT @ V2 + hess_f + R[2])
            new[f"V{K}_2"] = V2n
            new[f"V{K}_1"] = V1 - h * (np.einsum("bij,bj->bi", V2n, Phi[0])
                                       + np.einsum("bji,bj->bi", A, V1) + R[1])
            new[f"V{K}_0"] = V0 - h * (np.einsum("bi,bi->b", V1, Phi[0]) + R[0])
            if self.nw:
                W0, W1 = blocks[f"W{K}_0"], blocks[f"W{K}_1"]
                G, Rw = coef["G"], coef["Rw"]
                src1 = (np.einsum("biw,bic->bwc", G[0], V2) + np.einsum("biwa,bi->bwa", G[1], V1)
                        + Rw[1])
                W1n = W1 - h * (W1 @ A + src1)
                new[f"W{K}_1"] = W1n
                new[f"W{K}_0"] = W0 - h * (np.einsum("bwj,bj->bw", W1n, Phi[0])
                                           + np.einsum("biw,bi->bw", G[0], V1) + Rw[0])
        return self.layout.pack(new)
