"""Integrators in depth: scipy's solve_ivp, fixed-step Runge-Kutta, the paper's layers."""

from .fixed import FIXED_METHODS, integrate_fixed
from .common import NonFiniteError, Outcome
from .scipy_ivp import SCIPY_METHODS, integrate_scipy

__all__ = ["FIXED_METHODS", "NonFiniteError", "Outcome", "SCIPY_METHODS", "integrate_fixed",
           "integrate_scipy"]
