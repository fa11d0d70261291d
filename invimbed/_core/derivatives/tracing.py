"""Exact derivatives of plain numpy (or numba) functions, traced into sympy.

A problem given as Python callables without derivatives is traced once, at its first
solve: its ``dynamics``, ``running_loss`` and ``terminal_loss`` are called with arrays
whose entries are `Traced` scalars, each wrapping a sympy expression in the problem's
variables, so that arithmetic, numpy's ufuncs on object arrays (``np.sin``, ``np.exp``,
...), indexing, ``np.stack``, ``np.array([...])``, ``np.concatenate``, ``@`` and sums
build the expressions of ``f``, ``R`` and ``T``. They go to the symbolic provider
(`invimbed._core.derivatives.traced.TracedProvider`, a `SympyProvider`), which
differentiates them and generates numpy and numba code (docs/derivatives.md).

How a function is called
------------------------
* Per-sample ``numba.njit`` functions are traced through their Python source
  (``py_func``). Every function traced (and the helpers it calls from its module, numba
  functions among them) sees ``numpy`` and ``math`` through proxies (`_NUMPY`,
  `_MATH`): array creation (``np.empty(N)``, ``np.zeros``, ``np.array(..., dtype=...)``)
  makes object arrays that can hold traced entries, ``math.sin`` traces.
* Anything that needs a value raises `TraceError`: comparisons, ``bool``, ``float``,
  ``int``, ``%``, ``//`` (``if z[0] > 0``, ``np.maximum``, ``np.where``, ``abs`` is
  allowed). Tracing then fails, and the problem falls back to finite differences,
  saying why (the reason of ``traced.trace_problem``).
* Nothing is trusted unverified: the traced expressions are evaluated at random points
  at two times and compared with the problem's own functions (`verify`); a trace that
  disagrees anywhere by more than `AGREEMENT` (relative to the largest value of its
  output) is refused (`invimbed._core.derivatives.traced`). A trace is also refused beyond `MAX_OPERATIONS` operations (a
  large network: finite differences or hand-written derivatives serve it better).
* ``TracedProvider.still_matches`` re-evaluates the functions at one stored point at each
  solve, so that a function whose values changed since it was traced (a closure over
  an array the user modified) is traced again.
"""

from __future__ import annotations

import math
import types
from typing import Any, Callable

import numpy as np

from . import _domains
from ._sympy_input import import_sympy

#: Largest number of traced operations (sympy nodes built) before tracing gives up.
MAX_OPERATIONS = 20000
#: Largest difference between a trace and the function, relative to the largest
#: absolute value of the function's output at the test points.
AGREEMENT = 1e-12


class TraceError(Exception):
    """A function needs a value (or is too large) and cannot be traced."""


_STATE = {"left": MAX_OPERATIONS, "sp": None}


def _sympy() -> Any:
    sp = _STATE["sp"]
    if sp is None:
        sp = _STATE["sp"] = import_sympy()
    return sp


def _value_needed(what: str) -> Callable:
    def refuse(self: Any, *args: Any) -> Any:
        raise TraceError(f"the function {what} of a traced value (value-dependent code)")
    return refuse


