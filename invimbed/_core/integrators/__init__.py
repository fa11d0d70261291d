"""Integrators in depth: scipy's solve_ivp, fixed-step Runge-Kutta, the paper's layers."""

from .fixed import FIXED_METHODS, integrate_fixed
from .common import DEFAULT_MAX_STEPS, NonFiniteError, Outcome
from .scipy_ivp import SCIPY_METHODS, integrate_scipy

#: Every method name a solver accepts: scipy's adaptive methods, then the fixed-step ones.
ALL_METHODS = SCIPY_METHODS + FIXED_METHODS

__all__ = ["ALL_METHODS", "DEFAULT_MAX_STEPS", "FIXED_METHODS", "NonFiniteError", "Outcome",
           "SCIPY_METHODS", "integrate_fixed", "integrate_scipy"]
