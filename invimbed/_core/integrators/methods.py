"""The registry of integration methods: every ``method=`` a solver accepts, one object each.

A `Method` knows its kind, its tableau (`tableau.TABLEAUX`, explicit methods) and its
scipy solver class (adaptive methods), and integrates through one contract,
`Method.integrate` (``dy/dp = rhs(p, y, piece)`` from ``q`` down to every requested
depth, an `Outcome`):

* ``"adaptive"``: scipy's ``OdeSolver`` classes, stepped by `scipy_ivp.integrate_scipy`;
  ``step`` is their ``max_step``;
* ``"fixed"``: a tableau on a grid of steps not longer than ``step``
  (`fixed.integrate_fixed`); of the options only the step budget ``max_steps`` applies;
* ``"layers"``: ``method="disc"``, the paper's layer recursion, eqs. (14) and (15).

`method_of` looks a name up, with one error for a name that is not registered;
`integrate` is the one dispatch every sweep goes through.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from ..inputs.validation import STEP_BUDGET, check_choice
from .common import Outcome
from .fixed import integrate_fixed
from .scipy_ivp import SOLVERS, integrate_scipy
from .tableau import TABLEAUX, ButcherTableau

KINDS = ("adaptive", "fixed", "layers")


@dataclass(frozen=True)
class Method:
    """One integration method (module docstring)."""

    name: str
    kind: str
    tableau: ButcherTableau | None = None
    solver: type | None = None      # scipy's OdeSolver class ("adaptive")

    @property
    def ensemble(self) -> bool:
        """Whether the ensemble (`ensemble.integrate_rows`) and the compiled adaptive
        kernels run it: an embedded pair with a continuous extension."""
        tab = self.tableau
        return self.kind == "adaptive" and tab is not None and tab.embedded and tab.P is not None

    def integrate(self, rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                  breakpoints: np.ndarray, piece_of: Callable[[float, float], Any], *,
                  rtol: float, atol: float, step: float | None = None,
                  disc_step: Callable | None = None, ys: Any = None,
                  options: dict | None = None) -> Outcome:
        """Integrate ``dy/dp = rhs(p, y, piece)`` from ``q`` to ``depths_desc[-1]``,
        restarting at ``breakpoints`` (``piece_of(a, b)`` is the piece of ``(b, a)``).

        ``options`` are the integrator's keyword options: all of them for an adaptive
        method, with ``step`` as ``max_step`` unless they give one; only ``max_steps``
        for a fixed-step one. ``ys`` receives ``ys[i] = y`` at depth ``i``."""
        options = {} if options is None else options
        if self.kind == "adaptive":
            opts = dict(options)
            if step is not None:
                opts.setdefault("max_step", float(step))
            return integrate_scipy(rhs, y0, q, depths_desc, breakpoints, piece_of,
                                   method=self.name, rtol=rtol, atol=atol, ys=ys, **opts)
        steps = {k: v for k, v in options.items() if k == STEP_BUDGET}
        return integrate_fixed(rhs, y0, q, depths_desc, breakpoints, piece_of,
                               method=self.name, step=step, disc_step=disc_step, ys=ys,
                               **steps)


#: Every method, by name: scipy's adaptive methods, then the fixed-step ones.
METHODS = MappingProxyType({m.name: m for m in (
    *(Method(name, "adaptive", TABLEAUX.get(name), solver) for name, solver in SOLVERS.items()),
    Method("euler", "fixed", TABLEAUX["euler"]), Method("midpoint", "fixed", TABLEAUX["midpoint"]),
    Method("rk4", "fixed", TABLEAUX["rk4"]), Method("disc", "layers"),
)})

SCIPY_METHODS = tuple(n for n, m in METHODS.items() if m.kind == "adaptive")
FIXED_METHODS = tuple(n for n, m in METHODS.items() if m.kind != "adaptive")
#: Every method name a solver accepts.
ALL_METHODS = tuple(METHODS)


def method_of(name: Any, allowed: tuple[str, ...] = ALL_METHODS) -> Method:
    """The registered method ``name``, or a ValueError naming ``method`` and the choices
    (``allowed``: the ones the caller runs)."""
    return METHODS[check_choice(name, "method", allowed)]


def integrate(method: str, rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
              breakpoints: np.ndarray, piece_of: Callable[[float, float], Any], *,
              rtol: float, atol: float, step: float | None = None,
              disc_step: Callable | None = None, ys: Any = None,
              options: dict | None = None) -> Outcome:
    """`Method.integrate` of the method named ``method``: the one dispatch of the sweeps."""
    return method_of(method).integrate(rhs, y0, q, depths_desc, breakpoints, piece_of,
                                       rtol=rtol, atol=atol, step=step, disc_step=disc_step,
                                       ys=ys, options=options)
