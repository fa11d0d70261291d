"""A sympy expression DAG as a tape of elementary operations, for Taylor-mode evaluation.

`build_tape` runs ``sympy.cse`` over the expressions of a request and writes the shared
DAG as a list of operations, one node each, in an order where every argument comes
before its use. The tape does not depend on the jet order: the evaluators
(`invimbed._core.derivatives.taylor_mode`) propagate truncated polynomials of any
degree through it. Each row of ``ops`` is ``(opcode, a, b, c)`` with a float ``par``:

=========  =========================================================================
``CONST``  the number ``par``
``TIME``   the time ``t``
``INPUT``  input column ``a``; a seeded variable (``b >= 0``: the polynomial variable
           ``b``) and/or a dual direction (``c >= 0``)
``ADD``    ``a + b``;  ``MUL``: ``a * b``;  ``POWI``: ``a ** b`` (integer ``b >= 2``)
``FUNC``   the univariate function ``b`` of `UNIVARIATE` at ``a``, with parameter
           ``par`` (the exponent of ``POW``)
``ABS``    ``|a|`` = ``sign(a(0)) a``;  ``MAX``/``MIN``: the argument that is larger
           (smaller) at the expansion point
``STEP``   a piecewise-constant function of ``a(0)``: Heaviside (``b = 0``, value
           ``par`` at 0) or sign (``b = 1``): a constant jet, derivatives zero
``CMP``    the comparison ``b`` of `COMPARISONS` between ``a(0)`` and ``c(0)`` (0 or 1)
``AND``, ``OR``, ``NOT``  of comparisons;  ``SELECT``: ``b if a else c``
=========  =========================================================================

Branches (``ABS``, ``MAX``, ``MIN``, ``STEP``, ``SELECT``) are taken at the expansion
point, so the jets are those of the branch there: derivatives almost everywhere, the
same as the symbolic path, where the derivative of a Heaviside function (a Dirac delta)
is zero.

``kind[i]`` is 0 for a node that is constant in the seeded variables and in the dual
directions (a number, the time, an unseeded input and what is computed from them
only), 1 for a node that depends on seeded variables only, 2 for one that depends on a
dual direction: evaluators keep the first as one value per row and skip the dual parts
of the second (they are zero).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

CONST, TIME, INPUT, ADD, MUL, POWI, FUNC, ABS, MAX, MIN, STEP, CMP, AND, OR, NOT, SELECT = \
    range(16)
#: univariate functions, by code: composed through their Taylor series at the point
UNIVARIATE = ("exp", "log", "pow", "sin", "cos", "sinh", "cosh", "tan", "tanh", "atan",
              "asin", "acos", "asinh", "acosh", "atanh")
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


class Unsupported(ValueError):
    """An expression holds a function that Taylor-mode evaluation does not know."""


class Tape:
    """The operations of a request; see the module docstring."""

    def __init__(self, ops: np.ndarray, par: np.ndarray, kind: np.ndarray,
                 outputs: np.ndarray, n_seeds: int, n_duals: int) -> None:
        self.ops, self.par, self.kind, self.outputs = ops, par, kind, outputs
        self.n_seeds, self.n_duals = n_seeds, n_duals

    def __len__(self) -> int:
        return len(self.ops)


def build_tape(sp: Any, exprs: Sequence[Any], t: Any, inputs: Sequence[Any],
               seeds: Sequence[Any], duals: Sequence[Any] = ()) -> Tape:
    """The tape of ``exprs`` in the variables ``inputs`` (columns of the input rows) and
    ``t``; ``seeds`` are the polynomial variables (in their order), ``duals`` the
    directions of first-order duals. Raises `Unsupported` naming a function it does not
    know."""
    b = _Builder(sp, t, inputs, seeds, duals)
    repl, reduced = sp.cse(list(exprs), symbols=sp.numbered_symbols("_tm"))
    for sym, e in repl:
        b.memo[sym] = b.node(e)
    outputs = np.array([b.node(e) for e in reduced], dtype=np.int64)
    return Tape(np.array(b.ops, dtype=np.int64).reshape(-1, 4), np.array(b.par, dtype=float),
                np.array(b.kind, dtype=np.int8), outputs, len(seeds), len(duals))


class _Builder:
    def __init__(self, sp, t, inputs, seeds, duals) -> None:
        self.sp = sp
        self.ops: list[tuple[int, int, int, int]] = []
        self.par: list[float] = []
        self.kind: list[int] = []
        self.memo: dict[Any, int] = {}
        seed = {s: i for i, s in enumerate(seeds)}
        dual = {s: i for i, s in enumerate(duals)}
        self.memo[t] = self._emit(TIME, kind=0)
        for col, s in enumerate(inputs):
            k, d = seed.get(s, -1), dual.get(s, -1)
            self.memo[s] = self._emit(INPUT, col, k, d, kind=2 if d >= 0 else int(k >= 0))
        self.funcs = {getattr(sp, name): code for code, name in enumerate(UNIVARIATE)
                      if name != "pow"}

    def _emit(self, op: int, a: int = -1, b: int = -1, c: int = -1, par: float = 0.0,
              kind: int | None = None) -> int:
        if kind is None:
            args = {ADD: (a, b), MUL: (a, b), MAX: (a, b), MIN: (a, b), POWI: (a,),
                    FUNC: (a,), ABS: (a,), SELECT: (b, c)}.get(op, ())
            kind = max((self.kind[i] for i in args), default=0)
        self.ops.append((op, a, b, c))
        self.par.append(float(par))
        self.kind.append(kind)
        return len(self.ops) - 1

    def const(self, value: Any) -> int:
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = float("nan")            # zoo, nan: what the symbolic path evaluates too
        return self._emit(CONST, par=v, kind=0)

    def node(self, e: Any) -> int:
        hit = self.memo.get(e)
        if hit is None:
            hit = self.memo[e] = self._node(e)
        return hit

    def _fold(self, op: int, args: Sequence[Any]) -> int:
        ids = [self.node(a) for a in args]
        out = ids[0]
        for i in ids[1:]:
            out = self._emit(op, out, i)
        return out

    def _node(self, e: Any) -> int:
        sp = self.sp
        if e.is_Number or e.is_NumberSymbol or (e.is_number and not e.free_symbols
                                                 and not e.atoms(sp.Function)):
            return self.const(e)
        if isinstance(e, sp.Symbol):
            raise Unsupported(f"symbol {e} is not a variable of the problem")
        if e.is_Add:
            return self._fold(ADD, e.args)
        if e.is_Mul:
            return self._fold(MUL, e.args)
        if e.is_Pow:
            return self._pow(*e.args)
        fn = self.funcs.get(type(e))
        if fn is not None:
            return self._emit(FUNC, self.node(e.args[0]), fn)
        if isinstance(e, sp.Abs):
            return self._emit(ABS, self.node(e.args[0]))
        if isinstance(e, (sp.Max, sp.Min)):
            return self._fold(MAX if isinstance(e, sp.Max) else MIN, e.args)
        if isinstance(e, sp.Heaviside):
            h0 = e.args[1] if len(e.args) > 1 else sp.Rational(1, 2)
            return self._emit(STEP, self.node(e.args[0]), 0, par=float(h0))
        if isinstance(e, sp.sign):
            return self._emit(STEP, self.node(e.args[0]), 1)
        if isinstance(e, sp.DiracDelta):
            return self.const(0)        # a derivative of a step: zero almost everywhere
        if isinstance(e, sp.Piecewise):
            return self._piecewise(e.args)
        raise Unsupported(f"Taylor-mode evaluation does not know the function "
                          f"{type(e).__name__} (in {e})")

    def _pow(self, base: Any, ex: Any) -> int:
        sp = self.sp
        if ex.is_Integer and int(ex) >= 0:
            n = int(ex)
            if n == 0:
                return self.const(1)
            a = self.node(base)
            return a if n == 1 else self._emit(POWI, a, n)
        if ex.is_number:
            return self._emit(FUNC, self.node(base), UNIVARIATE.index("pow"), par=float(ex))
        # a variable exponent: exp(ex * log(base))
        return self.node(sp.exp(ex * sp.log(base)))

    def _cond(self, c: Any) -> int:
        sp = self.sp
        if c is sp.true or c == True:   # noqa: E712 - sympy's true
            return self.const(1)
        if c is sp.false or c == False:  # noqa: E712
            return self.const(0)
        if isinstance(c, sp.And) or isinstance(c, sp.Or):
            ids = [self._cond(a) for a in c.args]
            out = ids[0]
            for i in ids[1:]:
                out = self._emit(AND if isinstance(c, sp.And) else OR, out, i)
            return out
        if isinstance(c, sp.Not):
            return self._emit(NOT, self._cond(c.args[0]))
        if isinstance(c, sp.core.relational.Relational) and c.rel_op in COMPARISONS:
            return self._emit(CMP, self.node(c.lhs), COMPARISONS.index(c.rel_op),
                              self.node(c.rhs))
        raise Unsupported(f"Taylor-mode evaluation does not know the condition {c}")

    def _piecewise(self, pieces: Sequence[Any]) -> int:
        (e, c), rest = pieces[0], pieces[1:]
        cond = self._cond(c)
        if not rest:
            nan = self.const(float("nan"))       # no piece applies: sympy's nan
            return self._emit(SELECT, cond, self.node(e), nan)
        return self._emit(SELECT, cond, self.node(e), self._piecewise(rest))