class Traced:
    """A scalar of a trace: a sympy expression ``e`` in ``t``, ``z`` and ``theta``, and
    ``d`` the domain conditions of the functions it was computed from
    (`invimbed._core.derivatives._domains`)."""

    __slots__ = ("e", "d")

    def __init__(self, e: Any, d: frozenset = _domains.NONE) -> None:
        left = _STATE["left"] - 1
        if left < 0:
            raise TraceError(f"more than {MAX_OPERATIONS} operations")
        _STATE["left"] = left
        self.e = e
        self.d = d

    def __repr__(self) -> str:
        return f"Traced({self.e})"

    # -- arithmetic ------------------------------------------------------------------
    def __add__(self, o): return _binary(self, o, lambda a, b: a + b)
    def __radd__(self, o): return _binary(self, o, lambda a, b: b + a)
    def __sub__(self, o): return _binary(self, o, lambda a, b: a - b)
    def __rsub__(self, o): return _binary(self, o, lambda a, b: b - a)
    def __mul__(self, o): return _binary(self, o, lambda a, b: a * b)
    def __rmul__(self, o): return _binary(self, o, lambda a, b: b * a)
    def __truediv__(self, o): return _binary(self, o, lambda a, b: a / b)
    def __rtruediv__(self, o): return _binary(self, o, lambda a, b: b / a)
    def __pow__(self, o): return _binary(self, o, lambda a, b: a ** b, "pow")
    def __rpow__(self, o): return _binary(self, o, lambda a, b: b ** a)
    def __neg__(self): return Traced(-self.e, self.d)
    def __pos__(self): return self
    def __abs__(self): return Traced(_sympy().Abs(self.e), self.d)

    __lt__ = _value_needed("compares")
    __le__ = _value_needed("compares")
    __gt__ = _value_needed("compares")
    __ge__ = _value_needed("compares")
    __eq__ = _value_needed("compares")
    __ne__ = _value_needed("compares")
    __bool__ = _value_needed("takes the truth")
    __float__ = _value_needed("converts to float")
    __int__ = _value_needed("converts to int")
    __index__ = _value_needed("indexes with")
    __complex__ = _value_needed("converts to complex")
    __mod__ = __rmod__ = _value_needed("takes %")
    __floordiv__ = __rfloordiv__ = _value_needed("takes //")
    __round__ = __floor__ = __ceil__ = __trunc__ = _value_needed("rounds")
    __hash__ = None  # type: ignore[assignment]

    # -- numpy's object loops call these methods (np.sin(a) -> a.sin()) --------------
    def sin(self): return _unary(self, "sin")
    def cos(self): return _unary(self, "cos")
    def tan(self): return _unary(self, "tan")
    def arcsin(self): return _unary(self, "asin")
    def arccos(self): return _unary(self, "acos")
    def arctan(self): return _unary(self, "atan")
    def sinh(self): return _unary(self, "sinh")
    def cosh(self): return _unary(self, "cosh")
    def tanh(self): return _unary(self, "tanh")
    def arcsinh(self): return _unary(self, "asinh")
    def arccosh(self): return _unary(self, "acosh")
    def arctanh(self): return _unary(self, "atanh")
    def exp(self): return _unary(self, "exp")
    def log(self): return _unary(self, "log")
    def sqrt(self): return _unary(self, "sqrt")
    def exp2(self): return Traced(2 ** self.e, self.d)
    def expm1(self): return Traced(_cfunctions().expm1(self.e), self.d)
    def log1p(self): return _unary(self, "log1p", _cfunctions())
    def log2(self): return _unary(self, "log2", _cfunctions())
    def log10(self): return _unary(self, "log10", _cfunctions())
    def arctan2(self, o): return _binary(self, o, lambda a, b: _sympy().atan2(a, b))
    def hypot(self, o): return _binary(self, o, lambda a, b: _cfunctions().hypot(a, b))
    def conjugate(self): return self
    def deg2rad(self): return Traced(self.e * _sympy().pi / 180, self.d)
    radians = deg2rad

    #: `invimbed.array_namespace` of an array of traced values: the numpy proxy
    __invimbed_namespace__: Any = None


def _cfunctions() -> Any:
    from sympy.codegen import cfunctions

    return cfunctions


def _operand(o: Any) -> Any:
    if isinstance(o, Traced):
        return o.e
    if isinstance(o, (bool, np.bool_)):
        raise TraceError("the function mixes a boolean into arithmetic")
    if isinstance(o, (int, float, np.integer, np.floating)):
        return _sympy().sympify(o)
    return None


def _binary(a: Traced, o: Any, op: Callable, name: str = "") -> Any:
    b = _operand(o)
    if b is None:
        return NotImplemented       # an ndarray: numpy broadcasts and comes back per entry
    d = a.d | o.d if isinstance(o, Traced) and o.d else a.d
    e = op(a.e, b)
    if name == "pow" and e.is_Pow:  # a ** 0.5: the domain of a root
        d = d | _domains.condition(_sympy(), "pow", e, e.base, e.exp)
    return Traced(e, d)


def _unary(a: Traced, name: str, module: Any = None) -> Traced:
    sp = _sympy()
    e = getattr(sp if module is None else module, name)(a.e)
    if name == "sqrt":
        return Traced(e, a.d | _domains.condition(sp, "pow", e, a.e, sp.S.Half))
    return Traced(e, a.d | _domains.condition(sp, name, e, a.e))


# -- numpy and math, as the traced functions see them ---------------------------------------
def _lift(value: Any) -> Any:
    """A constant fill value as a traced scalar (so that ``np.sin`` of it traces too)."""
    return Traced(_sympy().sympify(float(value)))


def _filled(shape: Any, value: Any) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = value if isinstance(value, Traced) else _lift(value)
    return out


