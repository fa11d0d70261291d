"""invimbed: Bolza optimal-control problems solved by invariant imbedding.

Instead of a forward pass in ``t`` followed by a backward adjoint pass, invimbed
integrates initial-value problems in the depth ``p`` and returns, in one sweep, the
output, loss, adjoint, parameter gradient and depth gradient of every depth
(Corbett & Kangin, "Imbedding Deep Neural Networks", ICLR 2022).
"""

from ._adjoint import solve_adjoint as solve_adjoint
from ._check import DerivativeCheck as DerivativeCheck
from ._check import check_derivatives as check_derivatives
from ._controls import Constant as Constant
from ._controls import Control as Control
from ._controls import PiecewiseConstant as PiecewiseConstant
from ._derivatives import DerivativeOrderError as DerivativeOrderError
from ._derivatives import DerivativeProvider as DerivativeProvider
from ._derivatives import FiniteDifferences as FiniteDifferences
from ._derivatives.symbolic import SympyProvider as SympyProvider
from ._imbedding import solve_imbedding as solve_imbedding
from ._learning import MLPDynamics as MLPDynamics
from ._namespace import array_namespace as array_namespace
from ._learning import endpoint_loss as endpoint_loss
from ._learning import fit_endpoint_dynamics as fit_endpoint_dynamics
from ._optimal import optimality_residual as optimality_residual
from ._optimal import solve_optimal as solve_optimal
from ._optimize import DepthResult as DepthResult
from ._optimize import optimal_depth as optimal_depth
from ._optimize import optimize_control as optimize_control
from ._problem import BolzaProblem as BolzaProblem
from ._results import STATUS as STATUS
from ._results import ImbeddingResult as ImbeddingResult
from ._results import SolverWarning as SolverWarning
from ._symbolic import from_sympy as from_sympy

__version__ = "0.1.0"

__all__ = [
    "BolzaProblem",
    "Constant",
    "Control",
    "DepthResult",
    "DerivativeCheck",
    "DerivativeOrderError",
    "DerivativeProvider",
    "FiniteDifferences",
    "ImbeddingResult",
    "MLPDynamics",
    "PiecewiseConstant",
    "STATUS",
    "SolverWarning",
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
    "solve_adjoint",
    "solve_imbedding",
    "solve_optimal",
]
