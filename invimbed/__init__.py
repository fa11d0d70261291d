"""invimbed: Bolza optimal-control problems solved by invariant imbedding.

Instead of a forward pass in ``t`` followed by a backward adjoint pass, invimbed
integrates initial-value problems in the depth ``p`` and returns, in one sweep, the
output, loss, adjoint, parameter gradient and depth gradient of every depth
(Corbett & Kangin, "Imbedding Deep Neural Networks", ICLR 2022).
"""

from . import _backends  # noqa: F401  registers the backends (invimbed._core.runtime.backends)
from ._backends._numba_functions import BackendCompileError as BackendCompileError
from ._core.reference.adjoint import solve_adjoint as solve_adjoint
from ._core.problem.check import DerivativeCheck as DerivativeCheck
from ._core.problem.check import check_derivatives as check_derivatives
from ._core.problem.open_loop import Constant as Constant
from ._core.problem.open_loop import Control as Control
from ._core.problem.open_loop import OpenLoopControl as OpenLoopControl
from ._core.problem.open_loop import PiecewiseConstant as PiecewiseConstant
from ._core.sweep.dense import DenseSolution as DenseSolution
from ._core.derivatives import DerivativeOrderError as DerivativeOrderError
from ._core.derivatives import DerivativeProvider as DerivativeProvider
from ._core.derivatives import FiniteDifferences as FiniteDifferences
from ._core.derivatives.symbolic import SympyProvider as SympyProvider
from ._core.sweep.imbedding import solve_imbedding as solve_imbedding
from ._core.setup.settings import Accuracy as Accuracy
from ._core.setup.settings import Closure as Closure
from ._core.setup.settings import Integrator as Integrator
from ._learning.model import MLPDynamics as MLPDynamics
from ._core.runtime.namespace import array_namespace as array_namespace
from ._learning.regression import endpoint_loss as endpoint_loss
from ._learning.training import fit_endpoint_dynamics as fit_endpoint_dynamics
from ._control.residual import optimality_residual as optimality_residual
from ._control.optimal import solve_optimal as solve_optimal
from ._control.policy import SweepFeedback as SweepFeedback
from ._control.simulate import SimulationResult as SimulationResult
from ._control.simulate import simulate as simulate
from ._control.closed_loop import OptimalityError as OptimalityError
from ._control.depth import DepthResult as DepthResult
from ._control.depth import optimal_depth as optimal_depth
from ._control.optimize import optimize_control as optimize_control
from ._control.ocp.solve import OCPSolver as OCPSolver
from ._control.ocp.solve import solve_ocp as solve_ocp
from ._core.problem.bolza import BolzaProblem as BolzaProblem
from ._core.results.families import ControlResult as ControlResult
from ._core.results.families import FitResult as FitResult
from ._core.results.families import OCPResult as OCPResult
from ._core.results.results import FeedbackResult as FeedbackResult
from ._core.results.results import ImbeddingResult as ImbeddingResult
from ._core.results.results import Result as Result
from ._core.results.results import SolverWarning as SolverWarning
from ._core.results.status import Status as Status
from ._core.problem.sympy_problem import from_sympy as from_sympy

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """The deprecated aliases of `Status`: ``STATUS`` (``{code: message}``) and
    ``OCP_STATUS`` (`solve_ocp`'s codes, now `OCPResult.STATUS_CODES`), with a
    DeprecationWarning (docs/results-and-status.md)."""
    from ._core.results.status import deprecated_alias, status_table

    if name == "STATUS":
        return deprecated_alias(name, status_table())
    if name == "OCP_STATUS":
        return deprecated_alias(name, {int(k): v for k, v in OCPResult.STATUS_CODES.items()})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"STATUS", "OCP_STATUS"})


__all__ = [
    "Accuracy",
    "BackendCompileError",
    "BolzaProblem",
    "Closure",
    "Constant",
    "Control",
    "ControlResult",
    "DenseSolution",
    "DepthResult",
    "DerivativeCheck",
    "DerivativeOrderError",
    "DerivativeProvider",
    "FeedbackResult",
    "FiniteDifferences",
    "FitResult",
    "ImbeddingResult",
    "Integrator",
    "MLPDynamics",
    "OCPResult",
    "OCPSolver",
    "OpenLoopControl",
    "OptimalityError",
    "PiecewiseConstant",
    "Result",
    "SimulationResult",
    "SolverWarning",
    "Status",
    "SweepFeedback",
    "SympyProvider",
    "__version__",
    "array_namespace",
    "check_derivatives",
    "endpoint_loss",
    "fit_endpoint_dynamics",
    "from_sympy",
    "optimal_depth",
    "optimality_residual",
    "optimize_control",
    "simulate",
    "solve_adjoint",
    "solve_imbedding",
    "solve_ocp",
    "solve_optimal",
]
