"""A shooting interval's right-hand side with its first-order sensitivities, generated
once as ONE numpy function for a problem written in sympy (`invimbed.from_sympy`).

`invimbed._control.ocp.shooting.Shooting` integrates, per interval, the state ``z``, the
running cost ``c`` and their sensitivities with respect to ``(s_k, u_k)``:

```text
dz/dt  = f,   dc/dt = R,   dS/dt = f_z S + [0 | f_theta],   dcS/dt = R_z S + [0 | R_theta]
```

For a provider that is a sympy provider generating numpy code, these
``n + 1 + n (n + m) + (n + m)`` right-hand sides are written out symbolically (the
products ``f_z S`` included), their common subexpressions shared (``sympy.cse``), and
printed into one function of the ensemble's columns: one call per stage of the ensemble
instead of six derivative calls, a matrix product and an assembly, with ``sin``, ``exp``
and the like evaluated once for ``f`` and its derivatives. The code is generated once
per provider (cached) and gives the values of the six-call path to rounding.

Where numba is installed the same expressions (and those of the second-order rows of
`invimbed._control.ocp.second_order`) are printed instead as a numba function of ONE row,
``point(t, y, u, out)`` (`compiled_rows`), which the compiled per-row loop of
`invimbed._backends.ocp_rows` integrates: the default for a sympy provider (from_sympy,
or traced from plain functions). The numpy function serves without numba, where numba
cannot print or compile the expressions, and with ``backend="numpy"`` (`rows_backend`:
the ``backend`` keyword of `invimbed.solve_ocp`). A problem's rows are compiled once per
problem and machine, announced (`compile_cost.compiling`, ``"ocp_point"``).
"""

from __future__ import annotations

import functools
import importlib.util
import weakref
from typing import Any, Callable

import numpy as np

from ..._backends.ocp_rows import POINT_SIGNATURE
from ..._core.derivatives._sympy_input import numpy_printer
from ..._core.derivatives.symbolic import SympyProvider, _lambdify_options
from ..._core.inputs.validation import check_choice
from ..._core.runtime.compile_cost import compiling
from .sparsity import row_pattern, row_tensors

_CACHE: "weakref.WeakKeyDictionary[Any, Callable]" = weakref.WeakKeyDictionary()


def variational_rhs(provider: Any) -> Callable | None:
    """``rhs(t, y, u) -> dy/dt`` for the ensemble's rows ``y = (z, c, S, cS)`` (B,
    n + 1 + n (n + m) + n + m) and controls ``u`` (B, m), generated once for a sympy
    provider of numpy code; None for any other provider (the six-call path serves)."""
    if not isinstance(provider, SympyProvider) or provider.compile is not None:
        return None
    fn = _CACHE.get(provider)
    if fn is None:
        fn = _generate(provider)
        _CACHE[provider] = fn
    return fn


def _first_order(prov: SympyProvider) -> tuple:
    """``(t, z, u, S, exprs)``: the symbols of the row's time, state, control and
    sensitivities, and the row's right-hand sides ``(f, R, dS, dcS)`` in them."""
    import sympy as sp

    n, m = prov.n_state, prov.n_theta
    nm = n + m
    f = list(prov.expression("f"))
    f_z, f_u = prov.expression("f", 1, 0), prov.expression("f", 0, 1)
    R = prov.expression("R")
    R_z, R_u = prov.expression("R", 1, 0), prov.expression("R", 0, 1)
    S = [[sp.Symbol(f"_S{i}_{j}") for j in range(nm)] for i in range(n)]
    dS = [sum((f_z[i, k] * S[k][j] for k in range(n)), sp.S.Zero)
          + (f_u[i, j - n] if j >= n else 0) for i in range(n) for j in range(nm)]
    dcS = [sum((R_z[k] * S[k][j] for k in range(n)), sp.S.Zero)
           + (R_u[j - n] if j >= n else 0) for j in range(nm)]
    t_arg, z_args, u_args, rename = row_symbols(prov)
    exprs = [sp.sympify(e).xreplace(rename) for e in (*f, R, *dS, *dcS)]
    return t_arg, z_args, u_args, [s for row in S for s in row], exprs


def row_symbols(prov: SympyProvider) -> tuple:
    """``(t, z, u, rename)``: the symbols of a row's time, state and control, and the
    map from the problem's symbols to them."""
    import sympy as sp

    t_arg = sp.Symbol("_t")
    z_args = [sp.Symbol(f"_z{i}") for i in range(prov.n_state)]
    u_args = [sp.Symbol(f"_u{j}") for j in range(prov.n_theta)]
    rename = {prov.t: t_arg, **dict(zip(prov.z, z_args)), **dict(zip(prov.theta, u_args))}
    return t_arg, z_args, u_args, rename


