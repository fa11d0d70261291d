"""The normalised derivative interface that every solver talks to.

Whatever the source of derivatives (user callables, finite differences, later sympy),
the closures and the adjoint reference ask for them in one form:

``provider.derivative(which, t, z, theta, dz=0, dth=0)``

* ``which`` is ``"f"`` (dynamics), ``"R"`` (running loss) or ``"T"`` (terminal loss);
* ``t`` is a float, or an array of shape ``(B,)`` giving each row its own time (the
  ensemble adjoint solver, whose rows are at different times);
* ``z`` has shape ``(B, N)``, ``theta`` shape ``(B, M)`` (ignored for ``"T"``);
* the result is the tensor of partial derivatives of order ``dz`` in ``z`` and ``dth``
  in ``theta``, batched, with the axes ``(B, *out, *[N] * dz, *[M] * dth)`` where
  ``out`` is ``(N,)`` for ``"f"`` and ``()`` for the losses. For instance
  ``derivative("f", t, z, th, dz=1)[b, i, j] = d f_i / d z_j`` and
  ``derivative("f", t, z, th, dz=1, dth=1)[b, i, j, k] = d^2 f_i / d z_j d theta_k``.

Contract for implementers of a provider
---------------------------------------
1. Subclass `DerivativeProvider`; set ``n_state`` (N), ``n_theta`` (M) and
   ``max_order`` (the highest total order ``dz + dth`` you can give, ``None`` for
   any).
2. Implement ``_derivative(which, t, z, theta, dz, dth)`` on validated, batched inputs;
   the public `DerivativeProvider.derivative` checks the order and the shape.
3. Derivative tensors are symmetric in their ``z`` axes and stored in full; a provider
   may compute them any way it likes (closed form, code generation, differences).
4. Per-row times: a provider that can evaluate rows at different times in one call sets
   ``row_times = True`` and receives ``t`` as an array of shape ``(B,)``; for the others
   the public `DerivativeProvider.derivative` calls ``_derivative`` once per distinct
   time, with a float.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ..runtime.namespace import array_namespace
from ..runtime.row_times import per_distinct_time
from .multiindex import joint_positions, tensors_to_taylor

_WHICH = ("f", "R", "T")


class DerivativeOrderError(ValueError):
    """A derivative of a higher order than the provider can give was requested."""


class DerivativeProvider:
    """Base class: derivatives of ``f``, ``R``, ``T`` in ``z`` and ``theta``.

    Attributes
    ----------
    n_state : int
        ``N``.
    n_theta : int
        ``M``.
    max_order : int or None
        The highest total order ``dz + dth`` this provider gives (``None``: any).
    max_jet_order : int or None
        The highest jet order (``solve_imbedding(..., order=K)``) this provider is fit
        for (``None``: any).
    name : str
        Short description used in messages.
    """

    n_state: int
    n_theta: int
    max_order: int | None = None
    max_jet_order: int | None = None
    name: str = "provider"
    #: Whether ``_derivative`` accepts an array of per-row times (contract rule 4).
    row_times: bool = False

    def out_shape(self, which: str) -> tuple[int, ...]:
        return (self.n_state,) if which == "f" else ()

    def derivative(self, which: str, t: float, z: np.ndarray, theta: np.ndarray | None,
                   dz: int = 0, dth: int = 0) -> np.ndarray:
        """Batched derivative tensor; see the module docstring for the axes."""
        if which not in _WHICH:
            raise ValueError(f"`which` must be one of {_WHICH}, but got {which!r}")
        if which == "T" and dth:
            raise ValueError("the terminal loss T(z) does not depend on theta: `dth` must be 0")
        limit = self.order_limit(which)
        if limit is not None and dz + dth > limit:
            raise DerivativeOrderError(
                f"{self.name} gives derivatives up to total order {limit}, but "
                f"order {dz + dth} of {which} (dz={dz}, dth={dth}) was requested; give exact "
                f"derivatives (user callables in `derivatives=`, or a symbolic provider) "
                f"or lower the jet order"
            )
        if (type(z) is np.ndarray and z.dtype == np.float64
                and (theta is None or (type(theta) is np.ndarray and theta.dtype.kind != "O"))):
            xp = np                        # what the solvers pass: no conversion to make
        else:
            xp = array_namespace(z, theta)     # numpy, or cupy on the array-namespace sweep
            z = xp.asarray(z, dtype=xp.float64)
        B = z.shape[0]
        if theta is None or which == "T":
            theta = xp.zeros((B, self.n_theta))
        elif (type(theta) is np.ndarray and theta.dtype == np.float64
              and theta.shape == (B, self.n_theta)):   # as broadcast_to gives it, faster
            theta = theta.view()
            theta.flags.writeable = False
        else:
            theta = xp.broadcast_to(xp.asarray(theta, dtype=xp.float64), (B, self.n_theta))
        t = _row_times(t, B)
        if isinstance(t, float) or self.row_times:
            out = self._derivative(which, t, z, theta, dz, dth)
        else:                      # one call per distinct time
            out = per_distinct_time(
                lambda tk, zk, thk: self._derivative(which, tk, zk, thk, dz, dth),
                t, z, theta, xp)
        expected = (B,) + self.out_shape(which) + (self.n_state,) * dz + (self.n_theta,) * dth
        if tuple(out.shape) != expected:
            raise ValueError(
                f"{self.name}: the derivative {derivative_name(which, dz, dth)!r} must have "
                f"shape {expected[1:]} per sample, {expected} with the batch axis of these "
                f"{B} sample(s), but has shape {tuple(out.shape)}"
            )
        return out

    def evaluator(self, which: str, dz: int = 0, dth: int = 0):
        """``g(t, z, theta)``: `derivative` ``(which, dz, dth)`` for a loop that calls it
        many times on well-formed batches (``z`` float (B, N), ``theta`` float (B, M),
        ``t`` a float or an array (B,)). The default checks every call as `derivative`
        does; a provider may return its compiled code itself (the sympy provider)."""
        def call(t, z, theta):
            return self.derivative(which, t, z, theta, dz=dz, dth=dth)
        return call

    def taylor(self, which: str, t: float, z: np.ndarray, theta: np.ndarray | None,
               order: int, dth: int = 0) -> np.ndarray:
        """Taylor coefficients in ``z`` of ``which`` (or of its ``theta``-gradient when
        ``dth == 1``) around each ``z``, up to degree ``order``.

        Returns an array of shape ``(B, *out, *[M] * dth, C(N + order, order))`` with
        ``c_alpha = D^alpha_z g / alpha!`` in the graded order of
        `invimbed._core.derivatives.multiindex.multi_indices`. The default builds it
        from `derivative`; providers that can produce coefficients directly
        (symbolic code generation) override it.
        """
        tensors = []
        out_nd = len(self.out_shape(which))
        for k in range(order + 1):
            tk = self.derivative(which, t, z, theta, dz=k, dth=dth)
            for j in range(dth):  # theta axes go before the z axes
                tk = tk.transpose(_moved(tk.ndim, tk.ndim - dth + j, 1 + out_nd + j))
            tensors.append(tk)
        return tensors_to_taylor(tensors, self.n_state)

    def taylor_joint(self, which: str, t: float, z: np.ndarray, theta: np.ndarray,
                     order: int) -> np.ndarray:
        """Taylor coefficients of ``which`` in ``(z, theta)`` jointly, up to degree ``order``.

        Returns (B, *out, C(N + M + order, order)) in the graded order of
        ``multi_indices(N + M, order)`` (``z`` variables first). Used where the control
        depends on the state (optimal feedback, Theorem 3).
        """
        blocks = _joint_blocks(self.n_state, self.n_theta, order)
        value, t, z, theta, lead = self._joint_inputs(which, t, z, theta)
        out = np.empty(lead + (sum(b[2].size for b in blocks),))
        for dz, dth, cols, pos, fact in blocks:
            if which == "T" and dth:
                out[..., cols] = 0.0
                continue
            tk = value if dz + dth == 0 else self.evaluator(which, dz, dth)(t, z, theta)
            out[..., cols] = tk.reshape(lead + (-1,))[..., pos] / fact
        return out

    def _joint_inputs(self, which: str, t: Any, z: np.ndarray, theta: np.ndarray | None):
        """The start of `taylor_joint`: the value through `derivative` (every check), then
        ``(value, t, z, theta, lead)`` with its checked inputs, on which the other blocks
        are evaluated (the provider's `evaluator` code: the same values), and the leading
        axes ``(B, *out)`` of the result."""
        value = self.derivative(which, t, z, theta)
        z = np.asarray(z, dtype=np.float64)
        B = z.shape[0]
        theta = (np.zeros((B, self.n_theta)) if theta is None or which == "T" else
                 np.broadcast_to(np.asarray(theta, dtype=np.float64), (B, self.n_theta)))
        return value, _row_times(t, B), z, theta, (B,) + self.out_shape(which)

    def order_limit(self, which: str) -> int | None:
        """Highest total order available for ``which`` (default: ``max_order``)."""
        return self.max_order

    def _derivative(self, which: str, t: float, z: np.ndarray, theta: np.ndarray,
                    dz: int, dth: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name}: N={self.n_state}, M={self.n_theta}, max_order={self.max_order}>"


def _moved(ndim: int, src: int, dst: int) -> list[int]:
    """The axes of ``np.moveaxis(a, src, dst)`` for ``a.ndim == ndim`` (its view,
    without its argument checks), on any array namespace."""
    order = [n for n in range(ndim) if n != src]
    order.insert(dst, src)
    return order


@lru_cache(maxsize=None)
def _joint_blocks(n: int, m: int, order: int) -> tuple:
    """`joint_positions` grouped by derivative tensor: ``(dz, dth, columns, flat positions
    in the tensor, alpha!)`` per ``(dz, dth)``, in the order the columns first meet it."""
    groups: dict[tuple[int, int], list] = {}
    for i, (dz, dth, pos, fact) in enumerate(joint_positions(n, m, order)):
        groups.setdefault((dz, dth), []).append((i, pos, fact))
    return tuple((dz, dth, np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                  np.array([r[2] for r in rows])) for (dz, dth), rows in groups.items())


def _row_times(t: Any, B: int) -> float | np.ndarray:
    """``t`` as a float, or as an array of ``B`` per-row times where they differ."""
    if type(t) is float:
        return t
    if type(t) is np.ndarray and t.dtype == np.float64 and t.ndim == 1:
        arr = t        # what the solvers pass: the reshape and asarray below are no-ops
    elif np.ndim(t) == 0:
        return float(t)
    else:
        arr = np.asarray(t, dtype=float).reshape(-1)
    if arr.size != B:
        raise ValueError(f"per-row times `t` must have shape ({B},), but got shape {np.shape(t)}")
    if B == 1:          # one row (NaN != NaN: kept as an array, as the test below does)
        return float(arr[0]) if arr[0] == arr[0] else arr
    if B == 0 or (arr == arr[0]).all():
        return float(arr[0]) if B else 0.0
    return arr


#: The letters of a derivative's name: ``which + "_" + Z * dz + THETA * dth``, e.g.
#: ``"f_ztheta"`` (`derivative_name`, `parse_key`: the one place they are spelled).
Z, THETA = "z", "theta"


def derivative_name(which: str, dz: int, dth: int) -> str:
    """The name of derivative ``(which, dz, dth)``, such as ``"f_ztheta"`` (`parse_key`
    reads it back); ``which`` itself for the function (``dz + dth == 0``)."""
    return which if dz + dth == 0 else f"{which}_{Z * dz}{THETA * dth}"


def parse_key(key: Any) -> tuple[str, int, int]:
    """Parse a user derivative name such as ``"f_z"``, ``"R_ztheta"``, ``"T_zz"``.

    Returns ``(which, dz, dth)``. The ``z`` letters must come before ``theta`` (the
    axes convention of `DerivativeProvider`).
    """
    if not isinstance(key, str) or "_" not in key:
        raise ValueError(
            f"derivative names look like 'f_z', 'f_theta', 'f_zz', 'f_ztheta', 'R_z', "
            f"'R_theta', 'R_zz', 'T_z', 'T_zz' (z before theta), but got {key!r}"
        )
    which, rest = key.split("_", 1)
    if which not in _WHICH:
        raise ValueError(f"derivative name {key!r} must start with 'f_', 'R_' or 'T_'")
    dz = 0
    dth = 0
    while rest:
        if rest.startswith(THETA):
            dth += 1
            rest = rest[len(THETA):]
        elif rest.startswith(Z) and dth == 0:
            dz += 1
            rest = rest[1:]
        else:
            raise ValueError(
                f"derivative name {key!r}: after '{which}_' expected a run of 'z' then a run "
                f"of 'theta' (e.g. 'f_ztheta'), but could not read {rest!r}"
            )
    if dz + dth == 0:
        raise ValueError(f"derivative name {key!r} names no derivative")
    if which == "T" and dth:
        raise ValueError(f"derivative name {key!r}: T(z) has no theta derivatives")
    return which, dz, dth
