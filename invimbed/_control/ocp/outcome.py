"""The fields of a `solve_ocp` result: the solution unpacked, our KKT check's verdict, the
trajectory, and a hint for a free horizon that ran away (docs/optimization.md, "Success is
checked by us"). `OCPSolver.solve` builds the `OCPResult` from them, once."""

from __future__ import annotations

import numpy as np
from scipy.optimize import OptimizeResult

from ..._core.problem.open_loop import PiecewiseConstant
from ..._core.results.status import Status
from .nlp import ShootingNLP, kkt_check
from ..options import SolverFailure


def runaway_horizon(res: dict, start: float, low: float) -> str:
    """A hint for a free horizon without `horizon_bounds` that ran away (ten times its
    start, or down to its default lower bound): nothing in the problem prices time."""
    H = float(res["horizon"])
    if not (H >= 10 * start or H <= 10 * low) or (res["success"] and H > 10 * low):
        return ""
    grew = H >= 10 * start
    where = (f"grew from {start:.6g} to {H:.6g}" if grew else
             f"shrank from {start:.6g} to {H:.3g}, at its default lower bound {low:.3g}")
    return (f" The free horizon {where}: nothing in the problem prices time ("
            f"{'stretching' if grew else 'shrinking'} the horizon keeps lowering J), so it "
            f"runs to a bound; give `horizon_bounds=(low, high)`, or a cost of time.")


def result_fields(nlp: ShootingNLP, run, tol: float, constraint_tol: float,
            trajectory_points: int) -> dict:
    """The fields of `solve_ocp`'s `OCPResult` (built once, by `solve_ocp`)."""
    sh = nlp.sh
    w = run.w
    S, U, H = sh.unpack(w)
    times = sh.times(H)
    res = dict(x=w, states=S, controls=U.copy(), times=times, horizon=H,
               p=float(times[0]), solver=run.solver, solver_status=run.solver_status,
               solver_message=run.message, nit=run.nit, warnings=[])
    try:
        fun = nlp.objective(w)
        kkt = kkt_check(nlp, w, tol=tol, constraint_tol=constraint_tol,
                        multipliers=run.multipliers)
    except SolverFailure as exc:
        res.update(success=False, status=Status.FAILED, fun=np.nan, kkt=None,
                   constraint_violation=np.nan,
                   violations={}, message=f"{exc}. {run.message}", nsolve=nlp.n_solves,
                   nfev=nlp.nfev)
        return res
    res["fun"] = fun
    res["kkt"] = {"stationarity": kkt.stationarity, "complementarity": kkt.complementarity}
    res["constraint_violation"] = kkt.violation
    res["violations"] = nlp.violation_by_block(w)
    if run.failure is not None and not kkt.ok:
        res.update(success=False, status=Status.FAILED,
                   message=f"The solver stopped after {run.nit} iterations when {run.failure}. "
                           f"{run.message}")
    elif kkt.ok:
        res.update(success=True, status=Status.SUCCESS,
                   message=f"Optimal: KKT residual {max(kkt.stationarity, kkt.complementarity):.1e}"
                           f" <= tol = {tol:g}, constraint violation {kkt.violation:.1e} <= "
                           f"constraint_tol = {constraint_tol:g}. {run.message}")
    else:
        code = Status.STOPPED if run.stopped else Status.NOT_CONVERGED
        stop = "`callback` stopped the solver. " if run.stopped else ""
        res.update(success=False, status=code,
                   message=f"{stop}Not optimal: KKT residual (stationarity "
                           f"{kkt.stationarity:.1e}, "
                           f"complementarity {kkt.complementarity:.1e}; tol = {tol:g}), "
                           f"constraint violation {kkt.violation:.1e} (constraint_tol = "
                           f"{constraint_tol:g}) after {run.nit} iterations. {run.message}")
    res["control"] = PiecewiseConstant(times, U.copy())
    sol = nlp.solution(w)                       # cached, with its dense output
    res["defects"] = S[1:] - sol.F
    frac = np.linspace(0.0, 1.0, trajectory_points)
    tt, z, *_ = sh.interior(w, sol, frac)
    res["trajectory"] = OptimizeResult(t=tt.ravel(), z=z.reshape(-1, sh.n),
                                       u=np.repeat(U, trajectory_points, axis=0))
    res["nsolve"] = nlp.n_solves
    res["nfev"] = nlp.nfev
    return res
