"""The user's arguments to a solver, read once into a `Setup`.

`prepare` validates and normalises what `solve_imbedding`, `solve_adjoint` and
`solve_optimal` share (problem, inputs, depths, control, and the settings objects of
`invimbed._core.setup.settings`: the integrator and the accuracy); `initial_state` is
the check of ``problem`` and ``x`` that `solve_ocp` shares with them. The numerics of the
solvers share nothing beyond the problem and its derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..problem.open_loop import OpenLoopControl, as_control
from ..derivatives import DerivativeProvider
from ..integrators import ALL_METHODS
from ..inputs.probe import precision_limit
from ..problem.bolza import BolzaProblem
from .settings import Accuracy, Closure, Integrator, settle
from ..inputs.validation import as_depths, as_state, check_choice, describe

#: The integrator's tolerances where neither the caller nor its `Accuracy` gives them.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-6, 1e-9


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
    #: the settings, read once: the integrator (method, step, options), the accuracy
    #: (``tol`` and the integrator's ``rtol``, ``atol``, filled in) and the closure
    integrator: Integrator = field(default_factory=Integrator)
    accuracy: Accuracy = field(default_factory=Accuracy)
    closure: Closure | None = None

    @property
    def q(self) -> float:
        return self.problem.q

    def piece_of(self, a: float, b: float) -> Any:
        """The control piece on the open interval between ``b`` and ``a``."""
        return self.control.piece(0.5 * (a + b), min(a, b), max(a, b))


def prepare(problem: Any, x: Any, depths: Any, control: Any, method: str | None = None,
            rtol: Any = None, atol: Any = None, step: Any = None,
            allowed_methods: tuple[str, ...] = ALL_METHODS, *,
            integrator: Integrator | None = None, accuracy: Accuracy | None = None,
            closure: Closure | None = None) -> Setup:
    """Check and normalise the arguments every solver shares, in the order a user reads
    them: ``problem``, ``x``, ``depths``, ``control``, the integrator's ``method`` (one of
    ``allowed_methods``) and the accuracy; then the control's coverage of
    ``[min(depths), q]``, the sizes the problem knows (`BolzaProblem.check_sizes`) and one
    call of each function at the first point (`BolzaProblem.check_shapes`, which names
    ``x`` or ``control`` where they disagree with what the functions return or read).

    Parameters
    ----------
    problem, x, depths, control
        As the solvers take them.
    method, rtol, atol, step : optional
        The keywords of `Integrator` and `Accuracy`, where ``integrator`` and
        ``accuracy`` do not give them (`settle`).
    allowed_methods : tuple of str
        The methods the caller runs.
    integrator, accuracy, closure : optional
        The settings objects (`invimbed._core.setup.settings`), carried in the `Setup`;
        an ``rtol``, ``atol`` neither gives is 1e-6, 1e-9.

    Returns
    -------
    Setup
        ``x`` as (B, N), the depths and their descending order, the control, the
        derivative provider and the settings.

    Raises
    ------
    TypeError, ValueError
        Naming the argument, what was expected and what was received.
    """
    xb, batched = initial_state(problem, x)
    dep = as_depths(depths, problem.q)
    ctrl = as_control(control)
    if method is not None:          # the caller's list of methods, before the integrator's
        check_choice(method, "method", allowed_methods)
    integrator = settle(Integrator, integrator, {"method": (method, None),
                                                 "step": (step, None)}, argument="integrator")
    check_choice(integrator.method, "method", allowed_methods)
    accuracy = settle(Accuracy, accuracy, {"rtol": (rtol, None), "atol": (atol, None)},
                      argument="accuracy").with_tolerances(DEFAULT_RTOL, DEFAULT_ATOL)
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
    unreachable = (f"rtol = {accuracy.rtol:.3g} is below {limit:.2g}, what the precision "
                   f"returned by {', '.join(f'`{n}`' for n in problem.low_precision)} allows"
                   if accuracy.rtol < limit else None)
    return Setup(problem, xb, batched, dep, permutation, dep[permutation], ctrl, provider,
                 unreachable, integrator=integrator, accuracy=accuracy, closure=closure)


def initial_state(problem: Any, x: Any, *, batch: bool = True) -> tuple[np.ndarray, bool]:
    """Check ``problem`` (a `BolzaProblem`) and the input ``x``: ``(x as (B, N), whether
    x was a batch)``; ``batch=False`` (`solve_ocp`) takes one state (N,) only.

    Raises
    ------
    TypeError, ValueError
        Naming ``problem`` or ``x``, what was expected and what came.
    """
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got {describe(problem)}")
    return as_state(x, None, "x", batch=batch)
