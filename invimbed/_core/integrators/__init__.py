"""Integrators in depth: scipy's solve_ivp, fixed-step Runge-Kutta, the paper's layers.

`tableau` keeps every explicit tableau, `methods` the registry of methods and the one
dispatch (`integrate`) every sweep goes through."""

from .common import DEFAULT_MAX_STEPS, NonFiniteError, Outcome
from .fixed import integrate_fixed
from .methods import ALL_METHODS, FIXED_METHODS, METHODS, SCIPY_METHODS, integrate, method_of
from .scipy_ivp import integrate_scipy

__all__ = ["ALL_METHODS", "DEFAULT_MAX_STEPS", "FIXED_METHODS", "METHODS", "NonFiniteError",
           "Outcome", "SCIPY_METHODS", "integrate", "integrate_fixed", "integrate_scipy",
           "method_of"]
