"""`solve_optimal`: optimal feedback of every depth by one imbedding sweep (Theorem 3).

Two sweeps answer it (docs/optimal-control.md): for linear-quadratic problems the matrix
Riccati equation, exact (`invimbed._control.riccati`); otherwise the HJB sweep of the
closed-loop jet (`invimbed._control.feedback`), whose feedback at every depth satisfies
eq. (13) (docs/theory.md, "Optimality"). This module reads the user's arguments, picks
the sweep, and with box constraints checks that the optimal path stays on the branch of
the Hamiltonian that the jet expands.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from .._core.setup.arguments import prepare
from .._core.setup.settings import Accuracy, Closure, Integrator, closure_keywords, settle
from .._core.sweep.assembly import mark_imprecise
from .._core.problem.open_loop import Constant
from .._core.sweep.dense import check_dense_output, dense_conflicts
from .._core.problem.bolza import BolzaProblem, _symbols
from .._core.results.results import Draft, FeedbackResult, SolverWarning, feedback_result
from .._core.inputs.validation import (as_bool, as_float_array, as_int, as_real,
                                       describe, require_finite)
from . import riccati
from .feedback import FeedbackJetClosure, sweep_feedback
from .policy import check_closed_loop, feedback_grid
from .closed_loop import OptimalityError, SweepBudget, check_integrator_options

#: What a not-converged `solve_optimal` recommends (it has no exact fallback: the exact
#: optimum of one horizon is `solve_ocp`'s).
REMEDY = ("raise `order` (or pass tol=... to let the sweep choose it) or request "
          "shallower depths; for the exact optimum of one horizon use solve_ocp")


def solve_optimal(problem: BolzaProblem, x: Any, depths: Any, *, n_controls: int | None = None,
                  control_bounds: Any = None, closure: str | Closure = "jet", order: int = 1,
                  method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                  step: float | None = None, estimate_error: bool = True,
                  control_affine: bool = False, linear_quadratic: bool | None = None,
                  theta0: Any = None, newton_tol: float | None = None, max_newton: int = 50,
                  tol: Any = None, closed_loop: bool | None = None, max_time: float | None = None,
                  progress: bool = False, dense_output: bool = False,
                  accuracy: Accuracy | None = None, integrator: Integrator | None = None,
                  **options: Any) -> FeedbackResult:
    """Optimal feedback control of every depth by one imbedding sweep (Theorem 3).

    ``Psi(p, x)`` minimises the Hamiltonian ``R + Lam . f`` (eq. (13)); the value obeys
    the HJB equation, solved as a Riccati equation for linear-quadratic problems and by
    the jet otherwise. Details: docs/optimal-control.md, "solve_optimal in detail".

    Parameters
    ----------
    problem : BolzaProblem
        ``f(t, z, theta)`` and losses; the Hamiltonian strictly convex in ``theta``.
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
        Depths ``p_i <= q``; the horizon of depth ``p_i`` is ``q - p_i``.
    n_controls : int, optional
        ``M``; inferred from ``control_bounds`` or ``theta0`` when omitted.
    control_bounds : array_like, shape (M, 2), optional
        Box ``lo <= theta <= hi`` (projected Newton); rules out the Riccati path.
    closure, order : {"jet"} or Closure, int (default 1)
        The jet of order ``K``: ``V`` is carried to degree ``K + 1``; a
        `invimbed.Closure` (``kind="jet"``) gives ``order`` and ``estimate_error`` too.
    method, rtol, atol, step
        As in `solve_imbedding`.
    estimate_error : bool, default True
        Estimate the error from order ``K + 1``; a depth that fails is status -2.
    control_affine : bool, default False
        Declare ``f`` affine and ``R`` quadratic in ``theta``: one Newton step (probed).
    linear_quadratic : bool or None, default None
        Take the Riccati path; ``None`` detects it, ``True`` declares it (probed).
    theta0, newton_tol, max_newton : array_like (M,), float (1e-12), int (50), optional
        The pointwise Newton iteration's start at ``p = q``, step tolerance and limit.
    tol : float or (float, float), optional
        ``(rtol, atol)`` the jet's estimate must meet, with the ratio test.
    closed_loop : bool or None, default None
        Simulate the sweep's own feedback and check its true cost against ``V``.
    max_time : float, optional
        Seconds the sweep may run; it then returns what it reached (status -1).
    progress, dense_output : bool, default False
        Show the share of the depth range swept; keep ``sol`` (any depth's fields).
    accuracy, integrator : Accuracy, Integrator, optional
        ``tol``, ``rtol``, ``atol``; ``method``, ``step`` and the ``**options``, as objects
        (docs/method.md, "Settings as objects"). A keyword left at its default defers to
        the object; one that sets a field the object sets differently is a ValueError.
    **options
        ``first_step``, ``max_step``, ``min_step``, ``max_steps``; others raise.

    Returns
    -------
    FeedbackResult
        An `ImbeddingResult` (``z``, ``value`` (``V``), ``adjoint``, ``depth_grad``, ...)
        with ``feedback`` (``Psi``, (n, [B,] M)), ``feedback_jacobian``
        (``d Psi / d x``, (n, [B,] M, N)), ``linear_quadratic``, ``policy``,
        ``closed_loop_value``, ``optimality_error``; ``status`` one of
        `FeedbackResult.STATUS_CODES` (docs/results-and-status.md), and ``warnings``
        (`SolverWarning` s: ``"closed_loop_mismatch"``, ``"branch_switch"``, ...), which
        the message does not repeat.

    Raises
    ------
    TypeError, ValueError
        A bad or unknown argument (named); a declared structure the problem lacks.

    Examples
    --------
    >>> import numpy as np, invimbed            # dz/dt = u, R = (z^2 + u^2)/2: V = tanh(s)/2
    >>> pb = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
    >>> res = invimbed.solve_optimal(pb, [1.0], [-1.0], n_controls=1, rtol=1e-10, atol=1e-12)
    >>> round(float(res.value[0]), 6), round(float(0.5 * np.tanh(1.0)), 6), res.linear_quadratic
    (0.380797, 0.380797, True)
    """
    options = check_integrator_options(options, "solve_optimal", KEYWORDS, control_hint=(
        "solve_optimal computes the optimal feedback itself; to check a given control use "
        "optimality_residual(problem, x, depths, control), to evaluate it solve_imbedding"))
    closure = settle(Closure, *closure_keywords(closure, order=(order, 1),
                                                estimate_error=(estimate_error, True)),
                     argument="closure", unused=("difference", "delta"),
                     caller="solve_optimal", choices={"kind": ("jet",)})
    accuracy = settle(Accuracy, accuracy, {"tol": (tol, None), "rtol": (rtol, 1e-6),
                                           "atol": (atol, 1e-9)}, argument="accuracy",
                      unused=("max_order", "ratio_test", "fallback"), caller="solve_optimal")
    integrator = settle(Integrator, integrator, {
        "method": (method, "RK45"), "step": (step, None),
        **{k: (v, None) for k, v in options.items()}}, argument="integrator")
    order, estimate_error = closure.order, closure.estimate_error
    method, step, options = integrator.method, integrator.step, integrator.options
    if linear_quadratic is not None and not isinstance(linear_quadratic, (bool, np.bool_)):
        raise TypeError(f"`linear_quadratic` must be None, True or False, but got "
                        f"{describe(linear_quadratic)}")
    if closed_loop is not None:
        closed_loop = as_bool(closed_loop, "closed_loop")
    progress = as_bool(progress, "progress")
    max_time = as_real(max_time, "max_time", positive=True, allow_none=True)
    control_affine = as_bool(control_affine, "control_affine")
    max_newton = as_int(max_newton, "max_newton", minimum=1)
    newton_tol = as_real(newton_tol, "newton_tol", positive=True, allow_none=True)
    bounds = None
    if control_bounds is not None:
        bounds = as_float_array(control_bounds, "control_bounds")
        if np.any(np.isnan(bounds)):
            raise ValueError(f"`control_bounds` must not contain NaN (use -inf or inf for a "
                             f"side without a bound), but got {bounds.tolist()!r}")
        if bounds.ndim != 2 or bounds.shape[1] != 2 or np.any(np.isnan(bounds)) \
                or np.any(bounds[:, 0] > bounds[:, 1]):
            raise ValueError(f"`control_bounds` must have shape (M, 2) with lo <= hi, but got "
                             f"{describe(bounds)}")
    if theta0 is not None:
        theta0 = np.atleast_1d(as_float_array(theta0, "theta0"))
        if theta0.ndim != 1:
            raise ValueError(f"`theta0` must have shape (M,), but got shape {theta0.shape}")
        require_finite(theta0, "theta0")
    if n_controls is None:
        if bounds is not None:
            n_controls = bounds.shape[0]
        elif theta0 is not None:
            n_controls = theta0.size
        else:
            raise ValueError("`n_controls` (the size M of theta) is required when neither "
                             "`control_bounds` nor `theta0` gives it")
    n_controls = as_int(n_controls, "n_controls", minimum=1)
    known = getattr(problem.derivative_provider, "n_theta", None) \
        if isinstance(problem, BolzaProblem) else None
    if known is not None and n_controls != known:     # e.g. from_sympy: its control symbols
        raise ValueError(f"`n_controls` must be {known}, the problem's number of controls"
                         f"{_symbols(problem.derivative_provider, 'theta', ' (symbols:')}"
                         f"{')' if getattr(problem.derivative_provider, 'theta', None) else ''}"
                         f", but got {n_controls}")
    for name, arr in (("control_bounds", bounds), ("theta0", theta0)):
        if arr is not None and arr.shape[0] != n_controls:
            raise ValueError(f"`{name}` must have {n_controls} rows (n_controls), but has "
                             f"shape {arr.shape}")
    if method == "disc":
        raise ValueError("`method` 'disc' (the paper's open-loop layers) is not available for "
                         "optimal feedback; use a scipy method or euler/midpoint/rk4")
    if linear_quadratic is True and bounds is not None:
        raise ValueError("`linear_quadratic=True` and `control_bounds` exclude each other: "
                         "with bounds the feedback saturates and the value is not quadratic")
    if check_dense_output(dense_output, method=dense_conflicts(method, None, None, None)["method"]):
        options = dict(options, dense_output=True)
    if accuracy.checked and not estimate_error:
        raise ValueError(f"`tol` needs the error estimate and its convergence test "
                         f"(estimate_error=True, order >= 1), but got "
                         f"estimate_error={estimate_error!r}, order={order!r}")
    dummy = Constant(np.zeros(n_controls) if theta0 is None else theta0)
    setup = prepare(problem, x, depths, dummy, integrator=integrator, accuracy=accuracy,
                    closure=closure)
    setup.remedy = REMEDY
    rtol, atol = setup.accuracy.rtol, setup.accuracy.atol
    p_min = float(setup.depths_desc[-1])
    grid = feedback_grid(setup, method, step) if closed_loop is not False else None
    budget = SweepBudget(max_time, progress, setup.q, p_min)
    try:
        res = _sweep(setup, problem, grid, budget, method=method, rtol=rtol, atol=atol,
                     step=step, options=options, estimate_error=estimate_error, bounds=bounds,
                     n_controls=n_controls, control_affine=control_affine, theta0=theta0,
                     newton_tol=newton_tol, max_newton=max_newton,
                     linear_quadratic=linear_quadratic, order=order)
    finally:
        budget.close()
    if dense_output:
        res = res.but(sol=res.get("sol"))     # None where the sweep took no step (at q)
    check = closed_loop if closed_loop is not None else not res.linear_quadratic
    if check and res.get("policy") is not None:
        res = check_closed_loop(res, setup, res.policy, method, rtol, atol, options)
    return feedback_result(mark_imprecise(setup, res))


def _sweep(setup, problem, grid, budget, *, method, rtol, atol, step, options, estimate_error,
           bounds, n_controls, control_affine, theta0, newton_tol, max_newton,
           linear_quadratic, order) -> Draft:
    """The Riccati path or the HJB sweep (`solve_optimal`'s arguments, checked; ``grid``
    and ``budget`` as in `invimbed._control.feedback.sweep_feedback`)."""
    p_min = float(setup.depths_desc[-1])
    if control_affine:
        riccati.check_control_affine(setup.provider, setup.q, p_min, setup.x, bounds, theta0)
    if linear_quadratic is not False and bounds is None:
        is_lq, varying, reason = riccati.detect_lq(problem, setup.provider, setup.x, setup.q,
                                                   p_min)
        if linear_quadratic is True and not is_lq:
            raise ValueError(f"`linear_quadratic=True` was given, but {reason}; drop it (or "
                             f"pass linear_quadratic=False) to run the jet sweep")
        if is_lq:
            res = riccati.solve_riccati(setup, varying, method, rtol, atol, step,
                                        dict(options), estimate_error, grid, budget)
            return res.but(linear_quadratic=True, warnings=res.get("warnings", []))
    clo = FeedbackJetClosure(setup.provider, setup.x, setup.q, n_controls, order=order,
                             estimate_error=estimate_error, bounds=bounds,
                             control_affine=control_affine, theta0=theta0,
                             newton_tol=newton_tol, max_newton=max_newton,
                             ratio_test=setup.accuracy.checked)
    res = sweep_feedback(setup, clo, method, rtol, atol, step, dict(options), grid, budget)
    if bounds is not None and res.success:
        switch = _branch_check(setup, res, bounds, n_controls, control_affine)
        if switch is not None:
            res = res.but(warnings=res.warnings + [switch])
    return res.but(linear_quadratic=False)


def _branch_check(setup, res, bounds: np.ndarray, n_controls: int,
                  control_affine: bool) -> SolverWarning | None:
    """With bounds, the Hamiltonian's minimum is only piecewise smooth in ``Lam``: the jet
    expands ``V`` around ``x`` on one branch (one active set). Compare the active set of
    Theorem 3's control at ``(p, x)`` with the one at the end of the optimal path,
    ``(q, z(q))`` with ``Lam = grad T``; where they differ the path switches branch and the
    jet (and its estimate, which sees the same branch) cannot be trusted: the
    ``"branch_switch"`` warning of the first such depth, None where none switches."""
    prov = setup.provider
    zq = res.z if setup.batched else res.z[:, None]
    fb = res.feedback if setup.batched else res.feedback[:, None]
    lo, hi = bounds[:, 0], bounds[:, 1]
    tol = 1e-9 * np.maximum(1.0, np.abs(bounds)).max(1)
    for i, p in enumerate(setup.depths):   # the results' order
        end = FeedbackJetClosure(prov, zq[i], setup.q, n_controls, order=1, estimate_error=False,
                                 bounds=bounds, control_affine=control_affine)
        lam = prov.derivative("T", setup.q, zq[i], None, dz=1)
        try:
            th_end = end.optimal_theta(setup.q, lam, 1)
        except OptimalityError:
            continue
        def side(th):  # -1 at the lower bound, +1 at the upper, 0 inside
            return np.where(th <= lo + tol, -1, np.where(th >= hi - tol, 1, 0))

        start, finish = side(fb[i]), side(th_end)
        if np.any(start != finish):
            names = {-1: "at its lower bound", 0: "inside its bounds", 1: "at its upper bound"}
            j = np.argwhere(start != finish)[0]
            return SolverWarning(
                "branch_switch",
                f"at depth p = {p:.6g} the optimal control is "
                f"{names[int(start[tuple(j)])]} at the start of the path and "
                f"{names[int(finish[tuple(j)])]} at its end: the "
                f"path switches between branches of the Hamiltonian, which the jet (and "
                f"its error estimate) cannot see; the value may be wrong there. Check "
                f"against a direct method (solve_bvp, optimize_control).", float(p))
    return None


#: The keyword arguments `solve_optimal` names (for the suggestion on a misspelt one).
KEYWORDS = tuple(name for name, par in inspect.signature(solve_optimal).parameters.items()
                 if par.kind is inspect.Parameter.KEYWORD_ONLY)
