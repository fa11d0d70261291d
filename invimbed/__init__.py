"""invimbed: Bolza optimal-control problems solved by invariant imbedding.

Instead of a forward pass in ``t`` followed by a backward adjoint pass, invimbed
integrates initial-value problems in the depth ``p`` and returns, in one sweep, the
output, loss, adjoint, parameter gradient and depth gradient of every depth
(Corbett & Kangin, "Imbedding Deep Neural Networks", ICLR 2022).
"""

from ._adjoint import solve_adjoint as solve_adjoint
from ._controls import Constant as Constant
from ._controls import Control as Control
from ._controls import PiecewiseConstant as PiecewiseConstant
from ._derivatives import DerivativeOrderError as DerivativeOrderError
from ._derivatives import DerivativeProvider as DerivativeProvider
from ._derivatives import FiniteDifferences as FiniteDifferences
from ._imbedding import solve_imbedding as solve_imbedding
from ._problem import BolzaProblem as BolzaProblem
from ._results import ImbeddingResult as ImbeddingResult

__version__ = "0.1.0"

__all__ = [
    "BolzaProblem",
    "Constant",
    "Control",
    "DerivativeOrderError",
    "DerivativeProvider",
    "FiniteDifferences",
    "ImbeddingResult",
    "PiecewiseConstant",
    "__version__",
    "solve_adjoint",
    "solve_imbedding",
]
