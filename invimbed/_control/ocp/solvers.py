"""The NLP solvers of `solve_ocp`: IPOPT (through ``cyipopt``) and scipy's fallbacks.

Each driver takes a `ShootingNLP` and a start ``w0`` and returns a `Run`: the last
point, the solver's own status, message and iteration count, passed through as the
solver reported them. Whether the point is optimal is decided afterwards by
`invimbed._control.ocp.nlp.kkt_check`, never by the solver's word alone.

IPOPT (Wachter & Biegler 2006) is reached through ``cyipopt``: the ``ipopt`` extra
installs the ``cyipopt-wheels`` wheel, which bundles IPOPT and MUMPS; a ``cyipopt`` built
against a system IPOPT (``pip install cyipopt`` after ``apt-get install
coinor-libipopt-dev liblapack-dev libblas-dev pkg-config``) serves alike. It gets the
sparse Jacobian and the Hessian of the Lagrangian of `HESSIANS` (docs/optimization.md,
"Which Hessian"): exact, L-BFGS or colored differences. Without it,
``scipy.optimize.minimize`` runs ``"trust-constr"`` (sparse Jacobian, BFGS Hessian) or
``"SLSQP"`` (dense).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy.optimize import BFGS, Bounds, NonlinearConstraint, minimize

from .collocation import Collocation
from .collocation_hessian import CollocationHessian
from .exact_hessian import LagrangianHessian
from .hessian import ColoredHessian
from .nlp import ShootingNLP
from ..options import SolverFailure

SOLVERS = ("auto", "ipopt", "trust-constr", "slsqp")
#: IPOPT's Hessians of the Lagrangian: ``"auto"`` (``"exact"`` where the problem's
#: derivatives are exact, else ``"limited-memory"``), exact (from second-order
#: sensitivities, `invimbed._control.ocp.exact_hessian`; the collocation transcription's
#: own, `invimbed._control.ocp.collocation_hessian`), L-BFGS, or colored differences of
#: the exact Lagrangian gradient (`invimbed._control.ocp.hessian`).
HESSIANS = ("auto", "exact", "limited-memory", "finite-differences")
#: The Hessian objects of IPOPT's ``hessian_approximation="exact"``, by `HESSIANS` name.
HESSIAN_CLASSES = {"exact": LagrangianHessian, "finite-differences": ColoredHessian}


def have_ipopt() -> bool:
    """Whether ``cyipopt`` can be imported."""
    try:
        import cyipopt  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Run:
    """What a solver returned, as it reported it."""

    w: np.ndarray
    solver: str
    solver_status: int                     # the solver's own code (never a `Status`)
    message: str
    nit: int
    failure: str | None = None             # an integration that failed and stopped it
    stopped: bool = False                  # the user's callback asked it to stop
    multipliers: tuple | None = None       # (y, zb) of the constraints and bounds, if given
    bound_multipliers: tuple | None = None  # IPOPT's (z_lower, z_upper), both >= 0
    history: list = field(default_factory=list)


#: IPOPT's options for a warm start (`OCPSolver.solve`): IPOPT starts from the given
#: point and multipliers (``warm_start_init_point``), moved off their bounds by at most
#: 1e-9 (IPOPT's defaults, 1e-3 and 1e-2, would move a solution that was optimal away
#: from where it was), with a barrier parameter that starts small. `solver_options`
#: override them.
WARM_START = {"warm_start_init_point": "yes", "warm_start_bound_push": 1e-9,
              "warm_start_bound_frac": 1e-9, "warm_start_slack_bound_push": 1e-9,
              "warm_start_slack_bound_frac": 1e-9, "warm_start_mult_bound_push": 1e-9,
              "mu_init": 1e-6}
#: The same options for a cold start (IPOPT's defaults), set back after a warm one.
COLD_START = {"warm_start_init_point": "no", "mu_init": 0.1}


def run_solver(name: str, nlp: ShootingNLP, w0: np.ndarray, *, tol: float,
               constraint_tol: float, max_iter: int, options: dict | None,
               callback: Callable | None, hessian: str = "limited-memory") -> Run:
    """Run the solver ``name`` (``"ipopt"``, ``"trust-constr"`` or ``"slsqp"``); IPOPT
    with the ``hessian`` of `HESSIANS`."""
    return make_runner(name, nlp, tol=tol, constraint_tol=constraint_tol,
                       max_iter=max_iter, options=options, callback=callback,
                       hessian=hessian)(w0)


def make_runner(name: str, nlp: ShootingNLP, *, tol: float, constraint_tol: float,
                max_iter: int, options: dict | None, callback: Callable | None,
                hessian: str = "limited-memory") -> Callable[..., Run]:
    """The solver ``name`` built once for ``nlp``: ``runner(w0, warm=None) -> Run``,
    ``warm`` the multipliers ``(y, z_lower, z_upper)`` of a warm start (IPOPT's; the
    scipy solvers take the point ``w0`` only). IPOPT's problem and options are set up
    here, once: an option IPOPT refuses raises `ValueError` naming it."""
    if name == "ipopt":
        return _Ipopt(nlp, tol, constraint_tol, max_iter, options or {}, callback, hessian)

    def runner(w0: np.ndarray, warm: tuple | None = None) -> Run:
        return _scipy(name, nlp, w0, tol, constraint_tol, max_iter, options or {}, callback)
    return runner


class _Ipopt:
    """IPOPT through ``cyipopt``, its problem (sparsity, bounds, options) built once and
    solved from any start."""

    def __init__(self, nlp: ShootingNLP, tol, constraint_tol, max_iter, options, callback,
                 hessian) -> None:
        import cyipopt

        if hessian == "exact" and isinstance(nlp.sh, Collocation):
            colored = CollocationHessian(nlp.sh, nlp)
        else:
            cls = HESSIAN_CLASSES.get(hessian)
            colored = cls(nlp) if cls is not None else None
        self.state: dict[str, Any] = {"failure": None, "stopped": False, "history": []}
        state = self.state

        def guard(fn):
            def call(w, *args):
                try:
                    out = fn(w, *args)
                except SolverFailure as exc:
                    state["failure"] = str(exc)
                    raise cyipopt.CyIpoptEvaluationError(str(exc)) from exc
                return out
            return call

        class Adapter:
            objective = staticmethod(guard(nlp.objective))
            gradient = staticmethod(guard(nlp.gradient))
            constraints = staticmethod(guard(nlp.constraints))
            jacobian = staticmethod(guard(nlp.jacobian_values))

            @staticmethod
            def jacobianstructure():
                return nlp.rows, nlp.cols

            if colored is not None:
                hessianstructure = staticmethod(colored.structure)
                hessian = staticmethod(guard(colored.values))

            @staticmethod
            def intermediate(alg_mod, iter_count, obj_value, inf_pr, inf_du, *rest):
                state["history"].append((int(iter_count), float(obj_value), float(inf_pr),
                                         float(inf_du)))
                if callback is not None and iter_count > 0:
                    state["stopped"] = callback(int(iter_count), float(obj_value),
                                                float(inf_pr)) is True
                    return not state["stopped"]
                return True

        self.prob = cyipopt.Problem(n=nlp.n, m=nlp.m, problem_obj=Adapter(), lb=nlp.lb,
                                    ub=nlp.ub, cl=nlp.cl, cu=nlp.cu)
        self.options = options
        self.settings = {"print_level": 0, "sb": "yes", "tol": tol,
                         "constr_viol_tol": constraint_tol, "max_iter": max_iter,
                         "hessian_approximation": "limited-memory" if colored is None
                         else "exact", "mu_strategy": "adaptive"}
        self._set({**self.settings, **COLD_START})

    def _set(self, settings: dict) -> None:
        for key, value in {**settings, **self.options}.items():
            try:
                self.prob.add_option(key, value)
            except TypeError as exc:            # cyipopt's "Error while assigning an option"
                raise ValueError(
                    f"IPOPT refused the option {key!r} = {value!r}"
                    + (" of `solver_options`" if key in self.options else "")
                    + ": no option of that name, or a value of the wrong type or out of its "
                      "range (IPOPT's options: https://coin-or.github.io/Ipopt/OPTIONS.html)"
                ) from exc

    def __call__(self, w0: np.ndarray, warm: tuple | None = None) -> Run:
        self.state.update(failure=None, stopped=False, history=[])
        history = self.state["history"]
        self._set(COLD_START if warm is None else WARM_START)
        if warm is None:
            w, info = self.prob.solve(np.array(w0, dtype=float))
        else:
            y, z_lo, z_hi = (np.array(a, dtype=float) for a in warm)
            w, info = self.prob.solve(np.array(w0, dtype=float), lagrange=y, zl=z_lo,
                                      zu=z_hi)
        status = int(info["status"])
        msg = info["status_msg"]
        msg = msg.decode() if isinstance(msg, bytes) else str(msg)
        nit = history[-1][0] if history else 0
        failure = self.state["failure"] if status not in (0, 1) else None
        z_lo = np.asarray(info["mult_x_L"], dtype=float)
        z_hi = np.asarray(info["mult_x_U"], dtype=float)
        y = np.asarray(info["mult_g"], dtype=float)
        return Run(w=np.asarray(w, dtype=float), solver="ipopt", solver_status=status,
                   message=f"IPOPT: {msg}", nit=nit, failure=failure, history=history,
                   multipliers=(y, z_hi - z_lo), bound_multipliers=(z_lo, z_hi),
                   stopped=self.state["stopped"])


def _scipy(name, nlp: ShootingNLP, w0, tol, constraint_tol, max_iter, options, callback) -> Run:
    history: list = []
    last: dict[str, Any] = {"failure": None, "w": np.array(w0, dtype=float), "stopped": False}
    big = 1e20

    def guarded(fn):
        def call(w):
            try:
                out = fn(w)
            except SolverFailure as exc:
                last["failure"] = str(exc)
                raise
            last["w"] = np.array(w, dtype=float)
            return out
        return call

    fun, grad = guarded(nlp.objective), guarded(nlp.gradient)
    cons_f, jac_f = guarded(nlp.constraints), guarded(nlp.jacobian)
    lb = np.where(np.isfinite(nlp.lb), nlp.lb, -np.inf)
    ub = np.where(np.isfinite(nlp.ub), nlp.ub, np.inf)
    bounds = Bounds(lb, ub) if np.any(np.isfinite(lb) | np.isfinite(ub)) else None
    opts = {"maxiter": max_iter}
    if name == "trust-constr":
        opts.update({"gtol": tol, "xtol": 1e-14})
        constraints = [NonlinearConstraint(cons_f, nlp.cl, nlp.cu, jac=jac_f, hess=BFGS())]
    else:
        opts.update({"ftol": tol * 1e-6})
        eq = nlp.cl == nlp.cu
        lo = ~eq & (nlp.cl > -big)
        hi = ~eq & (nlp.cu < big)
        constraints = []
        if np.any(eq):
            constraints.append({"type": "eq", "fun": lambda w: (cons_f(w) - nlp.cl)[eq],
                                "jac": lambda w: jac_f(w)[eq].toarray()})
        if np.any(lo) or np.any(hi):
            def ineq(w):
                c = cons_f(w)
                return np.concatenate([(c - nlp.cl)[lo], (nlp.cu - c)[hi]])

            def ineq_jac(w):
                J = jac_f(w)
                return np.vstack([J[lo].toarray(), -J[hi].toarray()])
            constraints.append({"type": "ineq", "fun": ineq, "jac": ineq_jac})
    opts.update(options)
    count = [0]

    def cb(*args):
        count[0] += 1
        w = args[0] if not hasattr(args[0], "x") else args[0].x
        try:
            value = nlp.objective(w)
        except SolverFailure:
            value = np.nan
        history.append((count[0], float(value)))
        if callback is not None and callback(count[0], float(value), np.nan) is True:
            last["stopped"] = True
            raise StopIteration

    try:
        res = minimize(fun, np.array(w0, dtype=float), jac=grad,
                       method="trust-constr" if name == "trust-constr" else "SLSQP",
                       bounds=bounds, constraints=constraints, options=opts, callback=cb)
    except SolverFailure as exc:
        return Run(w=last["w"], solver=name, solver_status=-1,
                   message=f"{name}: stopped by a failed evaluation", nit=count[0],
                   failure=str(exc), history=history)
    return Run(w=np.asarray(res.x, dtype=float), solver=name, solver_status=int(res.status),
               message=f"{name}: {res.message}", nit=int(getattr(res, "nit", count[0])),
               history=history, stopped=last["stopped"])

