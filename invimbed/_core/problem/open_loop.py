"""Open-loop controls ``theta(t)`` parameterised by a vector ``w``.

A control gives the instantaneous parameter ``theta(t)`` (shape ``(M,)``) and its
Jacobian ``d theta / d w`` (shape ``(M, n_w)``), the two things the imbedding sweep
(``Psi(p, x) = theta(p)``, eq. (7)) and the parameter adjoint
(eq. (32)) need.

Contract for implementers of new controls
-----------------------------------------
1. Set ``n_params`` (``n_w``) and ``size`` (``M``) and store ``w`` as a float array.
2. Implement ``_theta(t, piece)`` and ``_jacobian(t, piece)``; ``piece`` is the index
   returned by `piece` (``None`` for smooth controls).
3. Return the times at which ``theta`` jumps from `breakpoints`: integrators stop
   there so that no step straddles a discontinuity.
4. `with_params` returns the same control with other parameters (used by
   optimisers and finite-difference tests).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..derivatives.finite_difference import central_quotient, relative_step, step_size
from ..inputs.validation import (as_float_array, check_callable, describe, require_finite,
                                 returned_reals)

#: How far a `Control`'s ``jac`` may be from central differences of its ``fn`` (relative
#: to the largest difference quotient of its row, at least 1) at its first use.
JAC_TOL = 1e-4
#: The check also looks at ``t - _SECOND_TIME`` (an arbitrary irrational offset).
_SECOND_TIME = 0.6180339887


class OpenLoopControl:
    """Base class of open-loop controls ``theta(t; w)``.

    Attributes
    ----------
    w : ndarray, shape (n_w,)
        The parameter vector.
    size : int
        ``M``, the size of ``theta(t)``.
    n_params : int
        ``n_w``, the number of parameters.
    """

    w: np.ndarray
    size: int
    #: ``theta`` and ``d theta / d w`` are constant on each piece (between breakpoints):
    #: the jet closure then takes the Taylor coefficients of a time-free problem once
    #: per piece.
    constant_on_pieces: bool = False

    @property
    def n_params(self) -> int:
        return int(self.w.size)

    @property
    def breakpoints(self) -> np.ndarray:
        """Times where ``theta`` may jump (empty for smooth controls)."""
        return np.empty(0)

    def piece(self, t: float, lo: float | None = None, hi: float | None = None) -> Any:
        """Which smooth piece to use at ``t``; ``(lo, hi)`` is the open interval being
        integrated, so that a jump at an end point is taken from the inside."""
        return None

    def theta(self, t: float, piece: Any = None) -> np.ndarray:
        """``theta(t)``, shape (M,)."""
        self._check_time(t)
        return self._theta(float(t), piece)

    def jacobian(self, t: float, piece: Any = None) -> np.ndarray:
        """``d theta(t) / d w``, shape (M, n_w)."""
        self._check_time(t)
        return self._jacobian(float(t), piece)

    # -- many rows at once (the ensemble adjoint: every row at its own time) -----------
    def pieces(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
        """`piece` for each row's open interval between ``lo[r]`` and ``hi[r]``
        (``None`` for smooth controls)."""
        return None

    def theta_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        """``theta(t[r])`` of every row, shape (R, M). Subclasses may vectorise it."""
        return np.stack([self.theta(float(tr), None if pieces is None else pieces[r])
                         for r, tr in enumerate(t)]).reshape(len(t), self.size)

    def jacobian_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        """``d theta(t[r]) / d w`` of every row, shape (R, M, n_w)."""
        return np.stack([self.jacobian(float(tr), None if pieces is None else pieces[r])
                         for r, tr in enumerate(t)]).reshape(len(t), self.size, self.n_params)

    def with_params(self, w: Any) -> "OpenLoopControl":  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_time(self, t: float) -> None:
        pass

    def _theta(self, t: float, piece: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _jacobian(self, t: float, piece: Any) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, n_params={self.n_params})"


def _as_params(w: Any, name: str = "w") -> np.ndarray:
    arr = as_float_array(w, name)
    if arr.ndim > 1:
        raise ValueError(f"`{name}` must be a scalar or a 1-D array, but got shape {arr.shape}")
    arr = np.atleast_1d(arr).astype(float).copy()
    require_finite(arr, name)
    return arr


class NoControl(OpenLoopControl):
    """No control: ``theta`` has size 0 and there are no parameters."""

    constant_on_pieces = True

    def __init__(self) -> None:
        self.w = np.empty(0)
        self.size = 0

    def with_params(self, w: Any) -> "NoControl":
        if np.size(w) != 0:
            raise ValueError(f"`w` must be empty for NoControl, but got {describe(w)}")
        return NoControl()

    def _theta(self, t: float, piece: Any) -> np.ndarray:
        return np.empty(0)

    def _jacobian(self, t: float, piece: Any) -> np.ndarray:
        return np.empty((0, 0))

    def theta_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        return np.empty((len(t), 0))

    def jacobian_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        return np.empty((len(t), 0, 0))


class Constant(OpenLoopControl):
    """A constant control ``theta(t) = w``.

    Parameters
    ----------
    w : array_like, shape (M,)
        The constant parameter vector; ``d theta / d w`` is the identity.

    Examples
    --------
    >>> import invimbed
    >>> c = invimbed.Constant([1.0, 2.0])
    >>> c.theta(0.3)
    array([1., 2.])
    """

    constant_on_pieces = True

    def __init__(self, w: Any) -> None:
        self.w = _as_params(w)
        self.size = self.w.size

    def with_params(self, w: Any) -> "Constant":
        return Constant(np.reshape(_as_params(w), self.w.shape))

    def _theta(self, t: float, piece: Any) -> np.ndarray:
        return self.w.copy()

    def _jacobian(self, t: float, piece: Any) -> np.ndarray:
        return np.eye(self.size)

    def theta_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        return np.broadcast_to(self.w, (len(t), self.size))

    def jacobian_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        return np.broadcast_to(np.eye(self.size), (len(t), self.size, self.size))


class PiecewiseConstant(OpenLoopControl):
    """A piecewise-constant control on ``K`` intervals.

    ``theta(t) = values[k]`` for ``knots[k] <= t < knots[k + 1]`` (the last interval
    is closed at ``knots[-1]``). The parameter vector is ``w = values.ravel()``
    (row-major), so ``d theta / d w`` selects row ``k``.

    Parameters
    ----------
    knots : array_like, shape (K + 1,)
        Strictly increasing interval end points.
    values : array_like, shape (K, M) or (K,)
        The value on each interval; a 1-D array means ``M = 1``.

    Raises
    ------
    ValueError
        If the shapes disagree, the knots are not strictly increasing, or ``theta`` is
        asked for at a time outside ``[knots[0], knots[-1]]``.
    """

    constant_on_pieces = True

    def __init__(self, knots: Any, values: Any) -> None:
        knots = as_float_array(knots, "knots")
        if knots.ndim != 1 or knots.size < 2:
            raise ValueError(
                f"`knots` must be a 1-D array of at least 2 interval end points, but got "
                f"shape {knots.shape}"
            )
        require_finite(knots, "knots")
        if np.any(np.diff(knots) <= 0):
            raise ValueError(f"`knots` must be strictly increasing, but got {knots}")
        values = as_float_array(values, "values")
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2 or values.shape[0] != knots.size - 1:
            raise ValueError(
                f"`values` must have shape (K, M) with K = len(knots) - 1 = {knots.size - 1}, "
                f"but got shape {values.shape}"
            )
        require_finite(values, "values")
        self.knots = knots.copy()
        self.values = values.copy()
        self.w = self.values.ravel()
        self.size = values.shape[1]

    @property
    def breakpoints(self) -> np.ndarray:
        return self.knots[1:-1].copy()

    def with_params(self, w: Any) -> "PiecewiseConstant":
        w = _as_params(w)
        if w.size != self.w.size:
            raise ValueError(f"`w` must have {self.w.size} entries, but got {w.size}")
        return PiecewiseConstant(self.knots, w.reshape(self.values.shape))

    def _check_time(self, t: float) -> None:
        if not (self.knots[0] - 1e-12 * max(1.0, abs(self.knots[0])) <= t
                <= self.knots[-1] + 1e-12 * max(1.0, abs(self.knots[-1]))):
            raise ValueError(
                f"PiecewiseConstant control asked for theta at depth t = {t}, outside "
                f"[knots[0], knots[-1]] = [{self.knots[0]}, {self.knots[-1]}]; extend the "
                f"knots to cover every depth and q"
            )

    def piece(self, t: float, lo: float | None = None, hi: float | None = None) -> int:
        if lo is None or hi is None:
            lo = hi = t
        return int(self.pieces(np.array([lo], dtype=float), np.array([hi], dtype=float))[0])

    def pieces(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.knots, 0.5 * (np.asarray(lo) + np.asarray(hi)), side="right") - 1
        return np.clip(k, 0, self.values.shape[0] - 1)

    def theta_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        if pieces is None:
            for tr in (np.min(t), np.max(t)):
                self._check_time(float(tr))
            pieces = self.pieces(t, t)
        return self.values[pieces]

    def jacobian_rows(self, t: np.ndarray, pieces: np.ndarray | None = None) -> np.ndarray:
        if pieces is None:
            pieces = self.pieces(t, t)
        M = self.size
        jac = np.zeros((len(t), M, self.w.size))
        cols = pieces[:, None] * M + np.arange(M)              # (R, M): row k of piece
        jac[np.arange(len(t))[:, None], np.arange(M), cols] = 1.0
        return jac

    def _theta(self, t: float, piece: Any) -> np.ndarray:
        k = self.piece(t) if piece is None else piece
        return self.values[k].copy()

    def _jacobian(self, t: float, piece: Any) -> np.ndarray:
        k = self.piece(t) if piece is None else piece
        jac = np.zeros((self.size, self.w.size))
        jac[:, k * self.size:(k + 1) * self.size] = np.eye(self.size)
        return jac


class Control(OpenLoopControl):
    """A user-defined control ``theta(t) = fn(t, w)``.

    Parameters
    ----------
    fn : callable ``fn(t, w) -> array_like, shape (M,)``
        The control law.
    w : array_like, shape (n_w,)
        Its parameters.
    jac : callable ``jac(t, w) -> array_like, shape (M, n_w)``, optional
        ``d theta / d w``. Without it, central finite differences are used, with step
        ``eps**(1/3) * max(1, |w_j|)``.
    breakpoints : array_like, optional
        Times where ``fn`` jumps in ``t``.

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> c = invimbed.Control(lambda t, w: np.array([w[0] + w[1] * t]), [1.0, 2.0])
    >>> c.theta(0.5), c.jacobian(0.5).round(6)
    (array([2.]), array([[1. , 0.5]]))
    """

    def __init__(self, fn: Callable, w: Any, jac: Callable | None = None,
                 breakpoints: Sequence[float] | None = None) -> None:
        check_callable(fn, "fn")
        check_callable(jac, "jac", allow_none=True)
        self.fn = fn
        self.jac = jac
        self.w = _as_params(w)
        #: shared with the controls of `with_params`: ``jac`` is checked once (`_check_jac`)
        self._jac_checked: list[bool] = []
        self._breakpoints = (np.empty(0) if breakpoints is None
                             else np.sort(as_float_array(breakpoints, "breakpoints").ravel()))
        require_finite(self._breakpoints, "breakpoints")
        try:
            theta0 = self._call(0.0)
        except IndexError as exc:
            raise ValueError(f"`w` has n_w = {self.w.size} parameter(s), but `fn(t, w)` reads "
                             f"beyond them at t = 0 (IndexError: {exc}): pass a longer `w`, "
                             f"or fix `fn`") from exc
        self.size = theta0.size

    @property
    def breakpoints(self) -> np.ndarray:
        return self._breakpoints.copy()

    def with_params(self, w: Any) -> "Control":
        w = _as_params(w)
        if w.size != self.w.size:
            raise ValueError(f"`w` must have {self.w.size} entries, but got {w.size}")
        out = Control(self.fn, w, self.jac, self._breakpoints)
        out._jac_checked = self._jac_checked
        return out

    def _call(self, t: float, w: np.ndarray | None = None) -> np.ndarray:
        raw = self.fn(t, self.w if w is None else w)
        out = returned_reals(raw, "control `fn(t, w)`", ", shape (M,)")
        if out.ndim > 1:
            raise ValueError(f"control `fn(t, w)` must return shape (M,), but returned "
                             f"shape {out.shape}")
        return np.atleast_1d(out)

    def _theta(self, t: float, piece: Any) -> np.ndarray:
        return self._call(t)

    def _jacobian(self, t: float, piece: Any) -> np.ndarray:
        if self.jac is None:
            return self._differences(t)
        raw = self.jac(t, self.w)
        try:
            jac = np.asarray(raw, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"control `jac(t, w)` must return real numbers, but returned "
                            f"{describe(raw)}") from exc
        if jac.size != self.size * self.w.size:
            raise ValueError(f"control `jac(t, w)` must return shape (M, n_w) = "
                             f"{(self.size, self.w.size)}, but returned shape {jac.shape}")
        jac = jac.reshape(self.size, self.w.size)
        if not self._jac_checked:
            self._check_jac(t, jac)
        return jac

    def _check_jac(self, t: float, jac: np.ndarray) -> None:
        """Compare the user's ``jac`` with central differences of ``fn`` at its first
        use, at ``t`` and ``t - 0.618`` (where ``fn`` is defined there), as the problem's
        derivatives are checked (`JAC_TOL`): an entry fails when
        ``|jac - D_h| > JAC_TOL * max(1, max |D_h| of its row)``."""
        try:      # a second time, so that a term vanishing at ``t`` (t = 0) is seen
            s = t - _SECOND_TIME
            others = [(s, np.asarray(self.jac(s, self.w), dtype=float).reshape(jac.shape))]
        except Exception:    # noqa: BLE001 - outside fn's domain: the first time only
            others = []
        for t, jac in [(t, jac)] + others:
            self._compare_jac(t, jac)
        self._jac_checked.append(True)

    def _compare_jac(self, t: float, jac: np.ndarray) -> None:
        ref = self._differences(t)
        scale = np.maximum(1.0, np.max(np.abs(ref), axis=1, keepdims=True))
        bad = np.abs(jac - ref) > JAC_TOL * scale
        bad &= np.isfinite(ref)
        if np.any(bad):
            i, j = map(int, np.argwhere(bad)[0])
            raise ValueError(
                f"control `jac(t, w)` does not match finite differences of `fn(t, w)`: at "
                f"t = {t!r}, entry [{i}, {j}] (d theta[{i}] / d w[{j}]) is {float(jac[i, j])!r}, "
                f"differences give {float(ref[i, j])!r} ({int(bad.sum())} of {bad.size} entries "
                f"differ by more than {JAC_TOL:g} of their scale); fix `jac` or omit it "
                f"(differences are then used)")

    def _differences(self, t: float) -> np.ndarray:
        jac = np.empty((self.size, self.w.size))
        h_rel = relative_step(1)           # the rule of `invimbed.FiniteDifferences`
        for j in range(self.w.size):
            h = step_size(h_rel, self.w[j])
            wp = self.w.copy(); wp[j] += h
            wm = self.w.copy(); wm[j] -= h
            jac[:, j] = central_quotient(self._call(t, wp), self._call(t, wm), h)
        return jac


def as_control(control: Any) -> OpenLoopControl:
    """Normalise the ``control`` argument of the solvers.

    Raises
    ------
    TypeError
        For anything but None or an `OpenLoopControl`; for numbers (the values of
        ``theta``), the message shows the `Constant` that holds them.
    """
    if control is None:
        return NoControl()
    if isinstance(control, OpenLoopControl):
        return control
    hint = ""
    if isinstance(control, (list, tuple, np.ndarray, int, float, np.number)) \
            and not isinstance(control, bool):
        shown = repr(control) if np.size(control) <= 8 else "values"
        hint = f"; for a constant theta pass control=invimbed.Constant({shown})"
    raise TypeError(
        "`control` must be None or an invimbed control (Constant, PiecewiseConstant, "
        f"Control), but got {describe(control)}{hint}"
    )
