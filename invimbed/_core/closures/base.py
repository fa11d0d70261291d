"""The closure contract: imbedded fields -> a plain right-hand side ``(p, y) -> dy/dp``.

Every field ``U`` of docs/theory.md, "The imbedded fields" obeys ``dU/dp = -grad_x U . Phi - S_U``; the
``grad_x U`` at the single point ``x`` needs ``U`` near ``x`` (the paper's nested
Jacobians, Appendix F.1). A closure decides what to carry so that the
hierarchy closes, and packs it into one flat state vector, so that integrators never
see derivative providers, jets or stencils.

Contract for implementers of a closure
--------------------------------------
1. Subclass `Closure`; set ``name``. The constructor receives the problem's
   derivative provider, the control and the batch of inputs ``x`` (B, N).
2. `initial_state` gives the flat state at ``p = q``; `rhs` returns
   ``dy/dp`` at depth ``p``; ``piece`` tells a piecewise control which piece to use.
   Count nothing: the integrator counts right-hand-side evaluations.
3. `fields` unpacks ``z`` (B, N), ``value`` (B,), ``adjoint`` (B, N) and
   ``param_grad`` (B, n_w) from a state. Keep ``adjoint`` the gradient of ``value``
   (carry ``V`` one order above ``Lam``).
4. Optionally `error_estimate` (estimated absolute errors of the same fields) and
   `disc_step` (the paper's layer recursion, eqs. (14) and (15)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..problem.open_loop import OpenLoopControl
from ..derivatives import DerivativeProvider
from ..runtime.namespace import array_namespace


class Layout:
    """Named blocks of a flat state vector, on the array namespace ``xp`` (numpy, cupy)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], xp: Any = np) -> None:
        self.xp = xp
        self.shapes = dict(shapes)
        self.slices: dict[str, slice] = {}
        start = 0
        for name, shape in self.shapes.items():
            size = int(np.prod(shape, dtype=int))
            self.slices[name] = slice(start, start + size)
            start += size
        self.size = start

    def unpack(self, y: np.ndarray) -> dict[str, np.ndarray]:
        """The blocks of a state ``y`` (size,), or of states (..., size) stacked on leading
        axes (which each block keeps in front of its shape)."""
        lead = tuple(y.shape[:-1])
        return {n: y[..., s].reshape(lead + self.shapes[n]) for n, s in self.slices.items()}

    def pack(self, blocks: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        xp = self.xp
        if out is None:
            out = xp.empty(self.size)
        for n, s in self.slices.items():
            out[s] = xp.asarray(blocks[n]).ravel()
        return out


class Closure:
    """Base class of closures of the nested-Jacobian hierarchy (docs/theory.md, "The closures")."""

    name = "closure"
    has_error_estimate = False

    def __init__(self, provider: DerivativeProvider, control: OpenLoopControl, x: np.ndarray,
                 q: float, time_free: bool = False) -> None:
        # ``time_free``: f and R do not depend on t (see `coefficients`)
        self.time_free = bool(time_free)
        self._last_coefficients: tuple | None = None     # (p, piece, coefficients)
        self.provider = provider
        self.control = control
        self.x = x
        self.xp = array_namespace(x)   # numpy, or cupy for the array-namespace sweep
        self.q = q
        self.B, self.N = x.shape
        self.M = control.size
        self.nw = control.n_params

    # The contract ---------------------------------------------------------------
    def initial_state(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def fields(self, y: np.ndarray) -> dict[str, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def error_estimate(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        """Estimated absolute errors of `fields`, or ``None`` for a closure without an
        estimate. A closure that carries a second, higher order alongside (the jet)
        overrides this and sets ``has_error_estimate``."""
        return None

    def disc_step(self, p_new: float, p_old: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        raise ValueError(f"closure {self.name!r} does not implement the paper's discrete "
                         f"recursion (method='disc'); use closure='jet' or 'crop'")

    # Helpers shared by closures --------------------------------------------------------
    def coefficients_at(self, p: float, theta: Any, jac: Any) -> dict[str, Any]:
        """What the right-hand side reads of ``f`` and ``R`` at depth ``p`` for given
        ``theta(p)`` and ``d theta / d w``: values at fixed points, never at the state."""
        raise NotImplementedError   # pragma: no cover - by the closures that use it

    def coefficients(self, p: float, piece: Any = None) -> dict[str, Any]:
        """`coefficients_at` under the control at ``p`` (on ``piece``), kept.

        They do not depend on the state, so the last ones are kept and served again at the
        same ``p`` and control ``piece``: the implicit methods evaluate the right-hand side
        at one ``p`` for each Newton iteration and each column group of their Jacobian.
        Where f and R do not depend on t (``time_free``) and the control is constant on
        the piece (`_constant_theta`), they are the same at every ``p`` of the piece, and
        are served for all of them (the same numbers, computed once per piece, as the
        numba kernels do). The arrays served are not written to."""
        last = self._last_coefficients
        if (last is not None and last[1] is piece
                and (last[0] == p or self._constant_theta(piece))):
            return last[2]
        th = self.control.theta(p, piece)
        coef = self.coefficients_at(p, th, self._param_jacobian(p, piece) if self.nw else None)
        self._last_coefficients = (p, piece, coef)
        return coef

    def _constant_theta(self, piece: Any) -> bool:
        """Whether f and R are time free and ``theta`` (and ``d theta / d w``) is the same
        at every ``p`` of ``piece``: a control constant on its pieces
        (`OpenLoopControl.constant_on_pieces`), with the piece named where it has several."""
        ctrl = self.control
        return (self.time_free and getattr(ctrl, "constant_on_pieces", False)
                and (piece is not None or np.size(ctrl.breakpoints) == 0))

    def _theta(self, p: float, piece: Any, rows: int) -> np.ndarray:
        th = self.control.theta(p, piece)
        return np.broadcast_to(th, (rows, self.M))

    def _param_jacobian(self, p: float, piece: Any) -> np.ndarray:
        return self.control.jacobian(p, piece)
