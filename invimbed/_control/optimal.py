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

from .._core.arguments import parse_tol, prepare
from .._core.controls import Constant
from .._core.dense import check_dense_output, dense_conflicts
from .._core.integrators import ALL_METHODS
from .._core.problem import BolzaProblem, _symbols
from .._core.results import ImbeddingResult, set_fields
from .._core.validation import (as_bool, as_float_array, as_int, as_real, check_choice, describe,
                                require_finite)
from . import riccati
from .feedback import FeedbackJetClosure, sweep_feedback
from .policy import check_closed_loop, feedback_grid
from .sweep import OptimalityError, SweepBudget, check_integrator_options


def solve_optimal(problem: BolzaProblem, x: Any, depths: Any, *, n_controls: int | None = None,
                  control_bounds: Any = None, closure: str = "jet", order: int = 1,
                  method: str = "RK45", rtol: float = 1e-6, atol: float = 1e-9,
                  step: float | None = None, estimate_error: bool = True,
                  control_affine: bool = False, linear_quadratic: bool | None = None,
                  theta0: Any = None, newton_tol: float | None = None, max_newton: int = 50,
                  tol: Any = None, closed_loop: bool | None = None, max_time: float | None = None,
                  progress: bool = False, dense_output: bool = False,
                  **options: Any) -> ImbeddingResult:
    """Optimal feedback control of every depth by one imbedding sweep (Theorem 3).

    At each ``(p, x)`` the control ``Psi(p, x)`` minimises the Hamiltonian
    ``R + Lam . f`` (its first-order condition is eq. (13)), and the value function
    ``V(p, x)``, the optimal cost-to-go, obeys the HJB equation
    ``-dV/dp = min_theta [R + grad_x V . f]``. For linear-quadratic problems it is the
    matrix Riccati equation, solved directly (the Riccati path); otherwise the jet
    closure carries ``V`` as a Taylor polynomial (the HJB sweep). See
    docs/optimal-control.md.

    Parameters
    ----------
    problem : BolzaProblem
        Dynamics ``f(t, z, theta)`` and losses; ``theta`` is the control (size
        ``n_controls``). ``R`` must make the Hamiltonian strictly convex in ``theta``.
    x : array_like, shape (N,) or (B, N)
    depths : array_like, shape (n,)
        Depths ``p_i <= q``; the horizon of depth ``p_i`` is ``q - p_i``.
    n_controls : int, optional
        ``M``; inferred from ``control_bounds`` or ``theta0`` when omitted.
    control_bounds : array_like, shape (M, 2), optional
        Box constraints ``lo <= theta <= hi`` (projected Newton; the feedback's jet is
        zero in the active components). Bounds rule out the Riccati path.
    closure : {"jet"}
        The closure of the HJB sweep (the jet; its order ``K`` carries ``V`` to degree
        ``K + 1``).
    order : int, default 1
        Jet order ``K`` (not used by the Riccati path, which is exact).
    method, rtol, atol, step
        As in `solve_imbedding`; the Riccati path integrates with the same method and
        tolerances.
    estimate_error : bool, default True
        Carry orders ``K + 1`` and ``K - 1`` alongside: the estimate is the difference
        between ``K`` and ``K + 1``, and a depth where the differences between successive
        orders of the value or the output do not shrink geometrically (the ratio test of
        `solve_imbedding`), or where the estimate is large, is not converged: ``success``
        is False, ``status`` -2 and the message names the depth
        (docs/optimal-control.md, "The error estimate"). The Riccati path reports a zero
        estimate (it is exact up to the integrator's tolerance).
    control_affine : bool, default False
        The registered fast path: ``f`` affine and ``R`` quadratic in ``theta``, so
        ``Psi`` is one (exact) Newton step. Checked by a probe at a few random points: a
        problem that is not control-affine raises `ValueError`.
    linear_quadratic : bool or None, default None
        Whether to take the Riccati path (``f`` affine in ``(z, theta)``, ``R`` and ``T``
        quadratic). ``None`` detects it: from the polynomial degrees of the expressions
        for `from_sympy` problems, by a probe (the functions against their interpolated
        affine/quadratic models at random points and three times) otherwise. ``True``
        declares it (still probed: a problem that is not LQ raises `ValueError`);
        ``False`` always runs the jet sweep.
    theta0 : array_like, shape (M,), optional
        Starting guess of the Newton iterations at ``p = q`` (then warm-started).
    newton_tol : float, optional
        Relative step size at which the pointwise Newton iteration stops; default
        ``1e-12``. With finite-difference derivatives it also stops once its steps are
        within ten times what the derivatives' own noise explains (a warning
        ``"newton_at_derivative_noise"`` says so).
    max_newton : int, default 50
        Iteration limit of the pointwise minimisation.
    tol : float or (float, float), optional
        ``(rtol, atol)`` (a float ``t`` means ``(t, t)``) the jet sweep's estimate must
        meet at every depth, with the convergence test of the series of orders ``K - 1``,
        ``K``, ``K + 1`` (docs/accuracy.md). Without it the criterion is the estimate within
        10% of ``max(1, |field|)``. A depth that fails is status -2. Only with ``tol``
        does the sweep carry the jet of order ``K - 1`` (the ratio test's), which is the
        first to blow up as the horizon grows.
    closed_loop : bool or None, default None
        Check the value against its own feedback: simulate the sweep's feedback
        (``policy``) from ``(p_i, x)`` to ``q`` for every depth reached (`simulate`, the
        exact ensemble; RK45 after a fixed-step sweep) and report its true cost as
        ``closed_loop_value``. A depth where ``|J - V|`` exceeds the tolerance (``tol``,
        or 10% of ``max(1, |V|)`` without it) is not converged: ``success`` False,
        ``status`` -2, and the message names the depth (docs/optimal-control.md,
        "Closed loop"). ``None`` checks the HJB sweep, whose value carries the jet's
        truncation error, and not the Riccati path, which is exact (``True`` checks both,
        ``False`` neither). Unless ``False``, the sweep keeps its feedback at 64 depths
        spread over the depth range (a fixed-step sweep: at some of its own step ends)
        for the result's ``policy``.
    max_time : float, optional
        Seconds the sweep may run. When they are spent it stops where it is and returns
        what it reached: the depths passed keep their fields, the others are NaN,
        ``success`` False, ``status`` -1 and the message says so. (``max_steps``, an
        integrator option, bounds the steps the same way.)
    progress : bool, default False
        Show the share of the depth range swept, at most once a second (``tqdm`` when
        installed, otherwise a line on stderr).
    dense_output : bool, default False
        Keep the continuous extension of the sweep's accepted steps: the result's ``sol``
        (`invimbed.DenseSolution`) gives every field at any depth ``p`` of
        ``[min(depths), q]``, so ``res.sol(q - h).feedback_jacobian`` is the feedback gain
        ``d Psi / d x`` (``-K`` on the Riccati path) at any horizon ``h`` (docs/accuracy.md,
        "Dense output: any depth from one sweep"). Needs a scipy ``method``.
    **options
        Passed to the integrator: ``first_step``, ``max_step``, ``min_step`` (as in
        `scipy.integrate.solve_ivp`; ``step`` is the default ``max_step``) and
        ``max_steps``. Any other keyword raises `TypeError` naming it (``control``
        too: the feedback is what this function computes).

    Returns
    -------
    ImbeddingResult
        ``depths``, ``z`` (the output under the optimal feedback), ``value`` (the optimal
        cost-to-go ``V(p_i, x)``), ``adjoint`` (``grad_x V``), ``feedback``
        (``Psi(p_i, x)``, shape (n, [B,] M)), ``feedback_jacobian`` (``d Psi / d x``, shape
        (n, [B,] M, N)), ``depth_grad`` (``dV/dp = -min H``), ``error_estimate``,
        ``success``, ``status`` (`STATUS`), ``message``, ``nfev``, ``linear_quadratic``
        (whether the Riccati path ran), ``warnings`` (`SolverWarning` entries),
        ``optimality_error``; where the closed loop was checked, ``closed_loop_value``
        (the true cost of the sweep's feedback from ``(p_i, x)``, shape (n, [B]), NaN
        where no value was reached); unless ``closed_loop=False``, ``policy`` (the
        feedback ``u(t, z)``, `SweepFeedback`, for `simulate`; None otherwise). A failure of the pointwise minimisation (an
        `OptimalityError`: the Hamiltonian not strictly convex in ``theta``, or Newton's
        method not converging) ends the sweep with ``success=False`` and a message naming
        the depth; the depths reached before it keep their fields (NaN only beyond), and
        ``optimality_error`` is the exception, whose ``depths`` and ``fields`` are those
        depths and their fields. ``optimality_error`` is None otherwise.

    Raises
    ------
    TypeError
        An argument of the wrong type (``rtol="1e-6"``, ``estimate_error="no"``), or an
        unknown keyword (a misspelt ``rtoll=``, or ``control=``); the message names it.
    ValueError
        Bad values; ``control_affine=True`` or ``linear_quadratic=True`` on a problem
        without that structure.

    Examples
    --------
    Finite-horizon LQR, ``dz/dt = u``, ``R = (z^2 + u^2)/2``: ``P(s) = tanh(s)``.

    >>> import numpy as np, invimbed
    >>> pb = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
    >>> res = invimbed.solve_optimal(pb, [1.0], [-1.0], n_controls=1, rtol=1e-10, atol=1e-12)
    >>> round(float(res.value[0]), 6), round(float(0.5 * np.tanh(1.0)), 6), res.linear_quadratic
    (0.380797, 0.380797, True)
    """
    options = check_integrator_options(options, "solve_optimal", KEYWORDS, control_hint=(
        "solve_optimal computes the optimal feedback itself; to check a given control use "
        "optimality_residual(problem, x, depths, control), to evaluate it solve_imbedding"))
    check_choice(closure, "closure", ("jet",))
    if linear_quadratic is not None and not isinstance(linear_quadratic, (bool, np.bool_)):
        raise TypeError(f"`linear_quadratic` must be None, True or False, but got "
                        f"{describe(linear_quadratic)}")
    estimate_error = as_bool(estimate_error, "estimate_error")
    if closed_loop is not None:
        closed_loop = as_bool(closed_loop, "closed_loop")
    progress = as_bool(progress, "progress")
    max_time = as_real(max_time, "max_time", positive=True, allow_none=True)
    control_affine = as_bool(control_affine, "control_affine")
    order = as_int(order, "order", minimum=1)
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
    tol_pair = parse_tol(tol)
    if check_dense_output(dense_output, method=dense_conflicts(method, None, None, None)["method"]):
        options = dict(options, dense_output=True)
    if tol_pair is not None and not estimate_error:
        raise ValueError(f"`tol` needs the error estimate and its convergence test "
                         f"(estimate_error=True, order >= 1), but got "
                         f"estimate_error={estimate_error!r}, order={order!r}")
    dummy = Constant(np.zeros(n_controls) if theta0 is None else theta0)
    setup = prepare(problem, x, depths, dummy, method, rtol, atol, step, ALL_METHODS)
    rtol, atol = float(rtol), float(atol)
    step = None if step is None else float(step)
    p_min = float(setup.depths_desc[-1])
    grid = feedback_grid(setup, method, step) if closed_loop is not False else None
    budget = SweepBudget(max_time, progress, setup.q, p_min)
    try:
        res = _sweep(setup, problem, grid, budget, method=method, rtol=rtol, atol=atol,
                     step=step, options=options, estimate_error=estimate_error, bounds=bounds,
                     n_controls=n_controls, control_affine=control_affine, theta0=theta0,
                     newton_tol=newton_tol, max_newton=max_newton, tol_pair=tol_pair,
                     linear_quadratic=linear_quadratic, order=order)
    finally:
        budget.close()
    if dense_output:
        set_fields(res, sol=res.get("sol"))     # None where the sweep took no step (at q)
    check = closed_loop if closed_loop is not None else not res.linear_quadratic
    if check and res.get("policy") is not None:
        check_closed_loop(res, setup, res.policy, method, rtol, atol, options, tol_pair)
    return res


