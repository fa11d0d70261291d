"""The finite-difference stencil closure (the paper's sec. numerical-gradients).

The fields ``Z``, ``Lam`` and ``Lam_w`` are carried at the ``P`` stencil points
``x_s``: ``x`` and ``x +- Delta_i e_i`` (``difference="central"``, ``P = 2N + 1``, the
symmetric quotient eq. grad-symm) or ``x`` and ``x + Delta_i e_i``
(``difference="forward"``, ``P = N + 1``, Newton's quotient eq. grad-newton-x). At
every depth the Jacobian ``grad_x U`` is the difference quotient over the stencil and
is shared by all its points (eq. z-inim-numerical-xi with the quotient of the centre).
The paper's eq. grad-newton-xi prints ``grad z(x + Delta e_i) ~ -grad z(x)``; the minus
sign cannot be meant (it breaks the scheme already for ``f = 0``), and we use ``+``.

``V`` is carried at the centre only, with ``Lam`` as its gradient: the hierarchy stays
consistent and ``V`` needs no Hessian. The sources need ``f``, ``grad_z f`` and the
losses' gradients at the stencil points, and nothing of higher order.

The quotient is exact for fields affine in ``x``: for affine dynamics with at most
quadratic losses the stencil agrees with the adjoint method to integrator tolerance.
Otherwise its error is ``O(Delta^2)`` (central) or ``O(Delta)`` (forward) plus the same
``O(s^3)`` truncation in depth as the jet of order 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Closure, Layout


class StencilClosure(Closure):
    """Fields at ``x`` and at ``x +- Delta_i e_i``; see the module docstring."""

    name = "stencil"

    def __init__(self, provider, control, x, q, difference: str = "central",
                 delta: float | np.ndarray | None = None) -> None:
        super().__init__(provider, control, x, q)
        B, N = self.B, self.N
        self.difference = difference
        if delta is None:
            delta = 1e-3 * np.maximum(1.0, np.abs(x))  # (B, N)
        delta = np.broadcast_to(np.asarray(delta, dtype=float), (B, N)).copy()
        if np.any(~np.isfinite(delta)) or np.any(delta <= 0):
            raise ValueError(f"`delta` must be positive and finite, but got {delta}")
        self.delta = delta
        eye = np.eye(N)
        offsets = [np.zeros((B, N))]
        offsets += [delta[:, i, None] * eye[i] for i in range(N)]
        if difference == "central":
            offsets += [-delta[:, i, None] * eye[i] for i in range(N)]
        self.P = len(offsets)
        self.points = x[:, None, :] + np.stack(offsets, axis=1)  # (B, P, N)
        shapes = {"Z": (B, self.P, N), "L": (B, self.P, N), "V": (B,)}
        if self.nw:
            shapes["W"] = (B, self.P, self.nw)
        self.layout = Layout(shapes)

    def _jacobian(self, U: np.ndarray) -> np.ndarray:
        """Difference quotient ``grad_x U`` (B, *out, N) from stencil values U (B, P, *out)."""
        N = self.N
        plus = U[:, 1:N + 1]
        if self.difference == "central":
            minus = U[:, N + 1:]
            d = 2.0 * self.delta
        else:
            minus = U[:, :1]
            d = self.delta
        quot = (plus - minus) / d.reshape(d.shape + (1,) * (U.ndim - 2))
        return np.moveaxis(quot, 1, -1)

    def initial_state(self) -> np.ndarray:
        B, P, N = self.B, self.P, self.N
        pts = self.points.reshape(B * P, N)
        blocks = {
            "Z": self.points,
            "L": self.provider.derivative("T", self.q, pts, None, dz=1).reshape(B, P, N),
            "V": self.provider.derivative("T", self.q, self.x, None),
        }
        if self.nw:
            blocks["W"] = np.zeros((B, P, self.nw))
        return self.layout.pack(blocks)

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        B, P, N = self.B, self.P, self.N
        prov = self.provider
        blk = self.layout.unpack(y)
        pts = self.points.reshape(B * P, N)
        th = self._theta(p, piece, B * P)
        Phi = prov.derivative("f", p, pts, th).reshape(B, P, N)
        A = prov.derivative("f", p, pts, th, dz=1).reshape(B, P, N, N)
        rz = prov.derivative("R", p, pts, th, dz=1).reshape(B, P, N)
        r0 = prov.derivative("R", p, self.x, th[:B])
        Z, L = blk["Z"], blk["L"]
        JZ = self._jacobian(Z)   # (B, N, N)
        JL = self._jacobian(L)   # (B, N, N)
        out = {
            "Z": -np.einsum("bij,bpj->bpi", JZ, Phi),
            "L": -(np.einsum("bij,bpj->bpi", JL, Phi) + np.einsum("bpji,bpj->bpi", A, L) + rz),
            "V": -(np.einsum("bi,bi->b", L[:, 0], Phi[:, 0]) + r0),
        }
        if self.nw:
            J = self._param_jacobian(p, piece)
            G = prov.derivative("f", p, pts, th, dz=0, dth=1).reshape(B, P, N, self.M) @ J
            rw = prov.derivative("R", p, pts, th, dz=0, dth=1).reshape(B, P, self.M) @ J
            JW = self._jacobian(blk["W"])  # (B, nw, N)
            out["W"] = -(np.einsum("bwj,bpj->bpw", JW, Phi) + np.einsum("bpiw,bpi->bpw", G, L) + rw)
        return self.layout.pack(out)

    def fields(self, y: np.ndarray) -> dict[str, np.ndarray]:
        blk = self.layout.unpack(y)
        return {
            "z": blk["Z"][:, 0].copy(),
            "value": blk["V"].copy(),
            "adjoint": blk["L"][:, 0].copy(),
            "param_grad": blk["W"][:, 0].copy() if self.nw else np.zeros((self.B, 0)),
        }
