"""The solver keywords of the optimisation drivers, split between the two solvers.

`optimize_control` and `optimal_depth` (docs/optimization.md) take the keyword arguments
of the solvers they call: the exact solve of the classical adjoint method
(`solve_adjoint`) and, for an imbedding gradient, the sweep (`solve_imbedding`).
`split_solve_kwargs` sends each keyword where it applies and names those that only the
sweep uses, so that a driver can say when a setting was not used. The settings objects
(``accuracy=``, ``integrator=``, ``closure=Closure(...)``: `invimbed.Accuracy`...) are read
into the keywords they stand for first (`settings_keywords`).
"""

from __future__ import annotations

from typing import Any

from .._core.runtime.backends import BACKENDS, backends_for
from .._core.integrators import ALL_METHODS, SCIPY_METHODS
from .._core.setup.settings import Accuracy, Closure, Integrator, settle
from .._core.inputs.validation import check_options

#: Solver keywords passed to both the exact solve (`solve_adjoint`) and the sweep.
SHARED_OPTIONS = ("rtol", "atol", "first_step", "max_step", "max_steps", "backend")
#: Solver keywords of the exact solve only.
EXACT_OPTIONS = ("strategy",)
#: Solver keywords of the imbedding sweep only (`solve_imbedding`).
SWEEP_OPTIONS = ("closure", "order", "estimate_error", "difference", "delta", "step",
                 "min_step")


class SolverFailure(RuntimeError):
    """A solve inside the objective did not succeed (turned into ``success=False``)."""


def split_solve_kwargs(kwargs: dict, caller: str, method_key: str
                       ) -> tuple[dict, dict, list[str]]:
    """Split a driver's solver keywords into those of `solve_adjoint` and of
    `solve_imbedding`.

    Returns ``(exact, sweep, sweep_only)``: the keywords of the exact solve, those of the
    sweep, and the names of the given settings that only the sweep uses (an integrator
    that `solve_adjoint` does not run, such as a fixed-step ``"rk4"``, is one of them;
    the exact solve then keeps its default ``"RK45"``). Unknown keywords raise
    ``TypeError`` naming them.
    """
    kwargs = settings_keywords(kwargs, caller, method_key)
    check_options(kwargs, (method_key,) + SHARED_OPTIONS + EXACT_OPTIONS + SWEEP_OPTIONS,
                  caller)
    exact: dict[str, Any] = {}
    sweep: dict[str, Any] = {}
    sweep_only: list[str] = []
    for key, value in kwargs.items():
        if key == method_key:
            sweep["method"] = value
            if isinstance(value, str) and value not in SCIPY_METHODS and value in ALL_METHODS:
                sweep_only.append(f"{key}={value!r}")
            else:
                exact["method"] = value
        elif key == "backend":
            sweep[key] = value
            if value in BACKENDS and value not in backends_for("ensemble"):   # sweep only
                sweep_only.append(f"backend={value!r}")
            else:                               # solve_adjoint validates it
                exact[key] = value
        elif key in SHARED_OPTIONS:
            exact[key] = sweep[key] = value
        elif key in EXACT_OPTIONS:
            exact[key] = value
        else:
            sweep[key] = value
            sweep_only.append(key)
    return exact, sweep, sweep_only


#: Fields of the settings objects a driver does not take (they are the sweep's own:
#: `solve_imbedding` with ``tol`` raises the order, which a gradient inside an
#: optimisation does not).
_UNUSED = {Accuracy: ("tol", "max_order", "ratio_test", "fallback"), Closure: (),
           Integrator: ()}


#: The default of a keyword a driver was not given (any value given differs from it).
_ABSENT = object()


def settings_keywords(kwargs: dict, caller: str, method_key: str) -> dict:
    """``kwargs`` with the settings objects among them (``accuracy``, ``integrator``, a
    `Closure` as ``closure``) read into the keywords their fields stand for (``kind`` is
    ``closure``, ``method`` is ``method_key``); a keyword given beside an object that sets
    its field differently is a ValueError naming both (`settle`)."""
    out = dict(kwargs)
    for cls, argument in ((Accuracy, "accuracy"), (Integrator, "integrator"),
                          (Closure, "closure")):
        given = out.get(argument)
        if given is None or (cls is Closure and not isinstance(given, Closure)):
            continue
        del out[argument]
        names = {f: ("closure" if f == "kind" else method_key if f == "method" else f)
                 for f in cls.__dataclass_fields__}
        obj = settle(cls, given, {f: (out[k], _ABSENT) for f, k in names.items() if k in out},
                     argument=argument, unused=_UNUSED[cls], caller=caller)
        out.update({names[f]: v for f, v in obj.given_fields().items()})
    return out
