"""Derivative providers: one normalised interface, whatever the source."""

from .base import DerivativeOrderError, DerivativeProvider, derivative_name, parse_key
from .finite_difference import FiniteDifferences

__all__ = ["DerivativeOrderError", "DerivativeProvider", "FiniteDifferences",
           "derivative_name", "parse_key"]