def _generate(prov: SympyProvider) -> Callable:
    import sympy as sp

    n, m = prov.n_state, prov.n_theta
    nm = n + m
    t_arg, z_args, u_args, S, exprs = _first_order(prov)
    repl, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_c"))
    args = (t_arg, *z_args, *u_args, *S)
    code = sp.lambdify(args, list(reduced), modules="numpy", cse=lambda _: (repl, reduced),
                       printer=numpy_printer(sp), **_lambdify_options(sp))
    i_S = n + 1

    def rhs(t: Any, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        values = code(t, *y[:, :n].T, *u.T, *y[:, i_S:i_S + n * nm].T)
        out = np.empty(y.shape)
        for j, v in enumerate(values):
            out[:, j] = v           # broadcasts the constants lambdify returns as scalars
        return out

    return rhs


# -- the compiled rows ------------------------------------------------------------------
_COMPILED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


#: The values of ``backend`` of `invimbed.solve_ocp` and `invimbed.OCPSolver`.
ROW_BACKENDS = ("auto", "numpy", "numba")


def compiled_available(provider: Any) -> bool:
    """Whether the shooting rows of ``provider`` run as compiled code
    (`invimbed._backends.ocp_rows`): a sympy provider (`invimbed.from_sympy`, or a
    problem of plain functions whose trace succeeded: `TracedProvider` is one) where
    numba is installed."""
    return isinstance(provider, SympyProvider) and _have_numba()


def rows_backend(backend: Any, provider: Any, transcription: str = "shooting") -> str:
    """The rows that ``backend`` (`ROW_BACKENDS`, checked) runs for ``provider``:
    ``"numba"`` (the compiled rows, their first-order code generated and compiled here)
    or ``"numpy"``. ``"auto"`` is ``"numba"`` where `first_order_rows` compiles, else
    ``"numpy"``; ``"numba"`` where it cannot is a ValueError naming ``backend``, why and
    the fix."""
    check_choice(backend, "backend", ROW_BACKENDS)
    if backend == "numpy" or (backend == "auto" and transcription != "shooting"):
        return "numpy"
    why = None
    if transcription != "shooting":
        why = (f"the compiled rows are multiple shooting's; transcription="
               f"{transcription!r} runs its own numpy code")
    elif not _have_numba():
        why = "numba is not installed (pip install \"invimbed[numba]\")"
    elif not isinstance(provider, SympyProvider):
        source = getattr(provider, "derivative_source", getattr(provider, "name", ""))
        why = (f"the compiled rows need the problem's functions as sympy expressions "
               f"(invimbed.from_sympy, or plain numpy functions that trace), but this "
               f"problem's derivatives are {source!r}")
    elif first_order_rows(provider) is None:
        why = "numba could not print or compile this problem's generated rows"
    if why is None:
        return "numba"
    if backend == "auto":
        return "numpy"
    raise ValueError(f"`backend='numba'` cannot run here: {why}; use backend='auto' (the "
                     f"compiled rows where possible, else numpy) or backend='numpy'")


@functools.lru_cache(maxsize=None)
def _have_numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def compiled_rows(provider: Any, key: Any, build: Callable[[], tuple]) -> Any:
    """The generated right-hand side ``point(t, y, u, out)`` of one row of the rows
    ``key`` of ``provider`` (`invimbed._backends.ocp_rows`; compiled for its
    `POINT_SIGNATURE`, a first-class function value), generated once per provider and
    key from ``build() -> (t, y, u, exprs)``: the symbols of the row's time, its state entries in order (None
    for an entry no right-hand side reads) and its control, and the right-hand side of
    every entry. None where `compiled_available` is not, or where the expressions
    cannot be printed as Python or compiled by numba: the numpy path serves them."""
    if not compiled_available(provider):
        return None
    per = _COMPILED.setdefault(provider, {})
    if key not in per:
        from numba.core.errors import NumbaError
        from numba.core.types.function_type import CompileResultWAP

        try:
            point = _row_module(*build()).point
            with compiling("ocp_point", [(point, POINT_SIGNATURE)]):  # announced: 1-15 s
                point.compile(POINT_SIGNATURE)
        except (NotImplementedError, ValueError, SyntaxError, NumbaError):
            # sympy cannot print the expressions as Python, or numba refuses them
            per[key] = None     # the numpy path serves (the same values, slower)
        else:   # its machine code's address, looked up once (numba would at every call)
            per[key] = CompileResultWAP(point.overloads[point.signatures[0]])
    return per[key]


def first_order_rows(provider: Any, backend: str = "auto") -> Any:
    """`compiled_rows` of the first-order rows ``y = (z, c, S, cS)`` (`variational_rhs`);
    None with ``backend="numpy"``."""
    if backend == "numpy":
        return None

    def build() -> tuple:
        import sympy as sp

        t_arg, z_args, u_args, S, exprs = _first_order(provider)
        return t_arg, [*z_args, sp.Symbol("_cost"), *S], u_args, exprs

    return compiled_rows(provider, "first", build)


def _row_module(t_arg: Any, y_args: list, u_args: list, exprs: list) -> Any:
    """The generated numba module of one row's right-hand side ``point(t, y, u, out)``
    (`invimbed._core.derivatives._codegen`, cached on disk)."""
    import sympy as sp
    from ..._core.derivatives import _codegen

    y_args = [a if a is not None else sp.Symbol(f"_unused{i}") for i, a in enumerate(y_args)]
    repl, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_c"))
    body = _codegen.point_source(t_arg, tuple(y_args), tuple(u_args), repl, reduced,
                                 loops=False)       # the rows call point only
    return _codegen.load(body, options=", error_model='numpy'")


def second_order_rows(provider: Any, active: np.ndarray, factor: float,
                      backend: str = "auto", columns: np.ndarray | None = None) -> Any:
    """`compiled_rows` of the second-order rows of `invimbed._control.ocp.second_order`:
    ``y = (z, c, Y_p, Y_pp[active] / factor)`` with ``dY_p/dt = g_w W`` and ``dY_pp/dt =
    g_z Y_pp + W^T g_ww W`` (``W = [Y_p[:n]; 0 | I]``, ``g = (f, R)``); ``Y_pp`` is carried
    divided by ``factor`` (`second_order.HESSIAN_TOL_FACTOR`), so that the loop's one
    tolerance measures it ``factor`` times more loosely in absolute terms. ``columns``:
    the flat positions in ``Y_pp[active]`` (A, P, P) carried (default all), the others
    structurally zero (`invimbed._control.ocp.sparsity`). None with ``backend="numpy"``."""
    if backend == "numpy":
        return None
    active = tuple(int(a) for a in active)
    P = provider.n_state + provider.n_theta
    if columns is None:
        columns = np.arange(len(active) * P * P)
    columns = tuple(int(c) for c in columns)

    def build() -> tuple:
        import sympy as sp

        n, m = provider.n_state, provider.n_theta
        P = n + m
        t_arg, z_args, u_args, rename = row_symbols(provider)
        g_w, g_ww = row_tensors(provider, rename)
        pattern = row_pattern(provider)
        Yp = [[sp.Symbol(f"_Y{i}_{p}") for p in range(P)] for i in range(n + 1)]
        carried = {tuple(int(i) for i in np.unravel_index(c, (len(active), P, P)))
                   for c in columns}
        Y2 = {a: [[sp.Symbol(f"_Z{a}_{p}_{q}") if (r, p, q) in carried else sp.S.Zero
                   for q in range(P)] for p in range(P)] for r, a in enumerate(active)}
        # W = [Y_p[:n]; 0 | I], its structural zeros (`sparsity.row_pattern`) as 0
        W = [[(Yp[k][p] if pattern is None or pattern.Y_p[k, p] else sp.S.Zero) if k < n
              else sp.S.One if p == k else sp.S.Zero for p in range(P)] for k in range(P)]

        def dot(pairs):
            return sp.Add(*(a * b for a, b in pairs if a != 0 and b != 0))
        dYp = [dot((g_w[i, k], W[k][p]) for k in range(P))
               for i in range(n + 1) for p in range(P)]
        dY2 = []
        for r, a in enumerate(active):
            for p in range(P):
                for q in range(P):
                    if (r, p, q) not in carried:
                        continue
                    lo, hi = min(p, q), max(p, q)      # W^T g_ww W, symmetric
                    quad = dot((W[k][lo] * W[l][hi], g_ww[a, k, l])
                               for k in range(P) for l in range(P))
                    coupled = dot((g_w[a, b], Y2[b][p][q]) for b in active if b < n)
                    dY2.append(coupled + quad / factor)
        f = [sp.sympify(e).xreplace(rename) for e in provider.expression("f")]
        R = sp.sympify(provider.expression("R")).xreplace(rename)
        y_args = [*z_args, None, *(s for row in Yp for s in row),
                  *(Y2[a][p][q] for r, a in enumerate(active) for p in range(P)
                    for q in range(P) if (r, p, q) in carried)]
        return t_arg, y_args, u_args, [*f, R, *dYp, *dY2]

    return compiled_rows(provider, ("second", active, float(factor), columns), build)
