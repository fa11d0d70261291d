"""The user's arguments to a solver, read once into a `Setup`.

`prepare` validates and normalises what `solve_imbedding`, `solve_adjoint` and
`solve_optimal` share (problem, inputs, depths, control, method, tolerances, step);
`parse_tol` reads the accuracy target ``tol``. The numerics of the solvers share nothing
beyond the problem and its derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..problem.open_loop import OpenLoopControl, as_control
from ..derivatives import DerivativeProvider
from ..integrators import FIXED_METHODS, SCIPY_METHODS
from ..inputs.probe import precision_limit
from ..problem.bolza import BolzaProblem
from ..inputs.validation import as_depths, as_state, check_choice, check_positive, describe


@dataclass
class Setup:
    """A solve's arguments, checked and normalised by `prepare`."""

    problem: BolzaProblem
    x: np.ndarray               # (B, N)
    batched: bool
    depths: np.ndarray          # as given
    permutation: np.ndarray     # indices sorting depths descending (depths[permutation])
    depths_desc: np.ndarray
    control: OpenLoopControl
    provider: DerivativeProvider
    #: why ``rtol`` cannot be reached through the functions' precision (`probe`), or None
    unreachable: str | None = None
    #: what a not-converged message recommends, where the caller's options differ from
    #: `solve_imbedding`'s (`invimbed._core.sweep.accuracy.REMEDY`), or None
    remedy: str | None = None

    @property
    def q(self) -> float:
        return self.problem.q

    def piece_of(self, a: float, b: float) -> Any:
        """The control piece on the open interval between ``b`` and ``a``."""
        return self.control.piece(0.5 * (a + b), min(a, b), max(a, b))


def prepare(problem: Any, x: Any, depths: Any, control: Any, method: str, rtol: Any,
            atol: Any, step: Any, allowed_methods: tuple[str, ...]) -> Setup:
    """Check and normalise the arguments every solver shares, in the order a user reads
    them: ``problem``, ``x``, ``depths``, ``control``, ``method``, ``rtol``, ``atol``,
    ``step``; then the control's coverage of ``[min(depths), q]``, the sizes the problem
    knows (`BolzaProblem.check_sizes`) and one call of each function at the first point
    (`BolzaProblem.check_shapes`, which names ``x`` or ``control`` where they disagree
    with what the functions return or read).

    Returns
    -------
    Setup
        ``x`` as (B, N), the depths and their descending order, the control and the
        derivative provider.

    Raises
    ------
    TypeError, ValueError
        Naming the argument, what was expected and what was received.
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    xb, batched = as_state(x, None, "x")
    dep = as_depths(depths, problem.q)
    ctrl = as_control(control)
    check_choice(method, "method", allowed_methods)
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    if method in FIXED_METHODS and method != "disc":
        if step is None:
            raise ValueError(f"`step` is required for the fixed-step method {method!r}: give the "
                             f"largest step in depth, e.g. step=0.01; got step=None")
        check_positive(step, "step")
    elif step is not None and method in SCIPY_METHODS:
        check_positive(step, "step")
    # the control must cover [p_min, q]; PiecewiseConstant raises naming both ranges
    p_min = float(dep.min())
    ctrl.theta(problem.q)
    ctrl.theta(p_min)
    # sizes the problem knows (from_sympy) before any call; then the first-point probe,
    # which names `x` or `control` where the user's functions disagree with them
    problem.check_sizes(xb.shape[1], ctrl.size, control_given=control is not None)
    problem.check_shapes(problem.q, xb, ctrl.theta(problem.q))
    provider = problem.provider(xb.shape[1], ctrl.size)
    permutation = np.argsort(-dep, kind="stable")
    limit = precision_limit(problem.low_precision)
    unreachable = (f"rtol = {float(rtol):.3g} is below {limit:.2g}, what the precision "
                   f"returned by {', '.join(f'`{n}`' for n in problem.low_precision)} allows"
                   if float(rtol) < limit else None)
    return Setup(problem, xb, batched, dep, permutation, dep[permutation], ctrl, provider,
                 unreachable)



def parse_tol(tol: Any) -> tuple[float, float] | None:
    """``tol`` of `solve_imbedding` as ``(rtol, atol)``: a float ``t`` means ``(t, t)``."""
    if tol is None:
        return None
    if isinstance(tol, (tuple, list)) and len(tol) == 2:
        pair = tuple(tol)
    elif np.ndim(tol) == 0 and not isinstance(tol, (bool, str)):
        pair = (tol, tol)
    else:
        raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair, but got "
                         f"{describe(tol)}")
    out = []
    for name, v in zip(("rtol", "atol"), pair):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < 0:
            raise ValueError(f"`tol` must be a positive float or an (rtol, atol) pair of "
                             f"non-negative floats, but its {name} is {describe(v)}")
        out.append(float(v))
    if out[0] == out[1] == 0.0:
        raise ValueError("`tol` must not be (0, 0): nothing but an exact answer would pass")
    return out[0], out[1]


def tolerances_from_tol(tol: tuple[float, float], rtol_scale: tuple[float, ...],
                        atol_scale: tuple[float, ...], rtol_range: tuple[float, float],
                        atol_range: tuple[float, float]) -> tuple[float, float]:
    """An integrator's ``(rtol, atol)`` derived from ``tol`` (`parse_tol`): each part of
    ``tol`` (the other part where it is 0) multiplied by the factors of its scale in turn,
    then clipped to its range ``(lo, hi)``."""
    out = []
    for t, scale, (lo, hi) in ((tol[0] if tol[0] > 0 else tol[1], rtol_scale, rtol_range),
                               (tol[1] if tol[1] > 0 else tol[0], atol_scale, atol_range)):
        for factor in scale:
            t = factor * t
        out.append(min(hi, max(lo, t)))
    return out[0], out[1]
