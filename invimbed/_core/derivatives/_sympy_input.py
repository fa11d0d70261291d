"""Reading the user's sympy input: symbols, expressions and derivative requests.

Only sympy objects are accepted: text is refused, never parsed (no ``sympify`` of a
string), so that building a problem cannot execute code.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .base import _WHICH


def import_sympy() -> Any:
    """Import sympy or raise an ImportError that says how to install it."""
    try:
        import sympy
    except ImportError as exc:  # pragma: no cover - exercised with sympy hidden
        raise ImportError(
            "symbolic derivatives need sympy, which is not installed: "
            "pip install invimbed[symbolic]  (or pip install sympy)"
        ) from exc
    return sympy


def import_numba() -> Any:
    """Import numba or raise an ImportError that says how to install it."""
    try:
        import numba
    except ImportError as exc:
        raise ImportError(
            "compile='numba' needs numba, which is not installed: "
            "pip install invimbed[numba]  (or pip install numba), or use compile=None"
        ) from exc
    return numba


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} (type {type(value).__name__})"


def _check_request(which: Any, order: Any, dth: Any, order_name: str) -> None:
    if which not in _WHICH:
        raise ValueError(f"`which` must be one of {_WHICH}, but got {which!r}")
    for name, v in ((order_name, order), ("dth", dth)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"`{name}` must be an integer >= 0, but got {_describe(v)}")
    if which == "T" and dth:
        raise ValueError("the terminal loss T(z) does not depend on theta: `dth` must be 0")


def _exponents(indices: Sequence[int], n: int) -> tuple[int, ...]:
    e = [0] * n
    for i in indices:
        e[i] += 1
    return tuple(e)


def _reject_text(value: Any, name: str) -> None:
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"`{name}` must be a sympy object, not a string ({value!r}): invimbed never "
            f"parses text; build it from symbols, e.g. t = sympy.Symbol('t')"
        )


def _symbol(sp: Any, value: Any, name: str) -> Any:
    _reject_text(value, name)
    if not isinstance(value, sp.Symbol):
        raise TypeError(f"`{name}` must be a sympy Symbol, but got {_describe(value)}")
    return value


def _symbols(sp: Any, values: Any, name: str) -> tuple[Any, ...]:
    _reject_text(values, name)
    if values is None:
        return ()
    if isinstance(values, sp.Symbol):
        values = [values]
    elif isinstance(values, sp.MatrixBase):
        values = list(values)
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"`{name}` must be a sequence of sympy Symbols, but got "
                        f"{_describe(values)}") from None
    return tuple(_symbol(sp, v, f"{name}[{i}]") for i, v in enumerate(items))


def _expression(sp: Any, value: Any, name: str) -> Any:
    _reject_text(value, name)
    if callable(value) and not isinstance(value, sp.Basic):
        raise TypeError(f"`{name}` must be a sympy expression, but got a callable "
                        f"{_describe(value)}; for Python functions use invimbed.BolzaProblem")
    try:
        expr = sp.sympify(value, strict=True)
    except (sp.SympifyError, TypeError, ValueError):
        raise TypeError(f"`{name}` must be a sympy expression or a number, but got "
                        f"{_describe(value)}") from None
    if not isinstance(expr, sp.Expr):
        raise TypeError(f"`{name}` must be a scalar sympy expression, but got "
                        f"{_describe(value)}")
    return expr


def _expressions(sp: Any, values: Any, name: str, n: int) -> list[Any]:
    _reject_text(values, name)
    if isinstance(values, sp.MatrixBase):
        items = list(values)
    elif isinstance(values, sp.Basic) or np.isscalar(values):
        items = [values]
    else:
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"`{name}` must be a sequence of sympy expressions, but got "
                            f"{_describe(values)}") from None
    if len(items) != n:
        raise ValueError(f"`{name}` must hold N = {n} expressions (one per state symbol in "
                         f"`z`), but holds {len(items)}")
    return [_expression(sp, v, f"{name}[{i}]") for i, v in enumerate(items)]


def _check_symbols(sp: Any, expr: Any, name: str, allowed: set, what: str) -> None:
    from sympy.core.function import AppliedUndef

    extra = expr.free_symbols - allowed
    if extra:
        names = ", ".join(sorted(str(s) for s in extra))
        raise ValueError(f"`{name}` may depend on {what} only, but it also uses {names}; "
                         f"substitute numbers for parameters (expr.subs(...))")
    undef = expr.atoms(AppliedUndef)
    if undef:
        raise ValueError(f"`{name}` contains undefined functions "
                         f"{', '.join(sorted(map(str, undef)))}: give explicit expressions")


def numpy_printer(sp: Any, qualified: bool = False) -> Any:
    """The printer of the generated numpy code: lambdify's settings, but strict (a function
    numpy does not have is an error when the code is generated, not a NameError when it
    runs). ``qualified`` prints module names (``numpy.sin``, ``math.erf``)."""
    from sympy.printing.numpy import NumPyPrinter

    return NumPyPrinter({"fully_qualified_modules": qualified, "inline": True,
                         "allow_unknown_functions": False, "user_functions": {},
                         "strict": True})


def _check_printable(sp: Any, named: list[tuple[str, Any]]) -> None:
    """A ValueError naming the function of an expression of ``named`` (``(name, expr)``
    pairs) that cannot become numpy code."""
    printer = numpy_printer(sp, qualified=True)

    def printable(e: Any) -> bool:
        try:               # a function numpy lacks is printed from `math`: scalars only
            return "math." not in printer.doprint(e)
        except Exception:  # sympy's PrintMethodNotImplementedError and friends
            return False

    for name, expr in named:
        if not printable(expr):
            _refuse(sp, expr, name, printable)


def _refuse(sp: Any, expr: Any, name: str, printable: Any) -> None:
    bad = [type(fn).__name__ for fn in expr.atoms(sp.Function) if not printable(fn)]
    names = ", ".join(sorted(set(bad))) or "one of its functions"
    raise ValueError(f"`{name}` uses {names}, which invimbed cannot evaluate (no numpy "
                     f"equivalent); supported are the elementary functions and Abs, Max, "
                     f"Min, Piecewise, Heaviside, sign")


def real_variables(sp: Any, symbols: Sequence[Any], exprs: Sequence[Any]) -> tuple | None:
    """``(to_real, back)`` symbol maps where an expression holds Abs or sign (whose
    derivatives are sign and zero only for real variables, not ``re``/``im`` terms), else
    None: see `diff_almost_everywhere`."""
    if not any(e.has(sp.Abs, sp.sign) for e in exprs):
        return None
    real = {s: sp.Dummy(s.name, real=True) for s in symbols}
    return real, {v: k for k, v in real.items()}


def diff_almost_everywhere(sp: Any, expr: Any, var: Any, real: tuple | None) -> Any:
    """``d expr / d var`` almost everywhere: the derivative of a step (a Dirac delta) is
    zero, and with ``real`` (`real_variables`) the variables are real."""
    if expr == 0:
        return sp.S.Zero
    if real is None:
        out = expr.diff(var)
    else:
        to, back = real
        out = expr.xreplace(to).diff(to[var]).xreplace(back)
    return out.replace(sp.DiracDelta, lambda *args: sp.S.Zero) if out.has(sp.DiracDelta) else out
