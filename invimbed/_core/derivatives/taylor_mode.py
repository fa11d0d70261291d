"""Taylor-mode (differential-algebra) evaluation of sympy expressions: jets of any order
at a cost polynomial in the order.

Differentiating an expression symbolically to order ``K`` and printing every derivative
costs time and code that grow exponentially with ``K`` for expressions such as a double
pendulum's. Taylor mode instead propagates *truncated multivariate polynomials* through
the expression DAG (`invimbed._core.derivatives._tape`): every node holds the Taylor
coefficients of its value in the seeded variables around the point, ``C(n + K, K)``
numbers in the graded order of `invimbed._core.derivatives.multiindex.multi_indices`,
and

* a sum adds coefficients, a product is the truncated product of
  `invimbed._core.derivatives.multiindex.product_table` (the jet closure's table);
* a univariate function ``g`` of a node ``a = c + h`` (``c`` its value at the point, ``h``
  without constant term) is composed through its Taylor series at ``c``,
  ``g(c + h) = sum_j g_j h^j`` with ``g_j = g^(j)(c) / j!`` from
  `invimbed._core.derivatives._univariate.series` (closed forms
  for exp, log, powers, sin, cos, sinh, cosh; the recurrences of their differential
  equations for tan, tanh and the inverse functions): ``K - 1`` truncated products;
* first-order duals (the ``theta``-gradient of every coefficient, ``dth = 1``) ride
  along: a node holds ``D = 1 + M`` polynomials, ``(a b)_d = a_0 b_d + a_d b_0`` and
  ``g(a)_d = g'(a_0) a_d``.

So one evaluation costs ``O(nodes * K * P)`` with ``P`` the size of the product table,
polynomial in ``K``. Two evaluators run the same tape: `evaluate` in numpy, vectorised over
the batch, and the numba kernel of `invimbed._core.derivatives._taylor_numba` (compiled once
per machine, whatever the problem: the tape is data).
"""

from __future__ import annotations

import math

import numpy as np

from ._tape import (ABS, ADD, AND, CMP, CONST, FUNC, INPUT, MAX, MIN, MUL, NOT, OR, POWI,
                    SELECT, STEP, TIME, Tape)
from functools import lru_cache

from ._univariate import series
from .multiindex import n_coefficients, poly_mul, product_table


def _point(x: np.ndarray) -> np.ndarray:
    """Value at the expansion point of a node (B,) or (B, D, C)."""
    return x if x.ndim == 1 else x[:, 0, 0]