def _wants_float(dtype: Any) -> bool:
    return dtype is None or np.dtype(dtype).kind in "fc"


class _NumpyProxy(types.ModuleType):
    """``numpy`` for traced code: array creation makes object arrays of traced values."""

    def __init__(self) -> None:
        super().__init__("numpy")

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=None, *a, **k):
        if not _wants_float(dtype):
            return np.empty(shape, dtype, *a, **k)
        return _filled(shape, Traced(_sympy().nan))  # read before written: refused later

    @staticmethod
    def zeros(shape, dtype=None, *a, **k):
        return _filled(shape, 0.0) if _wants_float(dtype) else np.zeros(shape, dtype, *a, **k)

    @staticmethod
    def ones(shape, dtype=None, *a, **k):
        return _filled(shape, 1.0) if _wants_float(dtype) else np.ones(shape, dtype, *a, **k)

    @staticmethod
    def full(shape, fill_value, dtype=None, *a, **k):
        if not _wants_float(dtype):
            return np.full(shape, fill_value, dtype, *a, **k)
        return _filled(shape, fill_value)

    @staticmethod
    def empty_like(a, dtype=None, *args, **k):
        return _NumpyProxy.empty(np.shape(a), dtype)

    @staticmethod
    def zeros_like(a, dtype=None, *args, **k):
        return _NumpyProxy.zeros(np.shape(a), dtype)

    @staticmethod
    def ones_like(a, dtype=None, *args, **k):
        return _NumpyProxy.ones(np.shape(a), dtype)

    @staticmethod
    def full_like(a, fill_value, dtype=None, *args, **k):
        return _NumpyProxy.full(np.shape(a), fill_value, dtype)

    @staticmethod
    def array(obj, dtype=None, *a, **k):
        try:
            return np.array(obj, dtype, *a, **k)
        except TraceError:   # a float dtype asked of traced entries
            return np.array(obj, object)

    @staticmethod
    def asarray(obj, dtype=None, *a, **k):
        try:
            return np.asarray(obj, dtype, *a, **k)
        except TraceError:
            return np.asarray(obj, object)

    @staticmethod
    def ascontiguousarray(obj, dtype=None, *a, **k):
        try:
            return np.ascontiguousarray(obj, dtype, *a, **k)
        except TraceError:
            return np.ascontiguousarray(obj, object)


_NUMPY = _NumpyProxy()
Traced.__invimbed_namespace__ = _NUMPY


def _math_unary(method: str) -> Callable:
    real = getattr(math, {"arcsin": "asin", "arccos": "acos", "arctan": "atan",
                          "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh"}
                   .get(method, method), None)

    def fn(x: Any) -> Any:
        if isinstance(x, Traced):
            return getattr(x, method)()
        return real(x)
    return fn


def _math_log(x: Any, base: Any = None) -> Any:
    if not isinstance(x, Traced) and not isinstance(base, Traced):
        return math.log(x) if base is None else math.log(x, base)
    out = x.log() if isinstance(x, Traced) else Traced(_sympy().log(_operand(x)))
    return out if base is None else out / _math_log(base)


_MATH_NAMES = {"sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos",
               "atan": "arctan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
               "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "exp": "exp",
               "expm1": "expm1", "log1p": "log1p", "log2": "log2", "log10": "log10",
               "sqrt": "sqrt", "fabs": "__abs__", "radians": "deg2rad"}


class _MathProxy(types.ModuleType):
    """``math`` for traced code."""

    def __init__(self) -> None:
        super().__init__("math")
        for name, method in _MATH_NAMES.items():
            setattr(self, name, _math_unary(method))
        self.log = _math_log
        self.atan2 = lambda y, x: (
            y.arctan2(x) if isinstance(y, Traced) else
            Traced(_sympy().atan2(y, _operand(x)), x.d) if isinstance(x, Traced) else
            math.atan2(y, x))
        self.hypot = lambda *xs: (_NUMPY.sqrt(sum(x * x for x in xs))
                                  if any(isinstance(x, Traced) for x in xs) else math.hypot(*xs))
        self.pow = lambda x, y: x ** y

    def __getattr__(self, name: str) -> Any:
        return getattr(math, name)


_MATH = _MathProxy()
#: functions imported from math by name (``from math import sin``) -> their proxies
_MATH_FUNCTIONS = {id(getattr(math, name)): getattr(_MATH, name)
                   for name in list(_MATH_NAMES) + ["log", "atan2", "hypot", "pow"]}