def _sweep(setup, problem, grid, budget, *, method, rtol, atol, step, options, estimate_error,
           bounds, n_controls, control_affine, theta0, newton_tol, max_newton, tol_pair,
           linear_quadratic, order) -> ImbeddingResult:
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
            return set_fields(res, linear_quadratic=True, warnings=res.get("warnings", []))
    clo = FeedbackJetClosure(setup.provider, setup.x, setup.q, n_controls, order=order,
                             estimate_error=estimate_error, bounds=bounds,
                             control_affine=control_affine, theta0=theta0,
                             newton_tol=newton_tol, max_newton=max_newton,
                             ratio_test=tol_pair is not None)
    res = sweep_feedback(setup, clo, method, rtol, atol, step, dict(options), tol_pair,
                         grid, budget)
    if bounds is not None and res.success:
        set_fields(res, message=res.message + _branch_check(setup, res, bounds, n_controls,
                                                            control_affine))
    return set_fields(res, linear_quadratic=False)


def _branch_check(setup, res, bounds: np.ndarray, n_controls: int, control_affine: bool) -> str:
    """With bounds, the Hamiltonian's minimum is only piecewise smooth in ``Lam``: the jet
    expands ``V`` around ``x`` on one branch (one active set). Compare the active set of
    Theorem 3's control at ``(p, x)`` with the one at the end of the optimal path,
    ``(q, z(q))`` with ``Lam = grad T``; where they differ the path switches branch and the
    jet (and its estimate, which sees the same branch) cannot be trusted."""
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
            return (f" Warning: at depth p = {p:.6g} the optimal control is "
                    f"{names[int(start[tuple(j)])]} at the start of the path and "
                    f"{names[int(finish[tuple(j)])]} at its end: the "
                    f"path switches between branches of the Hamiltonian, which the jet (and "
                    f"its error estimate) cannot see; the value may be wrong there. Check "
                    f"against a direct method (solve_bvp, optimize_control).")
    return ""


#: The keyword arguments `solve_optimal` names (for the suggestion on a misspelt one).
KEYWORDS = tuple(name for name, par in inspect.signature(solve_optimal).parameters.items()
                 if par.kind is inspect.Parameter.KEYWORD_ONLY)