def _jet(x: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """A node as a jet of at least ``(B, D, C)`` duals (a scalar: a constant jet)."""
    if x.ndim == 3:
        return x
    out = np.zeros((shape[0], 1, shape[2]))
    out[:, 0, 0] = x
    return out


def _pad(x: np.ndarray, D: int) -> np.ndarray:
    if x.shape[1] == D:
        return x
    out = np.zeros((x.shape[0], D, x.shape[2]))
    out[:, :x.shape[1]] = x
    return out


@lru_cache(maxsize=None)
def _sparse_plan(n: int, order: int):
    """The product table with its sums as a 0/1 matrix (C, pairs): one matrix product
    instead of one pass per term of the longest sum; dense below 200 coefficients
    (at most 0.8 MB), sparse above."""
    from scipy import sparse

    ia, ib, io = product_table(n, order, order, order)
    C = n_coefficients(n, order)
    if C < 200:
        S = np.zeros((C, io.size))
        S[io, np.arange(io.size)] = 1.0
        return ia, ib, S
    return ia, ib, sparse.csr_matrix((np.ones(io.size), (io, np.arange(io.size))),
                                     shape=(C, io.size))


def poly_mul_large(x: np.ndarray, y: np.ndarray, n: int, order: int) -> np.ndarray:
    """`invimbed._core.derivatives.multiindex.poly_mul` (same table), summed by a matrix
    product (the numpy evaluator: its sums need not be ordered, the numba kernel's are
    not the same either; they agree to rounding)."""
    if n_coefficients(n, order) < 20:
        return poly_mul(x, y, n, order)
    ia, ib, S = _sparse_plan(n, order)
    x, y = np.broadcast_arrays(x, y)
    lead = x.shape[:-1]
    pairs = (x[..., ia] * y[..., ib]).reshape(-1, ia.size)
    return (S @ pairs.T).T.reshape(lead + (S.shape[0],))


def _mul(x: np.ndarray, y: np.ndarray, n: int, order: int) -> np.ndarray:
    """Product of two jets ``(B, Dx, C)``, ``(B, Dy, C)`` (``D = 1``: no duals)."""
    if x.shape[1] == 1 or y.shape[1] == 1:       # (x_0 y_0, x_0 y_d): broadcast
        return poly_mul_large(x, y, n, order)
    D = x.shape[1]
    ix = [0] * D + list(range(1, D))
    iy = list(range(D)) + [0] * (D - 1)
    prod = poly_mul_large(x[:, ix], y[:, iy], n, order)
    out = prod[:, :D]
    out[:, 1:] += prod[:, D:]
    return out


def _compose(code: int, r: float, x: np.ndarray, n: int, order: int) -> np.ndarray:
    """``g(x)`` for a jet ``x`` (B, D, C) by its series at ``x(0)``."""
    D = x.shape[1]
    c0 = x[:, 0, 0]
    g = series(code, c0, r, order + (D > 1))
    h = x[:, 0].copy()
    h[:, 0] = 0.0
    val = np.zeros_like(h)
    val[:, 0] = g[0]
    dg = np.zeros_like(h)
    if D > 1:
        dg[:, 0] = g[1]
    power = h
    for j in range(1, order + 1):
        if j > 1:
            power = poly_mul_large(power, h, n, order)
        val += g[j][:, None] * power
        if D > 1:
            dg += (j + 1) * g[j + 1][:, None] * power
    if D == 1:
        return val[:, None]
    return np.concatenate([val[:, None], poly_mul_large(dg[:, None], x[:, 1:], n, order)],
                          axis=1)


def last_uses(tape: Tape) -> list[list[int]]:
    """For each step, the nodes whose last use it is (the numpy evaluator frees them)."""
    last = {}
    for i, (op, a, b, c) in enumerate(tape.ops):
        args = {ADD: (a, b), MUL: (a, b), MAX: (a, b), MIN: (a, b), AND: (a, b), OR: (a, b),
                CMP: (a, c), SELECT: (a, b, c)}.get(int(op), (a,) if op not in
                                                     (CONST, TIME, INPUT) else ())
        for j in args:
            last[int(j)] = i
    for j in tape.outputs:
        last[int(j)] = len(tape)
    free: list[list[int]] = [[] for _ in range(len(tape))]
    for j, i in last.items():
        if i < len(tape) and j != i:
            free[i].append(j)
    return free


def evaluate(tape: Tape, t: np.ndarray, xin: np.ndarray, order: int) -> np.ndarray:
    """The tape's outputs as jets: (B, n_out, 1 + n_duals, C(n_seeds + order, order)),
    numpy, vectorised over the rows of ``xin`` (B, n_inputs) at times ``t`` (B,)."""
    B = xin.shape[0]
    n, D = tape.n_seeds, 1 + tape.n_duals
    C = n_coefficients(n, order)
    shape = (B, D, C)
    free = getattr(tape, "_free", None)
    if free is None:
        free = tape._free = last_uses(tape)
    vals: dict[int, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i, (op, a, b, c) in enumerate(tape.ops.tolist()):
            vals[i] = _step(op, a, b, c, float(tape.par[i]), vals, t, xin, shape, n, order)
            for j in free[i]:
                del vals[j]
    out = np.zeros((B, len(tape.outputs), D, C))
    for k, j in enumerate(tape.outputs):
        v = _jet(vals[int(j)], shape)
        out[:, k, :v.shape[1]] = v
    return out


def _step(op, a, b, c, par, vals, t, xin, shape, n, order):
    B, D, C = shape
    if op == CONST:
        return np.full(B, par)
    if op == TIME:
        return t
    if op == INPUT:
        if b < 0 and c < 0:
            return xin[:, a]
        out = np.zeros((B, 1 if c < 0 else D, C))
        out[:, 0, 0] = xin[:, a]
        if b >= 0 and order >= 1:
            out[:, 0, 1 + b] = 1.0
        if c >= 0:
            out[:, 1 + c, 0] = 1.0
        return out
    x = vals[a]
    if op in (ADD, MUL, MAX, MIN):
        y = vals[b]
        if x.ndim == 1 and y.ndim == 1:
            return {ADD: np.add, MUL: np.multiply, MAX: np.maximum, MIN: np.minimum}[op](x, y)
        if op == MUL:
            if x.ndim == 1 or y.ndim == 1:
                s, j = (x, y) if x.ndim == 1 else (y, x)
                return s[:, None, None] * j
            return _mul(x, y, n, order)
        x, y = _jet(x, shape), _jet(y, shape)
        Dm = max(x.shape[1], y.shape[1])
        x, y = _pad(x, Dm), _pad(y, Dm)
        if op == ADD:
            return x + y
        pick = x[:, 0, 0] >= y[:, 0, 0] if op == MAX else x[:, 0, 0] <= y[:, 0, 0]
        return np.where(pick[:, None, None], x, y)
    if op == POWI:
        if x.ndim == 1:
            return x ** b
        out = x
        for _ in range(b - 1):
            out = _mul(out, x, n, order)
        return out
    if op == FUNC:
        if x.ndim == 1:
            return series(b, x, par, 0)[0]
        return _compose(b, par, x, n, order)
    if op == ABS:
        return np.abs(x) if x.ndim == 1 else np.sign(x[:, 0, 0])[:, None, None] * x
    if op == STEP:
        p = _point(x)
        return np.sign(p) if b == 1 else np.where(p > 0, 1.0, np.where(p < 0, 0.0, par))
    if op == CMP:
        p, q = _point(x), _point(vals[c])
        res = (p < q, p <= q, p > q, p >= q, p == q, p != q)[b]
        return res.astype(float)
    if op in (AND, OR):
        y = vals[b]
        return ((x != 0) & (y != 0) if op == AND else (x != 0) | (y != 0)).astype(float)
    if op == NOT:
        return (x == 0).astype(float)
    if op == SELECT:
        y, z = vals[b], vals[c]
        if y.ndim == 1 and z.ndim == 1:
            return np.where(x != 0, y, z)
        y, z = _jet(y, shape), _jet(z, shape)
        Dm = max(y.shape[1], z.shape[1])
        return np.where((x != 0)[:, None, None], _pad(y, Dm), _pad(z, Dm))
    raise ValueError(f"unknown operation {op} on the tape")  # pragma: no cover


class TaylorJets:
    """Taylor-mode jets of the expressions of a `SympyProvider`: the layouts of its
    ``taylor`` (``dth = 0`` or 1) and ``taylor_joint``, from one tape per request kind.

    ``engine`` is ``"numba"`` (the compiled kernel), ``"numpy"``, or ``"auto"`` (the
    default where numba is installed): the kernel where it is ready to run without
    compiling (`invimbed._core.runtime.compile_cost.ready`: compiled in this process or in numba's
    on-disk cache), or where the request's product table has at least `COMPILE_FROM`
    pairs (there the numpy evaluator is slow enough that the one-time compilation, 43 s
    of CPU, pays within a sweep); the numpy evaluator otherwise. Both give the same
    coefficients to rounding (docs/performance.md). Building a tape raises
    `invimbed._core.derivatives._tape.Unsupported` for a function it does not know.
    """

    #: the lowest Taylor degree at which ``taylor_mode=None`` chooses Taylor mode over the
    #: symbolic derivatives, per engine (benchmarks/bench_taylor_mode.py). Degree 3 (what
    #: jet order 1 asks without its look-ahead) stays symbolic; from degree 4 the symbolic
    #: setup alone (sympy differentiating to order 4: 24 s at N = 4) costs more than a
    #: sweep's numpy evaluations.
    FROM_ORDER = {"numba": 4, "numpy": 4, "auto": 4}
    #: ``engine="auto"`` compiles the tape kernel for product tables of at least this
    #: many pairs, ``C(2n + K, K)`` for ``n`` seeds and degree ``K`` (N = 4 from degree 8,
    #: N = 8 from degree 5), where a numpy step took 1.2 s and more at a load of 14
    #: (docs/performance.md, "Compiled kernels and the first run on a machine").
    COMPILE_FROM = 10_000

    def __init__(self, sp, t, z, theta, expressions: dict, engine: str | None = None,
                 always: bool = False) -> None:
        if engine is None:
            engine = "auto" if _numba_available() else "numpy"
        if engine not in ("numba", "numpy", "auto"):
            raise ValueError(f"`engine` must be 'numba', 'numpy' or 'auto', but got "
                             f"{engine!r}")
        self.engine = engine
        self._kernel_sizes: set[tuple[int, int]] = set()
        self._sp, self._t, self._z, self._theta = sp, t, tuple(z), tuple(theta)
        self._expressions = expressions
        self._tapes: dict[tuple[str, str], Tape] = {}
        self.always = always

        self._known: bool | None = None     # whether the tape knows every function

    def use(self, order: int, dth: int) -> bool:
        """Whether a request of this order goes through Taylor mode."""
        if dth > 1 or not (self.always or order >= self.FROM_ORDER[self.engine]):
            return False
        if self._known is None:
            self.check()
        return bool(self._known)

    def check(self) -> None:
        """Build the tapes of ``f``, ``R``, ``T``; where one holds a function Taylor mode
        does not know, raise ValueError (``always``) or choose the symbolic path."""
        from ._tape import Unsupported

        try:
            for which in ("f", "R", "T"):
                self.tape(which, "z")
            self._known = True
        except Unsupported as exc:
            if self.always:
                raise ValueError(f"taylor_mode=True: {exc}; use taylor_mode=None") from None
            self._known = False

    def tape(self, which: str, mode: str) -> Tape:
        """The tape of ``which`` with seeds ``z`` (``mode="z"``), seeds ``z`` and duals
        ``theta`` (``"dual"``), or seeds ``z`` then ``theta`` (``"joint"``)."""
        key = (which, mode)
        hit = self._tapes.get(key)
        if hit is None:
            from ._tape import build_tape

            ex = self._expressions[which]
            exprs = list(ex) if which == "f" else [ex]
            z, th = self._z, self._theta
            seeds = z + th if mode == "joint" else z
            hit = build_tape(self._sp, exprs, self._t, z + th, seeds,
                             th if mode == "dual" else ())
            self._tapes[key] = hit
        return hit

    def _run(self, tape: Tape, t, z: np.ndarray, theta: np.ndarray, order: int) -> np.ndarray:
        B = z.shape[0]
        times = np.broadcast_to(np.asarray(t, dtype=float), (B,))
        xin = np.concatenate([z, theta], axis=1) if theta.shape[1] else z
        if self._compiled(tape.n_seeds, order):
            from . import _taylor_numba

            return _taylor_numba.evaluate(tape, times, xin, order)
        return evaluate(tape, np.ascontiguousarray(times), xin, order)

    def _compiled(self, n: int, order: int) -> bool:
        """Whether a request of ``n`` seeds and degree ``order`` runs the numba kernel
        (once it does, it keeps doing so: the answer is kept per request size, as this
        runs at every evaluation of the sweep)."""
        if self.engine != "auto":
            return self.engine == "numba"
        if (n, order) in self._kernel_sizes:
            return True
        from ..runtime.compile_cost import ready
        from ._taylor_numba import run

        if math.comb(2 * n + order, order) >= self.COMPILE_FROM or ready(run):
            self._kernel_sizes.add((n, order))
            return True
        return False

    def taylor(self, which: str, t, z: np.ndarray, theta: np.ndarray, order: int,
               dth: int, out_shape: tuple[int, ...]) -> np.ndarray:
        """(B, *out, C) for ``dth = 0``, (B, *out, M, C) for ``dth = 1``."""
        res = self._run(self.tape(which, "dual" if dth else "z"), t, z, theta, order)
        B, C = z.shape[0], res.shape[-1]
        if dth:
            return res[:, :, 1:].reshape((B,) + out_shape + (len(self._theta), C))
        return res[:, :, 0].reshape((B,) + out_shape + (C,))

    def joint(self, which: str, t, z: np.ndarray, theta: np.ndarray, order: int,
              out_shape: tuple[int, ...]) -> np.ndarray:
        """(B, *out, C(N + M + order, order)), ``z`` variables first."""
        z = np.asarray(z, dtype=float)
        M = len(self._theta)
        theta = (np.zeros((z.shape[0], M)) if theta is None or which == "T" else
                 np.broadcast_to(np.asarray(theta, dtype=float), (z.shape[0], M)))
        res = self._run(self.tape(which, "joint"), t, z, theta, order)
        return res[:, :, 0].reshape((z.shape[0],) + out_shape + (res.shape[-1],))


def _taylor_jets(provider, taylor_mode: bool | None) -> TaylorJets | None:
    """The `TaylorJets` of a `SympyProvider` (``taylor_mode``: None chooses by order,
    True always: its tapes are built at once, so that a function it does not know is a
    ValueError here), or None where Taylor mode is off."""
    if taylor_mode is False:
        return None
    jets = TaylorJets(provider._sp, provider.t, provider.z, provider.theta,
                      provider.expressions, always=bool(taylor_mode))
    if taylor_mode:
        jets.check()
    return jets


def _numba_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba") is not None
