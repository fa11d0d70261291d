"""Exact derivatives of any order from sympy expressions, generated once and compiled.

:class:`SympyProvider` differentiates the user's sympy expressions for ``f``, ``R``
and ``T`` symbolically and turns every request of the derivative interface into a
compiled, batch-vectorised function, generated once:

1. **Expressions.** A request ``(which, order, dth)`` lists one expression per
   *distinct* entry: for a full tensor (:meth:`SympyProvider.derivative`) one per
   sorted index tuple of the symmetric ``z`` axes (and of the ``theta`` axes); for
   Taylor coefficients (:meth:`SympyProvider.taylor`) one per multi-index ``alpha``,
   ``D^alpha_z g / alpha!``, so that a jet of degree ``K`` costs ``C(N + K, K)``
   expressions, not ``N^K``. Derivatives are memoised and built from one another
   (``D^alpha g = d/dz_j D^(alpha - e_j) g``), so raising the order only adds the new
   ones. Entries that are identically zero are not computed at all.
2. **Common subexpressions.** ``sympy.cse`` runs over all the expressions of one request
   at once: a pendulum's ``sin`` and ``cos`` are evaluated once per call whatever the
   order.
3. **Code.** ``sympy.lambdify`` turns them into a numpy function of the columns of the
   batch (constant entries, which lambdify returns as scalars, are broadcast), or, with
   ``compile="numba"``, the cse'd expressions are printed as a function of one sample,
   ``point(t, z, theta, out)``, compiled with ``numba.njit`` (sympy has no numba
   printer) and looped over the batch. The same ``point`` functions are what
   ``backend="numba"`` calls for a problem built with ``from_sympy``
   (:meth:`SympyProvider.sample_function`): one code generator, one compilation path.
4. **Cache.** Compiled functions are kept per ``(which, order, dth)`` (and per kind of
   request): the code is generated on the first call only. ``codegen_calls`` counts
   the generations. The numba code is also cached on disk, with numba's machine code
   (`invimbed._core.derivatives._codegen`): a later process compiles nothing.

5. **High orders: Taylor mode.** Symbolic derivatives and their code grow exponentially
   with the order. From degree 4 (degree 5 without numba) :meth:`SympyProvider.taylor` and
   :meth:`SympyProvider.taylor_joint` propagate truncated polynomials through the
   expression DAG instead (`invimbed._core.derivatives.taylor_mode`): nothing is
   differentiated, and the cost grows polynomially with the order. ``taylor_mode``
   chooses otherwise.

Saturations (``Max``, ``Min``, ``Abs``, ``Piecewise``, ``Heaviside``, ``sign``) have
derivatives almost everywhere: those of the branch at the point, a Dirac delta (the
derivative of a step) being zero. A function without numpy code is refused by name
when the provider is built.

sympy (and numba) are imported only when a provider is built, so ``import invimbed``
works without them.
"""

from __future__ import annotations

from itertools import combinations_with_replacement, product
from typing import Any, Callable, Sequence

import numpy as np

from . import _codegen
from ._sympy_input import (_check_printable, _check_request, _check_symbols, _describe,
                           _exponents, _expression, _expressions, _symbol, _symbols,
                           diff_almost_everywhere, import_numba, import_sympy,
                           numpy_printer, real_variables)
from .taylor_mode import _taylor_jets
from ._joint_code import joint_coefficients
from .base import _WHICH, DerivativeProvider
from .multiindex import factorials, multi_indices

_COMPILERS = (None, "numpy", "numba")


