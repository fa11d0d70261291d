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
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from ..._core.derivatives._sympy_input import numpy_printer
from ..._core.derivatives.symbolic import SympyProvider, _lambdify_options

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


def _generate(prov: SympyProvider) -> Callable:
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
    t_arg = sp.Symbol("_t")
    z_args = [sp.Symbol(f"_z{i}") for i in range(n)]
    u_args = [sp.Symbol(f"_u{j}") for j in range(m)]
    rename = {prov.t: t_arg, **dict(zip(prov.z, z_args)), **dict(zip(prov.theta, u_args))}
    exprs = [sp.sympify(e).xreplace(rename) for e in (*f, R, *dS, *dcS)]
    repl, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_c"))
    args = (t_arg, *z_args, *u_args, *(s for row in S for s in row))
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
