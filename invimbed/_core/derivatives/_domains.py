"""The domains of the functions a trace records, kept where sympy's simplification drops
them.

sympy simplifies while a function is traced: ``0.0 * sqrt(2 - z)`` is ``0`` and
``log(exp(z))`` is ``z``, so the traced expression is finite where the function itself
is NaN (``sqrt`` of a negative number). A traced value carries the domain conditions of
the functions it was computed from (`condition`: ``sqrt(a)`` needs ``a >= 0``,
``log(a)`` needs ``a > 0``, ...); `guard` multiplies an output whose expression lost one
of those functions by ``Piecewise((1, conditions), (nan, True))``, so that the output, and
its derivatives in the variables it depends on, are NaN outside the domain, as the
function is. Where the function is still in the expression it propagates its own NaN and
nothing is added.
"""

from __future__ import annotations

from typing import Any

#: The sympy name of a function with a restricted real domain -> its condition on the
#: argument ``a`` (a function of sympy and ``a``).
_DOMAIN = {
    "log": lambda sp, a: a > 0,
    "log2": lambda sp, a: a > 0,
    "log10": lambda sp, a: a > 0,
    "log1p": lambda sp, a: a > -1,
    "asin": lambda sp, a: sp.And(a >= -1, a <= 1),
    "acos": lambda sp, a: sp.And(a >= -1, a <= 1),
    "atanh": lambda sp, a: sp.And(a > -1, a < 1),
    "acosh": lambda sp, a: a >= 1,
}

#: No domain conditions.
NONE: frozenset = frozenset()


def condition(sp: Any, name: str, atom: Any, arg: Any, exponent: Any = None) -> frozenset:
    """The domain condition of ``atom`` (the function ``name`` applied to ``arg``; for
    ``name="pow"`` the power ``arg ** exponent``), as a set of one ``(atom, condition)``
    pair; empty where the domain is the real line or ``arg`` is a number."""
    if not getattr(arg, "free_symbols", None):
        return NONE
    if name == "pow":
        if exponent is None or not exponent.is_number:
            return NONE
        value = float(exponent)
        if value == int(value):         # z ** 2.0 is defined for every z, as z ** 2
            return NONE
        cond = arg >= 0 if value > 0 else arg > 0       # 0 ** -0.5 is inf
    elif name in _DOMAIN:
        cond = _DOMAIN[name](sp, arg)
    else:
        return NONE
    if cond is sp.true:
        return NONE
    return frozenset({(atom, cond)})


def guard(sp: Any, expr: Any, conditions: frozenset) -> Any:
    """``expr`` made NaN where a condition of ``conditions`` (``(atom, condition)``
    pairs) whose function ``expr`` no longer holds fails (see the module docstring)."""
    if not conditions:
        return expr
    lost = [c for atom, c in conditions if not expr.has(atom)]
    if not lost:
        return expr
    cond = sp.And(*sorted(set(lost), key=sp.default_sort_key))
    if cond is sp.true:
        return expr
    if expr == 0:
        return sp.Piecewise((sp.S.Zero, cond), (sp.nan, True))
    return expr * sp.Piecewise((sp.S.One, cond), (sp.nan, True))
