"""Closures of the nested-Jacobian hierarchy (docs/theory.md, "The closures")."""

from .base import Closure, Layout
from .jet import JetClosure
from .stencil import StencilClosure

CLOSURES = ("jet", "stencil", "crop")

__all__ = ["CLOSURES", "Closure", "JetClosure", "Layout", "StencilClosure"]