class SympyProvider(DerivativeProvider):
    r"""Exact derivatives of every order of ``f``, ``R``, ``T`` given as sympy expressions.

    What :func:`invimbed.from_sympy` attaches to its problem; details of the code paths:
    docs/derivatives.md, "SympyProvider in detail".

    Parameters
    ----------
    t : sympy.Symbol
        The time (depth) variable.
    z : sequence of N sympy.Symbol
        The state variables, in the order of the state vector.
    theta : sequence of M sympy.Symbol
        The control variables (may be empty).
    dynamics : sequence of N sympy expressions (or a sympy Matrix)
        ``f(t, z, theta)``, one expression per state variable.
    running_loss : sympy expression, optional
        ``R(t, z, theta)``; zero when omitted.
    terminal_loss : sympy expression, optional
        ``T(z)``, in ``z`` only; zero when omitted.
    compile : {None, "numba"}, default None
        Lambdified numpy code, or a loop compiled with ``numba.njit``.
    taylor_mode : bool or None, default None
        Taylor coefficients through the expression graph (``True``), by symbolic
        derivatives (``False``), or chosen by order (``None``: Taylor mode from degree 4,
        numba's kernel only where already compiled on this machine or the degree is high).

    Attributes
    ----------
    n_state, n_theta : int
        ``N`` and ``M``.
    max_order : None
        Any order of derivative is available.
    codegen_calls : int
        How many times code was generated (once per distinct request).

    Raises
    ------
    TypeError
        A string (never parsed), or an argument that is not a sympy symbol/expression.
    ValueError
        Mismatched sizes, a repeated or foreign symbol, a function without numpy code
        (named), or an unknown ``compile`` or ``taylor_mode``.
    ImportError
        sympy missing (``invimbed[symbolic]``), or numba for ``compile="numba"``.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from invimbed import SympyProvider
    >>> t, phi, v, u = sp.symbols("t phi v u")
    >>> prov = SympyProvider(t, [phi, v], [u], [v, -sp.sin(phi) + u],
    ...                      terminal_loss=(phi - 1) ** 2 / 2)
    >>> z = np.array([[0.3, 0.1]])
    >>> float(prov.derivative("f", 0.0, z, [[0.0]], dz=3)[0, 1, 0, 0, 0])  # d^3(-sin)/dphi^3
    0.955336489125606
    >>> prov.taylor("T", 0.0, z, None, order=2).round(3)   # 1, phi, v, phi^2, phi v, v^2
    array([[ 0.245, -0.7  ,  0.   ,  0.5  ,  0.   ,  0.   ]])
    """

    name = "symbolic (sympy) provider"
    #: every derivative is exact: the numba backend's plans difference nothing
    exact_derivatives = True
    max_order = None

    def __init__(self, t: Any, z: Sequence[Any], theta: Sequence[Any], dynamics: Any,
                 running_loss: Any = None, terminal_loss: Any = None, *,
                 compile: str | None = None, taylor_mode: bool | None = None) -> None:
        sp = import_sympy()
        self._sp = sp
        if compile not in _COMPILERS:
            raise ValueError(f"`compile` must be None or 'numba', but got {_describe(compile)}")
        self.compile = None if compile == "numpy" else compile
        if self.compile == "numba":
            self._numba = import_numba()
        if taylor_mode not in (None, True, False):
            raise ValueError(f"`taylor_mode` must be None, True or False, but got "
                             f"{_describe(taylor_mode)}")
        self.taylor_mode = taylor_mode
        t = _symbol(sp, t, "t")
        zs = _symbols(sp, z, "z")
        ths = _symbols(sp, theta, "theta")
        if not zs:
            raise ValueError("`z` must hold at least one state symbol, but it is empty")
        seen: dict[Any, str] = {t: "t"}
        for name, group in (("z", zs), ("theta", ths)):
            for i, s in enumerate(group):
                if s in seen:
                    raise ValueError(f"symbol {s} appears twice (as `{seen[s]}` and as "
                                     f"`{name}[{i}]`): every variable needs its own symbol")
                seen[s] = f"{name}[{i}]"
        self.t, self.z, self.theta = t, zs, ths
        self.n_state, self.n_theta = len(zs), len(ths)
        allowed = {t, *zs, *ths}
        f = _expressions(sp, dynamics, "dynamics", self.n_state)
        for i, e in enumerate(f):
            _check_symbols(sp, e, f"dynamics[{i}]", allowed, "t, z and theta")
        R = sp.S.Zero if running_loss is None else _expression(sp, running_loss, "running_loss")
        _check_symbols(sp, R, "running_loss", allowed, "t, z and theta")
        T = sp.S.Zero if terminal_loss is None else _expression(sp, terminal_loss, "terminal_loss")
        _check_symbols(sp, T, "terminal_loss", set(zs), "z (the terminal loss is T(z(q)))")
        self.expressions = {"f": tuple(f), "R": R, "T": T}
        _check_printable(sp, [*((f"dynamics[{i}]", e) for i, e in enumerate(f)),
                              ("running_loss", R), ("terminal_loss", T)])
        self._real = real_variables(sp, (t, *zs, *ths), (*f, R, T))
        self._jets = _taylor_jets(self, taylor_mode)
        # code is printed with plain names, whatever the user's symbols are called
        self._t_arg = sp.Symbol("_t")
        self._z_args = tuple(sp.Symbol(f"_z{i}") for i in range(self.n_state))
        self._th_args = tuple(sp.Symbol(f"_th{k}") for k in range(self.n_theta))
        self._rename = {t: self._t_arg, **dict(zip(zs, self._z_args)),
                        **dict(zip(ths, self._th_args))}
        self._diffs: dict[tuple, Any] = {}
        self._compiled: dict[tuple, _Compiled] = {}
        self._joint_plans: dict[tuple, Any] = {}     # `_joint_code.JointPlan`s
        self.codegen_calls = 0

    def __repr__(self) -> str:
        comp = "" if self.compile is None else f", compile={self.compile!r}"
        return (f"<{self.name}: N={self.n_state}, M={self.n_theta}, max_order=None, "
                f"{len(self._compiled)} compiled requests{comp}>")

    # -- symbolic derivatives ---------------------------------------------------------
    def _base(self, which: str, i: int) -> Any:
        return self.expressions["f"][i] if which == "f" else self.expressions[which]

    def _diff(self, which: str, i: int, alpha: tuple[int, ...], beta: tuple[int, ...]) -> Any:
        """``D^alpha_z D^beta_theta`` of output ``i`` of ``which`` (memoised)."""
        key = (which, i, alpha, beta)
        hit = self._diffs.get(key)
        if hit is not None:
            return hit
        if any(beta):
            k = max(j for j, b in enumerate(beta) if b)
            parent = self._diff(which, i, alpha, beta[:k] + (beta[k] - 1,) + beta[k + 1:])
            expr = diff_almost_everywhere(self._sp, parent, self.theta[k], self._real)
        elif any(alpha):
            j = max(j for j, a in enumerate(alpha) if a)
            parent = self._diff(which, i, alpha[:j] + (alpha[j] - 1,) + alpha[j + 1:], beta)
            expr = diff_almost_everywhere(self._sp, parent, self.z[j], self._real)
        else:
            expr = self._base(which, i)
        self._diffs[key] = expr
        return expr

    def expression(self, which: str, dz: int = 0, dth: int = 0) -> Any:
        """The full symbolic derivative tensor, a sympy ``Array`` with axes
        ``(*out, *[N]*dz, *[M]*dth)`` (no batch axis)."""
        _check_request(which, dz, dth, "dz")
        n_out = self.n_state if which == "f" else 1
        entries = []
        for i in range(n_out):
            for zi in product(range(self.n_state), repeat=dz):
                for ti in product(range(self.n_theta), repeat=dth):
                    entries.append(self._diff(which, i, _exponents(zi, self.n_state),
                                              _exponents(ti, self.n_theta)))
        shape = self.out_shape(which) + (self.n_state,) * dz + (self.n_theta,) * dth
        if not shape:
            return entries[0]
        return self._sp.Array(entries, shape) if entries else self._sp.Array([], shape)

    # -- the interface ----------------------------------------------------------------
    #: Generated code evaluates rows at their own times (contract rule 4 of the base).
    row_times = True

    def _derivative(self, which, t, z, theta, dz, dth):
        return self._request("tensor", which, dz, dth)(t, z, theta)

    def evaluator(self, which: str, dz: int = 0, dth: int = 0) -> "_Compiled":
        """The compiled code of the tensor ``(which, dz, dth)`` itself: rows at their own
        times, no per-call checks (see :meth:`DerivativeProvider.evaluator`)."""
        comp = self._compiled.get(("tensor", which, dz, dth))
        if comp is not None:        # a request built before: checked then
            return comp
        _check_request(which, dz, dth, "dz")
        return self._request("tensor", which, dz, dth)

    def taylor(self, which: str, t: float, z: np.ndarray, theta: np.ndarray | None,
               order: int, dth: int = 0) -> np.ndarray:
        """Taylor coefficients ``D^alpha_z g / alpha!`` generated directly, one expression
        per multi-index (see :meth:`DerivativeProvider.taylor` for the layout)."""
        _check_request(which, order, dth, "order")
        z = np.asarray(z, dtype=float)
        if z.ndim != 2 or z.shape[1] != self.n_state:
            raise ValueError(f"`z` must have shape (B, {self.n_state}), but has shape {z.shape}")
        B = z.shape[0]
        if theta is None or which == "T":
            theta = np.zeros((B, self.n_theta))
        else:
            theta = np.broadcast_to(np.asarray(theta, dtype=float), (B, self.n_theta))
        if self._jets is not None and self._jets.use(order, dth):
            return self._jets.taylor(which, t, z, theta, order, dth, self.out_shape(which))
        return self._request("taylor", which, order, dth)(t, z, theta)

    def taylor_joint(self, which: str, t: float, z: np.ndarray, theta: np.ndarray,
                     order: int) -> np.ndarray:
        """Joint Taylor coefficients in ``(z, theta)`` (see
        :meth:`DerivativeProvider.taylor_joint`), by Taylor mode where it is chosen."""
        if self._jets is None or not self._jets.use(order, 0):
            if self.compile is not None:
                return super().taylor_joint(which, t, z, theta, order)
            # the same requests and values as the base's, called in one pass
            return joint_coefficients(self, self._joint_plans, which, t, z, theta, order)
        _check_request(which, order, 0, "order")
        return self._jets.joint(which, t, z, theta, order, self.out_shape(which))

    # -- code generation --------------------------------------------------------------
    def _request(self, kind: str, which: str, order: int, dth: int) -> "_Compiled":
        key = (kind, which, order, dth)
        comp = self._compiled.get(key)
        if comp is None:
            comp = self._build(kind, which, order, dth)
            self._compiled[key] = comp
        return comp

    def _build(self, kind: str, which: str, order: int, dth: int) -> "_Compiled":
        exprs, gather, shape = self._entries(kind, which, order, dth)
        fn = self._generate(exprs)
        return _Compiled(fn, len(exprs), gather, shape, self.compile == "numba")

    def _entries(self, kind: str, which: str, order: int,
                 dth: int) -> tuple[list[Any], np.ndarray, tuple[int, ...]]:
        """The distinct nonzero entries of a request, and the map to its full output:
        ``full.ravel() = concat(values, [0])[gather]``, of shape ``shape``."""
        N, M = self.n_state, self.n_theta
        n_out = N if which == "f" else 1
        th_combos = list(combinations_with_replacement(range(M), dth))
        th_pos = {c: j for j, c in enumerate(th_combos)}
        if kind == "taylor":
            alphas = [tuple(int(v) for v in a) for a in multi_indices(N, order)]
            scale = [int(round(f)) for f in factorials(N, order)]
        else:
            z_combos = list(combinations_with_replacement(range(N), order))
            alphas = [_exponents(c, N) for c in z_combos]
            z_pos = {c: j for j, c in enumerate(z_combos)}
            scale = [1] * len(alphas)
        # distinct entries, order (out, theta combo, alpha)
        exprs = []
        for i in range(n_out):
            for tc in th_combos:
                beta = _exponents(tc, M)
                for a, s in zip(alphas, scale):
                    e = self._diff(which, i, a, beta)
                    exprs.append(e if s == 1 else e / s)   # s = alpha!, an integer
        n_a, n_t = len(alphas), len(th_combos)
        # gather: the full output (row-major) from the distinct entries
        if kind == "taylor":
            shape = self.out_shape(which) + (M,) * dth + (n_a,)
            gather = [i * n_t * n_a + th_pos[tuple(sorted(ti))] * n_a + a
                      for i in range(n_out) for ti in product(range(M), repeat=dth)
                      for a in range(n_a)]
        else:
            shape = self.out_shape(which) + (N,) * order + (M,) * dth
            gather = [i * n_t * n_a + th_pos[tuple(sorted(ti))] * n_a + z_pos[tuple(sorted(zi))]
                      for i in range(n_out) for zi in product(range(N), repeat=order)
                      for ti in product(range(M), repeat=dth)]
        nonzero = [j for j, e in enumerate(exprs) if e != 0]
        row = np.full(len(exprs), len(nonzero), dtype=np.int64)  # zeros read the last row
        row[nonzero] = np.arange(len(nonzero))
        gather = row[np.asarray(gather, dtype=np.int64)] if gather else np.zeros(0, np.int64)
        return [exprs[j] for j in nonzero], gather, shape

    def _generate(self, exprs: list[Any]) -> Callable:
        """Compile ``exprs`` (cse'd together) into ``fn(t, z (B, N), theta (B, M), out)``
        that writes ``out[:, j]`` (numba) or returns the list of values (numpy)."""
        self.codegen_calls += 1
        sp = self._sp
        if not exprs:
            return _nothing
        repl, reduced = self._cse(exprs)
        if self.compile == "numba":
            return self._numba_module(repl, reduced)   # its kernel / kernel_rows are called
        args = (self._t_arg,) + self._z_args + self._th_args
        try:
            return sp.lambdify(args, list(reduced), modules="numpy",
                               cse=lambda _: (repl, reduced), printer=numpy_printer(sp),
                               **_lambdify_options(sp))
        except Exception as exc:  # sympy's PrintMethodNotImplementedError and friends
            raise ValueError(f"a derivative cannot be printed as numpy code: "
                             f"{str(exc).splitlines()[0]}") from exc

    def _cse(self, exprs: list[Any]) -> tuple[list, list]:
        sp = self._sp
        renamed = [e.xreplace(self._rename) for e in exprs]
        return sp.cse(renamed, symbols=sp.numbered_symbols("_c"))

    def _numba_module(self, repl: list, reduced: list, sample: tuple | None = None) -> Any:
        """The generated numba code of one request (`invimbed._core.derivatives._codegen`):
        ``point(t, z (N,), theta (M,), out)`` computing the cse'd expressions at one
        sample and the batch loops ``kernel`` and ``kernel_rows`` over its lines that
        ``compile="numba"`` calls; with ``sample = (gather, shape, terminal)`` instead of
        the loops the per-sample function ``sample`` (``sample_T``) that
        ``backend="numba"`` calls, and the ``GATHER`` map through which the CUDA kernel
        reads ``point``'s values. One code printer for all; numba compiles only the
        functions called; cached on disk."""
        try:
            text = _codegen.printed(self._t_arg, self._z_args, self._th_args, repl, reduced)
            body = (_codegen.point_source(self._t_arg, self._z_args, self._th_args, repl,
                                          reduced, text, loops=sample is None)
                    if reduced else [])   # a per-sample request's loops are never called
            if sample is not None:
                gather, shape, terminal = sample
                body += [""] * 2 + _codegen.sample_source(text, reduced, gather, shape,
                                                          self.n_theta, terminal)
        except Exception as exc:  # sympy's PrintMethodNotImplementedError and friends
            raise ValueError(
                f"compile='numba' and backend='numba' cannot print an expression as plain "
                f"Python ({exc}); use compile=None and backend='numpy' for this problem"
            ) from exc
        return _codegen.load(body)

    def time_free(self) -> bool:
        """Whether the dynamics and the running loss do not depend on the time ``t``."""
        ex = self.expressions
        return not any(e.has(self.t) for e in (*ex["f"], ex["R"]))

    def sample_function(self, which: str, dz: int = 0, dth: int = 0) -> Callable:
        """The derivative tensor ``(which, dz, dth)`` at one sample, as a ``numba.njit``
        function in the convention of per-sample problems: ``g(t, z (N,), theta (M,))``
        returning an array of shape ``(*out, *[N]*dz, *[M]*dth)`` (a float when that is
        ``()``); ``g(z)`` for the terminal loss. This is how ``backend="numba"`` runs a
        problem built with `from_sympy`: the same generated code as ``compile="numba"``.
        Needs numba; cached per ``(which, dz, dth)``."""
        _check_request(which, dz, dth, "dz")
        key = ("sample", which, dz, dth)
        fn = self._compiled.get(key)
        if fn is None:
            if not hasattr(self, "_numba"):
                self._numba = import_numba()
            exprs, gather, shape = self._entries("tensor", which, dz, dth)
            self.codegen_calls += 1
            repl, reduced = self._cse(exprs) if exprs else ([], [])
            module = self._numba_module(repl, reduced, (gather, shape, which == "T"))
            fn = module.sample_T if which == "T" else module.sample
            self._compiled[key] = fn
        return fn

    def numeric(self, which: str) -> Callable:
        """A vectorised numpy callable for ``which`` itself, in the call convention of
        :class:`invimbed.BolzaProblem` with ``vectorized=True``: ``f(t, z, theta)``,
        ``R(t, z, theta)``, ``T(z)``; ``z`` of shape (B, N) or (N,)."""
        if which not in _WHICH:
            raise ValueError(f"`which` must be one of {_WHICH}, but got {which!r}")
        return _Numeric(self, which)


