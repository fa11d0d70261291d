"""The results of the optimisers: `OCPResult` (`solve_ocp`), `ControlResult`
(`optimize_control`) and `FitResult` (`fit_endpoint_dynamics`).

Each is a `Result` (status, message, warnings, success; attribute and key access, a
readable repr), built once by its solver from the fields it computed, with the field
names of the scipy ``OptimizeResult`` these solvers returned before
(docs/results-and-status.md).
"""

from __future__ import annotations

from .results import BASE_FIELDS, Result
from .status import Status


class OCPResult(Result):
    """The result of `solve_ocp` (direct multiple shooting, docs/optimization.md).

    Attributes
    ----------
    status : Status
        One of `STATUS_CODES`; ``success`` is our KKT check's verdict, never the NLP
        solver's word alone.
    x, fun, nit, nfev, nsolve
        The NLP's variables, ``J`` at them, the solver's iterations, the right-hand-side
        evaluations and the ensemble solves.
    times, states, controls, control, horizon, p, defects, trajectory
        The nodes, the states and controls there, the `PiecewiseConstant` control, the
        horizon ``q - p`` and the start ``p``, the continuity defects and the trajectory
        on ``trajectory_points`` per interval.
    kkt, constraint_violation, violations
        Our KKT check (stationarity, complementarity), the largest violation and the
        violation of each constraint block.
    solver, solver_status, solver_message
        The NLP solver's name, its own status code and message.
    hessian : str or None
        IPOPT's Hessian of the Lagrangian (``"exact"``, ``"limited-memory"`` or
        ``"finite-differences"``, ``"auto"`` resolved); None for scipy's solvers.
    backend : str
        The shooting rows that ran (``backend`` of `invimbed.solve_ocp`, ``"auto"``
        resolved): ``"numba"``, the compiled rows, or ``"numpy"``.
    warm_start : bool
        Whether the solve started from the last solution of its `OCPSolver`.
    constraint_derivatives : dict
        How each constraint function of the user (``path_constraints``,
        ``terminal_equality``, ``terminal_inequality``, and ``state_bounds`` inside the
        intervals) is differentiated: ``"exact: traced into sympy"``, or ``"central
        differences (not traced: <why>)"``; empty without such constraints.
    warnings : list of SolverWarning
        Empty so far: the message says what went wrong.
    """

    _fields = frozenset(BASE_FIELDS + (
        "x", "fun", "nit", "nfev", "nsolve", "times", "states", "controls", "control",
        "horizon", "p", "defects", "trajectory", "kkt", "constraint_violation", "violations",
        "solver", "solver_status", "solver_message", "hessian", "backend", "warm_start",
        "constraint_derivatives"))
    _first = ("message", "success", "status", "fun", "x", "nit", "kkt",
              "constraint_violation")
    STATUS_CODES = {
        Status.SUCCESS: "optimal: our check of the KKT residual and of the constraint "
                        "violation passed (`tol`, `constraint_tol`)",
        Status.NOT_CONVERGED: "not optimal: the NLP solver stopped (its status and message "
                              "are in `solver_status`, `solver_message`) at a point that "
                              "fails our KKT check; `kkt` and `constraint_violation` say by "
                              "how much",
        Status.FAILED: "an evaluation failed: the integration of a shooting interval, or a "
                       "constraint function not finite (the message names the interval or "
                       "the node)",
        Status.STOPPED: "stopped: `callback` stopped the solver at a point that fails our "
                        "KKT check; `kkt` and `constraint_violation` say by how much",
    }


class ControlResult(Result):
    """The result of `optimize_control`: scipy's ``minimize`` result, with its fields
    (``x``, ``fun``, ``jac``, ``nit``, ``nfev``, and those of the method), and ours.

    Its fields are open, as scipy's: each ``minimize`` method adds its own.

    Attributes
    ----------
    status : Status
        One of `STATUS_CODES`; scipy's own code is ``solver_status``.
    control, p, gradient
        ``control.with_params(x)``, the depth, and how ``jac`` was computed.
    jac_exact, gradient_exact, gradient_error
        The exact gradient at ``x``, whether ``jac`` is exact, and the imbedding
        gradient's estimated relative error.
    nsolve, nfev_solver, trajectory
        The solves, the solvers' right-hand-side evaluations, and ``z(t)`` under the
        optimal control.
    warnings : list
        Notes, as text (and the `SolverWarning` s of the solves).
    """

    STATUS_CODES = {
        Status.SUCCESS: "scipy's minimize reports success",
        Status.NOT_CONVERGED: "scipy's minimize stopped short, e.g. at its iteration limit "
                              "(its own code in `solver_status`)",
        Status.FAILED: "a solve failed at some `w` (the message names it and the solver's "
                       "message); the result holds the last point that solved",
        Status.STOPPED: "`callback` stopped the optimisation",
    }


class FitResult(Result):
    """The result of `fit_endpoint_dynamics`.

    Attributes
    ----------
    status : Status
        One of `STATUS_CODES`; L-BFGS-B's own code is ``solver_status``.
    x, fun, jac, history
        The trained weights, the loss and its gradient there, the loss of every epoch.
    nit, n_sweeps, nfev
        Epochs, imbedding sweeps and right-hand-side evaluations.
    problem, control
        ``solve_imbedding(res.problem, x_new, depths, control=res.control).z`` predicts.
    warnings : list of SolverWarning
        Empty so far.
    """

    _fields = frozenset(BASE_FIELDS + (
        "x", "fun", "jac", "history", "nit", "n_sweeps", "nfev", "solver_status", "problem",
        "control"))
    _first = ("message", "success", "status", "fun", "x", "nit")
    STATUS_CODES = {
        Status.SUCCESS: "the optimiser finished: its epochs, or the gradient's max-norm "
                        "at `gtol`, or L-BFGS-B's convergence",
        Status.NOT_CONVERGED: "L-BFGS-B stopped short (its own code in `solver_status`)",
        Status.FAILED: "a sweep failed (the message says where)",
        Status.STOPPED: "`callback` stopped the training",
    }


__all__ = ["ControlResult", "FitResult", "OCPResult"]
