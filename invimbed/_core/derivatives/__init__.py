"""Derivative providers: one normalised interface, whatever the source."""

from .base import DerivativeOrderError, DerivativeProvider, parse_key
from .finite_difference import FiniteDifferences

__all__ = ["DerivativeOrderError", "DerivativeProvider", "FiniteDifferences", "parse_key"]