class _Compiled:
    """A generated request: compiled code plus the map from distinct to full entries."""

    def __init__(self, fn: Callable, n_values: int, gather: np.ndarray,
                 shape: tuple[int, ...], numba: bool) -> None:
        self.fn = fn
        self.n_values = n_values
        self.gather = gather
        self.shape = shape
        self.numba = numba

    def __call__(self, t: float, z: np.ndarray, theta: np.ndarray) -> np.ndarray:
        B = z.shape[0]
        n = self.n_values
        if self.gather.size == 0:
            return np.zeros((B,) + self.shape)
        rows = type(t) is not float and np.ndim(t) != 0   # per-row times (an array (B,))
        # a numpy scalar: 1 / (t - t0) at t0 is inf, not a Python ZeroDivisionError; the
        # arrays writeable and C-contiguous whatever comes (`derivative` hands theta
        # read-only, `taylor` the caller's): numba compiles a kernel once per argument
        # type, and read-only is another
        t = np.require(t, float, ["C", "W"]) if rows else np.float64(t)
        if self.numba:
            buf = np.zeros((B, n + 1))
            if n:
                kernel = self.fn.kernel_rows if rows else self.fn.kernel
                kernel(t, np.require(z, float, ["C", "W"]), np.require(theta, float, ["C", "W"]),
                       buf)
            return buf[:, self.gather].reshape((B,) + self.shape)
        buf = np.empty((n + 1, B))
        buf[n] = 0.0
        if n:
            values = self.fn(t, *np.ascontiguousarray(z.T), *np.ascontiguousarray(theta.T))
            for j, v in enumerate(values):
                buf[j] = v   # broadcasts constants, which lambdify returns as scalars
        return buf.T[:, self.gather].reshape((B,) + self.shape)


