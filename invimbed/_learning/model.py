r"""A small model with exact derivatives: a one-hidden-layer tanh network as dynamics.

`MLPDynamics` is the model of the paper's projectile experiment (Appendix E.2) written
as the dynamics of a `BolzaProblem` whose control is the weight vector (``theta = w``).
The jet closure of order ``K`` needs the derivatives of ``f`` up to order ``K + 1`` in
``z`` (``K + 2`` with the error estimate), and the parameter gradient (eq. (32)) needs
each of them differentiated once in ``w``. For a tanh network these tensors have a
closed form, written out here, so training never takes finite differences:

    d^k/dz^k  W2 tanh(E z + c t + b1) = W2 diag(tanh^(k)(a)) E^(x)k,   E = W1 / scale,

with ``tanh^(k)`` from `_tanh_derivatives` and ``E^(x)k`` the k-fold outer power of the
rows of ``E`` (`_outer_powers`). Their ``w`` derivatives add one more ``tanh``
derivative (``b1``, ``c``, ``W1``), the product rule on ``E^(x)k`` (``W1``,
`_delta_terms`) and the linear blocks (``W2``, ``b2``, ``L``).

``tests/test_learning.py`` checks every tensor against sympy's derivatives of the
formula above and against central differences of its parent tensor.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .._core.derivatives import derivative_name
from .._core.problem.bolza import BolzaProblem
from .._core.inputs.validation import (as_bool, as_float_array, as_int, as_real, describe,
                                       require_finite)


class MLPDynamics:
    r"""A one-hidden-layer tanh network as dynamics, with exact derivative tensors.

    ```
    f(t, z; w) = L z + W2 tanh(W1 (z / scale) + c t + b1) + b2
    ```

    ``w`` packs ``W1`` (H, N), ``b1`` (H,), ``c`` (H,) when ``time=True``, ``W2`` (N, H),
    ``b2`` (N,) and ``L`` (N, N) when ``linear=True``, each row-major, in that order.
    The instance is the vectorised dynamics ``f(t, z (B, N), theta (B, n_w))`` of a
    `BolzaProblem` whose control is the weight vector (``Constant(w)``); `derivatives`
    gives every tensor the jet closure needs up to order 2 (``f_z`` ... ``f_zzz``,
    ``f_theta`` ... ``f_zzztheta``), so no finite differences are taken.

    Parameters
    ----------
    n_state : int
        ``N``.
    hidden : int, default 16
        ``H``.
    linear : bool, default False
        Add the linear term ``L z`` (an affine model when the network part is zero).
    time : bool, default False
        Feed ``t`` to the hidden layer (the paper's model is constant in ``t``).
    scale : float or array_like, shape (N,), optional
        Fixed input scaling (not trained), positive; default ones.

    Raises
    ------
    TypeError
        ``n_state`` or ``hidden`` not an integer, ``linear`` or ``time`` not a bool,
        ``scale`` not real.
    ValueError
        ``n_state`` or ``hidden`` below 1, ``scale`` of the wrong shape, not finite or
        not positive.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> mlp = invimbed.MLPDynamics(2, hidden=4)
    >>> w = mlp.init_params(seed=0)
    >>> mlp(0.0, np.zeros((3, 2)), w).shape, mlp.n_params
    ((3, 2), 22)
    """

    vectorized = True

    def __init__(self, n_state: int, hidden: int = 16, *, linear: bool = False,
                 time: bool = False, scale: Any = None) -> None:
        self.n_state = as_int(n_state, "n_state", minimum=1)
        self.hidden = as_int(hidden, "hidden", minimum=1)
        self.linear, self.time = as_bool(linear, "linear"), as_bool(time, "time")
        if scale is None:
            sc = np.ones(self.n_state)
        else:
            sc = as_float_array(scale, "scale")
            if sc.ndim > 1 or (sc.ndim == 1 and sc.size not in (1, self.n_state)):
                raise ValueError(f"`scale` must be a number or have shape ({self.n_state},) "
                                 f"(n_state), but got shape {sc.shape}")
            require_finite(sc, "scale")
            if np.any(sc <= 0):
                raise ValueError(f"`scale` must be positive, but got {sc}")
            sc = np.broadcast_to(sc, (self.n_state,)).astype(float)
        self.scale = sc.copy()
        N, H = self.n_state, self.hidden
        self._blocks = [("W1", (H, N)), ("b1", (H,))]
        if self.time:
            self._blocks.append(("c", (H,)))
        self._blocks += [("W2", (N, H)), ("b2", (N,))]
        if self.linear:
            self._blocks.append(("L", (N, N)))
        self.n_params = int(sum(np.prod(s) for _, s in self._blocks))

    def __repr__(self) -> str:
        return (f"MLPDynamics(n_state={self.n_state}, hidden={self.hidden}, "
                f"linear={self.linear}, time={self.time}, n_params={self.n_params})")

    def init_params(self, seed: Any = None, *, gain: float = 0.1) -> np.ndarray:
        """Random weights: ``W1 ~ N(0, 1/N)``, ``b1, c ~ N(0, 1/4)``, ``W2 ~ gain N(0, 1/H)``,
        ``b2 = 0``, ``L = 0``: a small, nearly flat initial field."""
        gain = as_real(gain, "gain", nonnegative=True)
        try:
            rng = np.random.default_rng(seed)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"`seed` must be None, a non-negative integer or a numpy "
                            f"Generator, but got {describe(seed)}") from exc
        parts = []
        for name, shape in self._blocks:
            if name == "W1":
                parts.append(rng.normal(0.0, 1.0 / np.sqrt(self.n_state), shape))
            elif name in ("b1", "c"):
                parts.append(rng.normal(0.0, 0.5, shape))
            elif name == "W2":
                parts.append(gain * rng.normal(0.0, 1.0 / np.sqrt(self.hidden), shape))
            else:
                parts.append(np.zeros(shape))
        return np.concatenate([p.ravel() for p in parts])

    def unpack(self, w: Any) -> dict[str, np.ndarray]:
        """The weight blocks of ``w`` (shape (n_w,) or (B, n_w)); a batch axis is kept."""
        w = as_float_array(w, "w")
        if w.ndim not in (1, 2) or w.shape[-1] != self.n_params:
            raise ValueError(f"`w` must have shape (n_params,) = ({self.n_params},) or "
                             f"(B, {self.n_params}), but got shape {w.shape}")
        out, i = {}, 0
        for name, shape in self._blocks:
            size = math.prod(shape)      # an int, without numpy's reduction
            out[name] = w[..., i:i + size].reshape(w.shape[:-1] + shape)
            i += size
        return out

    # -- evaluation --------------------------------------------------------------------
    def __call__(self, t: float, z: Any, w: Any) -> np.ndarray:
        """``f(t, z; w)``; ``z`` of shape (B, N) (or (N,)), ``w`` (B, n_w) or (n_w,)."""
        return self.derivative(t, z, w, 0, 0)

    @property
    def derivatives(self) -> dict[str, Callable]:
        """``{"f_z": ..., "f_zzztheta": ...}`` for `BolzaProblem` (``vectorized=True``)."""
        d = {}
        for dz in range(4):
            for dth in (0, 1):
                if dz + dth:
                    key = derivative_name("f", dz, dth)
                    d[key] = (lambda t, z, th, dz=dz, dth=dth:
                              self.derivative(t, z, th, dz, dth))
        return d

    def problem(self, q: float = 0.0, **losses: Any) -> BolzaProblem:
        """A `BolzaProblem` with these dynamics and exact derivatives (losses optional)."""
        return BolzaProblem(self, q=q, derivatives=self.derivatives, vectorized=True,
                            **losses)

    def derivative(self, t: float, z: Any, w: Any, dz: int = 0, dth: int = 0) -> np.ndarray:
        """Derivative tensor of order ``dz`` in ``z`` and ``dth`` (0 or 1) in ``w``.

        Axes: batch, output ``i``, then ``dz`` axes for ``z``, then ``n_w`` when ``dth=1``
        (the package's convention).
        """
        dz, dth = as_int(dz, "dz", minimum=0), as_int(dth, "dth", minimum=0)
        if dz > 3 or dth > 1:
            raise ValueError(f"`dz` must be <= 3 and `dth` <= 1 (the orders MLPDynamics "
                             f"gives), but got dz={dz}, dth={dth}")
        z = as_float_array(z, "z")
        if z.ndim not in (1, 2) or z.shape[-1] != self.n_state:
            raise ValueError(f"`z` must have shape (N,) or (B, N) with N = n_state = "
                             f"{self.n_state}, but got shape {z.shape}")
        single = z.ndim == 1
        z2 = np.atleast_2d(z)
        Bn, N, H = z2.shape[0], self.n_state, self.hidden
        w = as_float_array(w, "w")
        if w.ndim == 1 or np.all(w == w[:1]):   # one weight vector for the whole batch
            P = self.unpack(np.reshape(w if w.ndim == 1 else w[0], (1, self.n_params)))
        else:
            P = self.unpack(np.broadcast_to(w, (Bn, self.n_params)))
        zs = z2 / self.scale                                       # (B, N)
        a = np.matmul(P["W1"], zs[:, :, None])[:, :, 0] + P["b1"]  # (B, H)
        if self.time:
            a = a + t * P["c"]
        sig = _tanh_derivatives(a, dz + dth + 1)                  # list of (B, H)
        E = P["W1"] / self.scale                                   # (B|1, H, N)
        W2 = P["W2"]                                               # (B|1, N, H)
        prods = _outer_powers(np.broadcast_to(E, (Bn, H, N)), dz)  # (B, H, N, ..., N)
        zaxes = (N,) * dz
        J = int(N ** dz)
        Pk = prods[dz].reshape(Bn, H, J)
        S = sig[dz][:, :, None] * Pk                               # (B, H, J)
        if dth == 0:
            out = np.matmul(W2, S).reshape((Bn, N) + zaxes)
            if dz == 0:
                out = out + P["b2"]
                if self.linear:
                    out = out + np.matmul(P["L"], z2[:, :, None])[:, :, 0]
            elif dz == 1 and self.linear:
                out = out + P["L"]
            return out[0] if single else out
        # dth == 1: one block per parameter group, concatenated along the last axis
        S1 = sig[dz + 1][:, :, None] * Pk                          # (B, H, J)
        W2e = W2[:, :, None, :]                                    # (B|1, N, 1, H)
        blocks = []
        for name, shape in self._blocks:
            if name == "W1":
                term = W2e[..., None] * (np.swapaxes(S1, 1, 2)[:, None, :, :, None]
                                         * zs[:, None, None, None, :])
                if dz >= 1:
                    G = _delta_terms(np.broadcast_to(E, (Bn, H, N)), dz, 1.0 / self.scale)
                    G = sig[dz][:, :, None, None] * G                  # (B, H, J, N)
                    term = term + W2e[..., None] * np.swapaxes(G, 1, 2)[:, None]
                blocks.append(np.broadcast_to(term, (Bn, N, J, H, N)).reshape(Bn, N, J, H * N))
            elif name in ("b1", "c"):
                term = W2e * np.swapaxes(S1, 1, 2)[:, None]            # (B, N, J, H)
                blocks.append(term * (t if name == "c" else 1.0))
            elif name == "W2":
                term = (np.eye(N)[None, :, None, :, None]
                        * np.swapaxes(S, 1, 2)[:, None, :, None, :])   # (B, N, J, N, H)
                blocks.append(term.reshape(Bn, N, J, N * H))
            elif name == "b2":
                term = np.zeros((Bn, N, J, N))
                if dz == 0:
                    term[:, :, 0, :] = np.eye(N)
                blocks.append(term)
            else:  # L
                term = np.zeros((Bn, N, J, N, N))
                if dz == 0:
                    term[:, :, 0] = np.eye(N)[None, :, :, None] * z2[:, None, None, :]
                elif dz == 1:
                    term[:] = (np.eye(N)[:, None, :, None] * np.eye(N)[None, :, None, :])[None]
                blocks.append(term.reshape(Bn, N, J, N * N))
        out = np.concatenate(blocks, axis=-1).reshape((Bn, N) + zaxes + (self.n_params,))
        return out[0] if single else out


def _tanh_derivatives(a: np.ndarray, k: int) -> list[np.ndarray]:
    """``[tanh(a), tanh'(a), ..., tanh^(k)(a)]`` (``k <= 4``)."""
    s = np.tanh(a)
    d1 = 1.0 - s * s
    out = [s, d1, -2.0 * s * d1, d1 * (6.0 * s * s - 2.0), 8.0 * s * d1 * (2.0 - 3.0 * s * s)]
    return out[:k + 1]


def _outer_powers(E: np.ndarray, k: int) -> list[np.ndarray]:
    """``[1, E, E (x) E, ...]`` per hidden unit: ``(B, H, N^j)`` for ``j = 0..k``."""
    B, H, N = E.shape
    out = [np.ones((B, H))]
    cur = np.ones((B, H))
    for j in range(k):
        cur = cur[..., None] * E.reshape((B, H) + (1,) * j + (N,))
        out.append(cur)
    return out


def _delta_terms(E: np.ndarray, k: int, inv_scale: np.ndarray) -> np.ndarray:
    """``sum_l delta_{j_l m} inv_scale_m prod_{l' != l} E[h, j_l']``: shape (B, H, N^k, N)."""
    B, H, N = E.shape
    D = np.diag(inv_scale)                                       # (N, N): (j_l, m)
    lower = _outer_powers(E, k - 1)[k - 1]                       # (B, H, N^(k-1))
    total = np.zeros((B, H) + (N,) * k + (N,))
    for pos in range(k):
        # insert axis j_pos (paired with m through D) into the product of the others
        t = lower[..., None, None] * D.reshape((1, 1) + (1,) * (k - 1) + (N, N))
        # t has axes (B, H, others..., j_pos, m): move j_pos to its place
        t = np.moveaxis(t, 2 + (k - 1), 2 + pos)
        total = total + t
    return total.reshape(B, H, N ** k, N)