_NUMPY_CREATORS = {id(getattr(np, name)): getattr(_NumpyProxy, name)
                   for name in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like",
                                "ones_like", "full_like", "array", "asarray",
                                "ascontiguousarray")}


def rebind(fn: Any, memo: dict | None = None) -> Callable:
    """``fn`` as it runs in a trace: a numba function by its ``py_func``, with ``numpy``
    and ``math`` (and the functions of its module it calls) replaced by their proxies in
    its globals and closure."""
    memo = {} if memo is None else memo
    py = getattr(fn, "py_func", None)        # numba's CPUDispatcher
    if py is not None:
        fn = py
    if isinstance(fn, types.MethodType):
        return types.MethodType(rebind(fn.__func__, memo), fn.__self__)
    if not isinstance(fn, types.FunctionType):
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType) and not isinstance(fn, type):
            return types.MethodType(rebind(call, memo), fn)
        return fn
    if id(fn) in memo:
        return memo[id(fn)]
    module = fn.__module__
    names = _names(fn.__code__)
    glob = dict(fn.__globals__)
    new = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__,
                             _cells(fn, module, memo))
    new.__kwdefaults__ = fn.__kwdefaults__
    memo[id(fn)] = new
    for name in names & glob.keys():
        glob[name] = _replacement(glob[name], module, memo)
    return new


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions defined inside it read."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _cells(fn: types.FunctionType, module: str, memo: dict) -> tuple | None:
    if fn.__closure__ is None:
        return None
    out = []
    for cell in fn.__closure__:
        try:
            value = cell.cell_contents
        except ValueError:             # an empty cell (a name not yet bound)
            out.append(cell)
            continue
        out.append(types.CellType(_replacement(value, module, memo)))
    return tuple(out)


def _replacement(value: Any, module: str, memo: dict) -> Any:
    if value is np:
        return _NUMPY
    if value is math:
        return _MATH
    if id(value) in _MATH_FUNCTIONS:
        return _MATH_FUNCTIONS[id(value)]
    if id(value) in _NUMPY_CREATORS:
        return _NUMPY_CREATORS[id(value)]
    py = getattr(value, "py_func", None)
    if isinstance(py, types.FunctionType):
        return rebind(py, memo)
    if isinstance(value, types.FunctionType) and value.__module__ == module:
        return rebind(value, memo)
    return value


# -- tracing a problem ---------------------------------------------------------------------
def trace_function(fn: Callable, which: str, vectorized: bool, t: Any, z: tuple,
                   theta: tuple) -> list:
    """The sympy expressions of ``fn`` (``"f"``: one per state, ``"R"``/``"T"``: one),
    traced in the call convention of `invimbed.BolzaProblem`. Raises `TraceError` (or
    whatever the function raises on traced arrays)."""
    def inputs(symbols: tuple) -> np.ndarray:
        arr = traced_vector(symbols)
        return arr[None, :] if vectorized else arr

    traced = rebind(fn)
    out = traced(inputs(z)) if which == "T" else traced(Traced(t), inputs(z), inputs(theta))
    shape = (len(z),) if which == "f" else ()
    return traced_expressions(out, ((1,) if vectorized else ()) + shape)


def traced_vector(symbols: tuple) -> np.ndarray:
    """An object array of `Traced` scalars, one per sympy symbol of ``symbols``."""
    arr = np.empty(len(symbols), dtype=object)
    for i, s in enumerate(symbols):
        arr[i] = Traced(s)
    return arr


def traced_expressions(out: Any, expected: tuple[int, ...] | None) -> list:
    """The sympy expressions of a traced function's output ``out``, flattened; its shape
    must be ``expected`` (None: a scalar or a 1-d array of any length). Raises
    `TraceError` for another shape or an entry that is not a number or a trace."""
    arr = np.asarray(out, dtype=object)
    if expected is None:
        arr = arr.reshape(-1) if arr.ndim <= 1 else arr
        if arr.ndim != 1:
            raise TraceError(f"it returned shape {arr.shape} on traced arrays, not a 1-d "
                             f"array")
    elif arr.shape != expected:
        raise TraceError(f"it returned shape {arr.shape} on traced arrays, not {expected}")
    exprs = []
    for v in arr.reshape(-1):
        e = _operand(v)
        if e is None:
            raise TraceError(f"it returned a {type(v).__name__} on traced arrays")
        # NaN outside the domain of a function that simplification dropped
        exprs.append(_domains.guard(_sympy(), e, v.d) if isinstance(v, Traced) else e)
    return exprs
