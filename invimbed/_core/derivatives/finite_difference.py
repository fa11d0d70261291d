"""Derivatives from user callables, completed by central finite differences.

`FiniteDifferences` answers every request of the derivative interface. For
``(which, dz, dth)`` it starts from the highest-order derivative the user supplied
that does not exceed the request (the function itself at worst) and applies nested
central differences for the orders still missing. The step for coordinate ``j`` is

    h_j = eps ** (1 / (2 + k)) * max(1, |u_j|)

where ``k`` is the number of nested difference levels and ``u`` the variable being
differenced (``z`` or ``theta``): it balances the ``O(h^2)`` truncation error of the
central quotient against the ``O(eps / h^k)`` rounding error of ``k`` nested
quotients. `FiniteDifferences.derivative_error` estimates the error of a
difference derivative by comparing steps ``h`` and ``2h`` (Richardson: ``|D_h - D_2h| /
3``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..runtime.namespace import array_namespace
from .base import DerivativeOrderError, DerivativeProvider

EPS = np.finfo(float).eps


# -- the step rule, written once -----------------------------------------------------------
# `FiniteDifferences` below, the derivative plans of the numba backend
# (`invimbed._backends._plans`) and its compiled nested differences
# (`invimbed._backends._numba_calls._nested`, which compiles `step_size` and
# `central_quotient` with numba) all take their steps from these three functions.


def relative_step(levels: int, scale: float = 1.0, factor: float = 1.0) -> float:
    """``factor * scale * eps ** (1 / (2 + levels))``: the relative step of ``levels``
    nested central differences (0 when nothing is differenced)."""
    return factor * scale * EPS ** (1.0 / (2 + levels)) if levels else 0.0


def step_size(h_rel: float, u: np.ndarray | float) -> np.ndarray | float:
    """``h = h_rel * max(1, |u|)``, elementwise: the step for the coordinate ``u``
    (numpy or cupy arrays, floats; compiled by numba for the kernels)."""
    return h_rel * np.maximum(1.0, np.abs(u))


def central_quotient(up: np.ndarray | float, down: np.ndarray | float,
                     h: np.ndarray | float) -> np.ndarray | float:
    """``(g(u + h) - g(u - h)) / (2 h)``."""
    return (up - down) / (2.0 * h)


BatchedFn = Callable[[float, np.ndarray, np.ndarray], np.ndarray]


class FiniteDifferences(DerivativeProvider):
    """Derivatives from user callables where given, central differences otherwise.

    Parameters
    ----------
    functions : dict
        ``{"f": fn, "R": fn, "T": fn}`` batched callables ``fn(t, z, theta)`` with
        ``z`` of shape (B, N) and ``theta`` of shape (B, M) returning (B, *out).
    known : dict, optional
        ``{(which, dz, dth): fn}`` batched user derivatives, same call signature,
        returning the tensor with axes ``(B, *out, *[N]*dz, *[M]*dth)``.
    n_state, n_theta : int
        ``N`` and ``M``.
    max_fd_levels : int
        Highest number of nested difference levels allowed (default 4: about 5 correct
        digits at the fourth level). More levels lose most significant digits; exact
        derivatives (user callables, the symbolic provider) have no such limit.
    scale : float
        Multiplies the step rule (``h`` above); 1 by default.
    zero : tuple of str
        Functions known to be identically zero (a missing loss): all their derivatives
        are zero, of any order.
    """

    name = "finite-difference provider"
    #: Per-row times are handed to the functions (see `invimbed.BolzaProblem`).
    row_times = True
    #: Differences of differences lose digits fast: jets of order <= 2 only.
    max_jet_order = 2

    def __init__(self, functions: dict[str, BatchedFn], n_state: int, n_theta: int,
                 known: dict[tuple[str, int, int], BatchedFn] | None = None,
                 max_fd_levels: int = 4, scale: float = 1.0,
                 zero: tuple[str, ...] = ()) -> None:
        self.functions = dict(functions)
        self.known = dict(known or {})
        self.zero = tuple(zero)
        self.n_state = n_state
        self.n_theta = n_theta
        self.max_fd_levels = max_fd_levels
        self.scale = scale
        tops = [max((kz + kt for (w, kz, kt) in self.known if w == which), default=0)
                + max_fd_levels for which in ("f", "R", "T") if which not in self.zero]
        self.max_order = min(tops)
        if self.known:
            self.name = "user-derivative provider (finite differences beyond what was given)"

    # -- the interface ---------------------------------------------------------------
    def order_limit(self, which: str) -> int | None:
        return None if which in self.zero else self.max_order

    def _derivative(self, which, t, z, theta, dz, dth):
        return self._with_step(which, t, z, theta, dz, dth, factor=1.0)

    def fd_levels(self, which: str, dz: int, dth: int) -> int:
        """How many nested difference levels the request ``(which, dz, dth)`` needs."""
        base = self.base_key(which, dz, dth)
        return dz + dth - base[1] - base[2]

    def derivative_error(self, which: str, t: float, z: np.ndarray, theta: np.ndarray | None,
                         dz: int = 0, dth: int = 0) -> np.ndarray:
        """Estimated absolute error of `derivative` (zero where nothing is differenced)."""
        z = np.asarray(z, dtype=float)
        B = z.shape[0]
        theta = (np.zeros((B, self.n_theta)) if theta is None
                 else np.broadcast_to(np.asarray(theta, float), (B, self.n_theta)))
        d1 = self._with_step(which, t, z, theta, dz, dth, factor=1.0)
        if self.fd_levels(which, dz, dth) == 0:
            return np.zeros_like(d1)
        d2 = self._with_step(which, t, z, theta, dz, dth, factor=2.0)
        return np.abs(d1 - d2) / 3.0

    # -- implementation --------------------------------------------------------------
    def base_key(self, which: str, dz: int, dth: int) -> tuple[str, int, int]:
        """The derivative ``(which, dz, dth)`` is differenced from: the highest one the
        user gave that does not exceed it (the function itself at worst)."""
        best = (which, 0, 0)
        for (w, kz, kt) in self.known:
            if w == which and kz <= dz and kt <= dth and kz + kt > best[1] + best[2]:
                best = (w, kz, kt)
        return best

    def _with_step(self, which, t, z, theta, dz, dth, factor):
        if which in self.zero:  # a missing loss is zero, and so is every derivative
            shape = (z.shape[0],) + self.out_shape(which) + (self.n_state,) * dz
            return array_namespace(z).zeros(shape + (self.n_theta,) * dth)
        base = self.base_key(which, dz, dth)
        fn = self.functions[which] if base[1:] == (0, 0) else self.known[base]
        levels_z = dz - base[1]
        levels_th = dth - base[2]
        levels = levels_z + levels_th
        if levels > self.max_fd_levels:
            raise DerivativeOrderError(
                f"{which} derivative (dz={dz}, dth={dth}) would need {levels} nested levels "
                f"of finite differences (at most {self.max_fd_levels} allowed); give exact "
                f"derivatives"
            )
        h_rel = relative_step(levels, self.scale, factor)
        out_nd = len(self.out_shape(which))
        g = fn
        nz = base[1]
        nt = base[2]
        # theta axes come last: difference in theta first (appending at the end),
        # then in z (inserting just after the existing z axes).
        for _ in range(levels_th):
            g = _difference(g, "theta", h_rel, insert_at=out_nd + nz + nt)
            nt += 1
        for _ in range(levels_z):
            g = _difference(g, "z", h_rel, insert_at=out_nd + nz)
            nz += 1
        return g(t, z, theta)


def _difference(g: BatchedFn, var: str, h_rel: float, insert_at: int) -> BatchedFn:
    """Central difference of the batched ``g`` in ``var``, new axis at ``1 + insert_at``."""

    def dg(t, z, theta):
        xp = array_namespace(z, theta)   # numpy, or cupy on the array-namespace sweep
        B = z.shape[0]
        u = z if var == "z" else theta
        n = u.shape[1]
        if n == 0:
            base = g(t if np.ndim(t) == 0 else t[:0], z[:0], theta[:0])
            shape = (B,) + tuple(base.shape[1:])
            res = xp.zeros(shape + (0,))
            return xp.moveaxis(res, -1, 1 + insert_at)
        h = step_size(h_rel, u)  # (B, n)
        shift = h.T[:, :, None] * xp.eye(n)[:, None, :]  # (n, B, n)
        up = (u[None] + shift).reshape(n * B, n)
        um = (u[None] - shift).reshape(n * B, n)
        stacked = xp.concatenate([up, um], axis=0)
        if var == "z":
            zz = stacked
            tt = xp.tile(theta, (2 * n, 1))
        else:
            zz = xp.tile(z, (2 * n, 1))
            tt = stacked
        ts = t if np.ndim(t) == 0 else np.tile(t, 2 * n)   # per-row times follow the rows
        vals = xp.asarray(g(ts, zz, tt), dtype=xp.float64)
        vals = vals.reshape((2, n, B) + tuple(vals.shape[1:]))
        hb = h.T.reshape((n, B) + (1,) * (vals.ndim - 3))
        d = central_quotient(vals[0], vals[1], hb)  # (n, B, *S)
        return xp.moveaxis(d, 0, 1 + insert_at)    # (B, *S) with n at 1 + insert_at

    return dg