class _Numeric:
    """``f``, ``R`` or ``T`` as a vectorised callable (order-0 request of the provider)."""

    def __init__(self, provider: SympyProvider, which: str) -> None:
        self.provider = provider
        self.which = which
        self.expr = provider.expressions[which]

    def __call__(self, *args: Any) -> np.ndarray:
        prov = self.provider
        if self.which == "T":
            if len(args) != 1:
                raise TypeError(f"the terminal loss takes one argument z, but got {len(args)}")
            t, z, theta = 0.0, args[0], None
        else:
            if len(args) != 3:
                raise TypeError(f"{'the dynamics' if self.which == 'f' else 'the running loss'} "
                                f"takes (t, z, theta), but got {len(args)} arguments")
            t, z, theta = args
        z = np.asarray(z, dtype=float)
        single = z.ndim == 1
        zb = np.atleast_2d(z)
        if theta is None:
            th = np.zeros((zb.shape[0], prov.n_theta))
        else:
            th = np.asarray(theta, dtype=float)
            th = np.broadcast_to(np.atleast_2d(th), (zb.shape[0], prov.n_theta))
        out = prov.derivative(self.which, t, zb, th)
        return out[0] if single else out

    def __repr__(self) -> str:
        name = {"f": "dynamics", "R": "running_loss", "T": "terminal_loss"}[self.which]
        return f"<lambdified {name}: {self.expr}>"


def _lambdify_options(sp: Any) -> dict[str, Any]:
    # printing a long expression into the docstring is slow; sympy >= 1.12 can skip it
    import inspect

    return ({"docstring_limit": 0}
            if "docstring_limit" in inspect.signature(sp.lambdify).parameters else {})


def _nothing(*args: Any) -> list:
    return []
