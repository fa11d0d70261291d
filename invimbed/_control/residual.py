"""`optimality_residual`: Theorem 3's condition (eq. (13)) for a control found elsewhere.

At an optimal control ``grad_theta R + [grad_theta f]^T Lam = 0`` at every ``(p, x)``
(docs/theory.md, "Optimality"). For an open-loop control ``Lam`` comes from the open-loop
sweep (`solve_imbedding`); for a feedback policy from the closed-loop jet of
`invimbed._control.feedback` run with that policy.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from .._core.setup.arguments import prepare
from .._core.problem.open_loop import Constant, OpenLoopControl
from .._core.sweep.imbedding import solve_imbedding
from .._core.integrators import ALL_METHODS
from .._core.problem.bolza import BolzaProblem
from .._core.inputs.validation import as_int, check_options, describe
from .feedback import FeedbackJetClosure, optimality_gradient, sweep_feedback
from .closed_loop import OPTIONS, check_integrator_options

#: Keywords of the closed-loop sweep of a feedback policy (the integrator's settings).
POLICY_KEYWORDS = ("method", "rtol", "atol", "step")


def _open_loop_keywords() -> tuple[str, ...]:
    """The keyword-only arguments of `solve_imbedding`, and the integrator's options."""
    params = inspect.signature(solve_imbedding).parameters.values()
    named = tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
                  and p.name != "control")
    return named + tuple(k for k in OPTIONS if k not in named)


def optimality_residual(problem: BolzaProblem, x: Any, depths: Any, control: Any, *,
                        n_controls: int | None = None, **solve_kwargs: Any) -> np.ndarray:
    """The Theorem 3 residual ``grad_theta R + [grad_theta f]^T Lam`` at ``(p_i, x)``.

    Zero at every depth for an optimal control (eq. (13)): users check a solution they
    got elsewhere with it.

    Parameters
    ----------
    problem : BolzaProblem
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
    control : Constant, PiecewiseConstant, Control, or callable ``policy(p, x) -> theta``
        An open-loop control (``Lam`` from `solve_imbedding`) or a feedback policy taking
        ``x`` of shape (B, N) and returning (B, M) (``Lam`` from the closed-loop jet, its
        Jacobian by central differences; give ``n_controls``).
    n_controls : int, optional
        ``M``, required with a feedback policy.
    **solve_kwargs
        The sweep's settings. With an open-loop control: the keyword arguments of
        `solve_imbedding`. With a policy: ``method``, ``rtol``, ``atol``, ``step`` and
        the integrator's options ``first_step``, ``max_step``, ``min_step``,
        ``max_steps``. Any other keyword raises `TypeError` naming it.

    Returns
    -------
    ndarray, shape (n, M) or (n, B, M)

    Raises
    ------
    TypeError, ValueError
        Bad arguments; the message names the argument.
    ArithmeticError
        The sweep failed (its message says where).
    """
    if isinstance(control, OpenLoopControl):
        check_options(solve_kwargs, _open_loop_keywords(), "optimality_residual")
        res = solve_imbedding(problem, x, depths, control=control, **solve_kwargs)
        if not res.success:
            raise ArithmeticError(f"the imbedding sweep failed: {res.message}")
        setup = prepare(problem, x, depths, control, "RK45", 1e-6, 1e-9, None, ALL_METHODS)
        lam = res.adjoint if setup.batched else res.adjoint[:, None]
        out = []
        for p, L in zip(setup.depths, lam):
            th = np.broadcast_to(control.theta(p), (setup.x.shape[0], control.size))
            out.append(optimality_gradient(setup.provider, p, setup.x, th, L))
        out = np.stack(out)
        return out if setup.batched else out[:, 0]
    if not callable(control):
        raise TypeError(f"`control` must be an invimbed control or a feedback policy "
                        f"callable, but got {describe(control)}")
    if n_controls is None:
        raise ValueError("`n_controls` is required with a feedback policy")
    n_controls = as_int(n_controls, "n_controls", minimum=1)
    check_options(solve_kwargs, POLICY_KEYWORDS + OPTIONS, "optimality_residual")
    kwargs = dict(solve_kwargs)
    method = kwargs.pop("method", "RK45")
    rtol, atol = kwargs.pop("rtol", 1e-6), kwargs.pop("atol", 1e-9)
    step = kwargs.pop("step", None)
    options = check_integrator_options(kwargs, "optimality_residual")
    setup = prepare(problem, x, depths, Constant(np.zeros(n_controls)), method, rtol, atol,
                    step, ALL_METHODS)
    if method == "disc":
        raise ValueError("`method` 'disc' (the paper's open-loop layers) is not available for "
                         "a feedback policy; use a scipy method or euler/midpoint/rk4")
    clo = FeedbackJetClosure(setup.provider, setup.x, setup.q, n_controls, order=1,
                             estimate_error=False, policy=control)
    res = sweep_feedback(setup, clo, method, float(rtol), float(atol),
                         None if step is None else float(step), options)
    if not res.success:
        raise ArithmeticError(f"the closed-loop sweep failed: {res.message}")
    lam = res.adjoint if setup.batched else res.adjoint[:, None]
    th_all = res.feedback if setup.batched else res.feedback[:, None]
    out = np.stack([optimality_gradient(setup.provider, p, setup.x, th, L)
                    for p, th, L in zip(setup.depths, th_all, lam)])
    return out if setup.batched else out[:, 0]
