"""Validation and bookkeeping shared by `solve_imbedding` and `solve_adjoint`.

It holds only what both need to read the user's arguments and to pack a result; the
numerics of the two solvers share nothing beyond the problem and its derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._controls import OpenLoopControl, as_control
from ._derivatives import DerivativeProvider
from ._integrators import FIXED_METHODS, SCIPY_METHODS
from ._ordered import sum_products
from ._problem import BolzaProblem
from ._results import ImbeddingResult
from ._validation import as_depths, as_state, check_choice, check_positive, describe


@dataclass
class Setup:
    problem: BolzaProblem
    x: np.ndarray               # (B, N)
    batched: bool
    depths: np.ndarray          # as given
    order: np.ndarray           # indices sorting depths descending
    depths_desc: np.ndarray
    control: OpenLoopControl
    provider: DerivativeProvider

    @property
    def q(self) -> float:
        return self.problem.q

    def piece_of(self, a: float, b: float) -> Any:
        """The control piece on the open interval between ``b`` and ``a``."""
        return self.control.piece(0.5 * (a + b), min(a, b), max(a, b))


def prepare(problem: Any, x: Any, depths: Any, control: Any, method: str, rtol: Any,
            atol: Any, step: Any, allowed_methods: tuple[str, ...]) -> Setup:
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
    problem.check_shapes(problem.q, xb, ctrl.theta(problem.q))
    provider = problem.provider(xb.shape[1], ctrl.size)
    order = np.argsort(-dep, kind="stable")
    return Setup(problem, xb, batched, dep, order, dep[order], ctrl, provider)


def depth_gradient(setup: Setup, p: float | np.ndarray, adjoint: np.ndarray,
                   x: np.ndarray | None = None) -> np.ndarray:
    """``dJ/dp = -(Lam . f(p, x, theta(p)) + R(p, x, theta(p)))`` (DESIGN.md section 2).

    ``p`` is one depth for the inputs ``setup.x``, or an array of per-row depths for the
    rows ``x`` (the ensemble adjoint). At a jump of the control, ``theta(p)`` is the value
    just above ``p`` (the derivative from above)."""
    ctrl = setup.control
    if np.ndim(p) == 0:
        x = setup.x
        th = np.broadcast_to(ctrl.theta(p), (x.shape[0], ctrl.size))
    else:
        th = ctrl.theta_rows(p, ctrl.pieces(p, p))
    f = setup.provider.derivative("f", p, x, th)
    R = setup.provider.derivative("R", p, x, th)
    return -(sum_products(adjoint, f) + R)


def pack_result(setup: Setup, fields: dict[str, np.ndarray], *, success: bool, message: str,
                nfev: int, closure: str, method: str,
                error_estimate: dict[str, np.ndarray] | None = None,
                **extra: Any) -> ImbeddingResult:
    """Put per-depth fields (in descending-depth order, axes (n, B, ...)) back in the
    user's order and drop the batch axis for an unbatched ``x``."""
    inverse = np.empty_like(setup.order)
    inverse[setup.order] = np.arange(setup.order.size)

    def arrange(a: np.ndarray) -> np.ndarray:
        a = a[inverse]
        return a if setup.batched else a[:, 0]

    res = ImbeddingResult(
        depths=setup.depths.copy(),
        **{k: arrange(v) for k, v in fields.items()},
        success=bool(success),
        status=0 if success else -1,
        message=message,
        nfev=int(nfev),
        closure=closure,
        method=method,
        error_estimate=(None if error_estimate is None else
                        ImbeddingResult({k: arrange(v) for k, v in error_estimate.items()})),
        **extra,
    )
    return res


def collect_results(setup: Setup, outcome: Any, per_depth: Any,
                    shapes: dict[str, tuple[int, ...]], *, closure: str, method: str,
                    with_errors: bool) -> ImbeddingResult:
    """Per-depth fields from an integrator's states, with failures and warnings reported.

    ``per_depth(p, y)`` returns ``(fields, errors)`` for a state ``y`` at depth ``p`` (an
    ``ArithmeticError`` there ends the result at that depth); ``shapes`` gives each
    field's shape per depth, for the NaN rows of depths not reached.
    """
    success, message = outcome.success, outcome.message
    nan = {k: np.full(shape, np.nan) for k, shape in shapes.items()}
    err_keys = ("z", "value", "adjoint") + (("param_grad",) if "param_grad" in shapes else ())
    rows, err_rows = [], []
    stopped = False
    for p, y in zip(setup.depths_desc, outcome.ys):
        fl, er = nan, {k: nan[k] for k in err_keys}
        if not stopped and np.all(np.isfinite(y)):
            try:
                fl, er = per_depth(float(p), y)
            except ArithmeticError as exc:
                stopped, success = True, False
                message = f"Failed at depth p = {p:.10g}: {exc}."
                fl, er = nan, {k: nan[k] for k in err_keys}
        rows.append(fl)
        err_rows.append(er)
    stacked = {k: np.stack([r[k] for r in rows]) for k in shapes}
    errors = ({k: np.stack([r[k] for r in err_rows]) for k in err_keys} if with_errors
              else None)
    finite = all(np.all(np.isfinite(v)) for v in stacked.values())
    if success and not finite:
        success = False
        bad = [float(p) for p, v in zip(setup.depths_desc, stacked["depth_grad"])
               if not np.all(np.isfinite(v))]
        message = (f"Non-finite depth gradient at depth p = {bad[0]:.10g} (the dynamics or "
                   f"running loss is not finite at x there)." if bad else
                   "Non-finite value in the results.")
    if success and errors is not None:
        message += accuracy_note(setup.depths_desc, stacked, errors)
    return pack_result(setup, stacked, success=success, message=message, nfev=outcome.nfev,
                       closure=closure, method=method, error_estimate=errors)


#: Relative error estimate above which the result's message warns.
WARN_RELATIVE_ERROR = 0.1


def accuracy_note(depths_desc: np.ndarray, fields: dict, errors: dict) -> str:
    """A warning appended to the message where the closure's own estimate is large."""
    for i, p in enumerate(depths_desc):
        for k in ("z", "value", "adjoint"):
            scale = np.maximum(np.abs(fields[k][i]), 1.0)
            rel = float(np.max(errors[k][i] / scale, initial=0.0))
            if rel > WARN_RELATIVE_ERROR:
                return (f" Warning: from depth p = {p:.6g} on, the closure's error estimate of "
                        f"`{k}` is {rel:.2g} relative to max(1, |{k}|): the jet is outside its "
                        f"range of accuracy there (it cannot see, e.g., a finite-time blow-up "
                        f"in t); raise `order`, or request shallower depths.")
    return ""


ALL_METHODS = SCIPY_METHODS + FIXED_METHODS
