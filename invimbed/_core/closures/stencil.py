"""The finite-difference stencil closure (the paper's section 3.2).

The fields ``Z``, ``Lam`` and ``Lam_w`` are carried at the ``P`` stencil points
``x_s``: ``x`` and ``x +- Delta_i e_i`` (``difference="central"``, ``P = 2N + 1``, the
symmetric quotient eq. (18)) or ``x`` and ``x + Delta_i e_i``
(``difference="forward"``, ``P = N + 1``, Newton's quotient eq. (19)). At
every depth the Jacobian ``grad_x U`` is the difference quotient over the stencil and
is shared by all its points (eq. (17) with the quotient of the centre).
The paper's eq. (20) prints ``grad z(x + Delta e_i) ~ -grad z(x)``; the minus
sign cannot be meant (it breaks the scheme already for ``f = 0``), and we use ``+``.

``V`` is carried at the centre only, with ``Lam`` as its gradient: the hierarchy stays
consistent and ``V`` needs no Hessian. The sources need ``f``, ``grad_z f`` and the
losses' gradients at the stencil points, and nothing of higher order.

The default spacing is ``Delta_i = 1e-3 * max(|x_i|, 1e-2)`` (`default_spacing`):
relative to each component, so that a stencil point never changes the sign of a
component larger than ``1e-5`` in magnitude (a concentration, a rate or a scale stays
positive, the dynamics stay where they are defined), and not below ``1e-5``, where the
quotient would magnify the rounding error of finite-difference derivatives (measured on
the pendulum and van der Pol problems with the default provider: the adjoint's error is
unchanged from a 1e-3 spacing down to 1e-5 and grows 2 to 15 times at 1e-6;
docs/scripts/stencil_spacing.py). A component within ``1e-5`` of a boundary of the
problem's domain (a zero concentration) is crossed by the central stencil: pass
``difference="forward"`` or ``delta`` there.

The quotient is exact for fields affine in ``x``: for affine dynamics with at most
quadratic losses the stencil agrees with the adjoint method to integrator tolerance.
Otherwise its error is ``O(Delta^2)`` (central) or ``O(Delta)`` (forward) plus the same
``O(s^3)`` truncation in depth as the jet of order 1.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..runtime.namespace import array_namespace
from ..runtime.ordered import sum_products
from .base import Closure, Layout


#: The default spacing relative to each component, and the floor of ``|x_i|`` it scales.
DELTA_RELATIVE, DELTA_FLOOR = 1e-3, 1e-2


def default_spacing(x: np.ndarray) -> np.ndarray:
    """The default stencil spacing ``Delta_i = 1e-3 * max(|x_i|, 1e-2)``, shape of ``x``
    (see the module docstring)."""
    return DELTA_RELATIVE * np.maximum(np.abs(np.asarray(x, dtype=float)), DELTA_FLOOR)


def difference_quotient(U: Any, delta: Any, difference: str) -> Any:
    """``grad_x U`` (B, *out, N) from the values ``U`` (B, P, *out) at the stencil points:
    eq. (18) (``"central"``, over ``2 Delta``) or eq. (19) (``"forward"``).
    Works on any array namespace (numpy, cupy)."""
    N = delta.shape[-1]
    plus = U[:, 1:N + 1]
    if difference == "central":
        minus, d = U[:, N + 1:], 2.0 * delta
    else:
        minus, d = U[:, :1], delta
    quot = (plus - minus) / d.reshape(tuple(d.shape) + (1,) * (U.ndim - 2))
    return array_namespace(quot).moveaxis(quot, 1, -1)


def control_sources(f_theta: Any, r_theta: Any, jac: Any) -> tuple[Any, Any]:
    """``G = f_theta . dtheta/dw`` (B, P, N, nw) and ``r_w = R_theta . dtheta/dw``
    (B, P, nw), the parameter sources of eq. (32) at the stencil points."""
    return sum_products(f_theta[..., None, :], jac.T), sum_products(r_theta[..., None, :], jac.T)


def stencil_rhs(blk: dict, quotient: Callable[[Any], Any], Phi: Any, A: Any, rz: Any, r0: Any,
                G: Any = None, rw: Any = None) -> dict:
    """d/dp of the stencil fields (eqs. (17), (10) with the quotient of
    the centre), from the blocks ``Z``, ``L`` (B, P, N), ``V`` (B,) and ``W`` (B, P, nw),
    the dynamics ``Phi`` (B, P, N), its Jacobian ``A`` (B, P, N, N), the running loss's
    gradient ``rz`` (B, P, N) and value at the centre ``r0`` (B,), and the parameter
    sources ``G``, ``rw`` (`control_sources`) when there are parameters. Every sum is
    added in a fixed order (`invimbed._core.runtime.ordered`), as the numba kernels add them; works on
    any array namespace."""
    Z, L = blk["Z"], blk["L"]
    Phi_j = Phi[:, :, None, :]                       # (B, P, 1, N): Phi_j at each point
    L_j = L[:, :, None, :]
    out = {
        "Z": -sum_products(quotient(Z)[:, None], Phi_j),
        "L": -((sum_products(quotient(L)[:, None], Phi_j) + sum_products(A.swapaxes(-1, -2), L_j))
               + rz),
        "V": -(sum_products(L[:, 0], Phi[:, 0]) + r0),
    }
    if G is not None:
        out["W"] = -((sum_products(quotient(blk["W"])[:, None], Phi_j)
                      + sum_products(G.swapaxes(-1, -2), L_j)) + rw)
    return out


class StencilClosure(Closure):
    """Fields at ``x`` and at ``x +- Delta_i e_i``; see the module docstring."""

    name = "stencil"

    def __init__(self, provider, control, x, q, difference: str = "central",
                 delta: float | np.ndarray | None = None, time_free: bool = False) -> None:
        super().__init__(provider, control, x, q, time_free=time_free)
        B, N = self.B, self.N
        self.difference = difference
        if delta is None:
            delta = default_spacing(x)  # (B, N)
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
        self.layout = Layout(shapes, self.xp)

    def _jacobian(self, U: np.ndarray) -> np.ndarray:
        return difference_quotient(U, self.delta, self.difference)

    def initial_state(self) -> np.ndarray:
        B, P, N = self.B, self.P, self.N
        pts = self.points.reshape(B * P, N)
        blocks = {
            "Z": self.points,
            "L": self.provider.derivative("T", self.q, pts, None, dz=1).reshape(B, P, N),
            "V": self.provider.derivative("T", self.q, self.x, None),
        }
        if self.nw:
            blocks["W"] = self.xp.zeros((B, P, self.nw))
        return self.layout.pack(blocks)

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        return self._rhs_from(self.coefficients(p, piece), y)

    def rhs_at(self, p: float, y: Any, theta: Any, jac: Any) -> Any:
        """`rhs` for given ``theta(p)`` (M,) and ``d theta / d w`` (M, nw): what the
        array-namespace sweep passes, on the device."""
        return self._rhs_from(self.coefficients_at(p, theta, jac), y)

    def coefficients_at(self, p: float, theta: Any, jac: Any) -> dict[str, Any]:
        """``f``, its Jacobian and the running loss's gradient at the stencil points, the
        running loss at the centre (and the parameter sources) at depth ``p``: the
        arguments of `stencil_rhs` that do not depend on the state (`coefficients` keeps
        them)."""
        B, P, N = self.B, self.P, self.N
        prov = self.provider
        pts = self.points.reshape(B * P, N)
        th = self.xp.broadcast_to(theta, (B * P, self.M))
        coef = {"Phi": prov.derivative("f", p, pts, th).reshape(B, P, N),
                "A": prov.derivative("f", p, pts, th, dz=1).reshape(B, P, N, N),
                "rz": prov.derivative("R", p, pts, th, dz=1).reshape(B, P, N),
                "r0": prov.derivative("R", p, self.x, th[:B]), "G": None, "rw": None}
        if self.nw:
            coef["G"], coef["rw"] = control_sources(
                prov.derivative("f", p, pts, th, dz=0, dth=1).reshape(B, P, N, self.M),
                prov.derivative("R", p, pts, th, dz=0, dth=1).reshape(B, P, self.M), jac)
        return coef

    def _rhs_from(self, coef: dict, y: Any) -> Any:
        out = stencil_rhs(self.layout.unpack(y), self._jacobian, **coef)
        return self.layout.pack(out)

    def fields(self, y: np.ndarray) -> dict[str, np.ndarray]:
        blk = self.layout.unpack(y)
        return {
            "z": blk["Z"][:, 0].copy(),
            "value": blk["V"].copy(),
            "adjoint": blk["L"][:, 0].copy(),
            "param_grad": blk["W"][:, 0].copy() if self.nw else self.xp.zeros((self.B, 0)),
        }
