"""The shooting rows of `invimbed.solve_ocp` / `invimbed.OCPSolver` as compiled code
(docs/optimization.md, "A solver built once: `OCPSolver`").

`invimbed._control.ocp.shooting.Shooting` integrates every shooting interval as one row
of an ensemble: the state, the running cost and their sensitivities (first order, and
for the exact Hessian second order, `invimbed._control.ocp.second_order`). For a problem
written in sympy (`invimbed.from_sympy`) the right-hand side of such a row is generated
as one numba function of a single row, ``point(t, y, u, out)``
(`invimbed._control.ocp.variational.compiled_rows`), and the rows are integrated here by
THE per-row loop of the compiled ensembles, `invimbed._backends._ensemble_kernels._integrate`
(scipy's RK45/RK23 rules, the same decisions in the same order as the numpy ensemble
`invimbed._core.integrators.ensemble.integrate_rows`, so both take the same steps and
agree to rounding), with its right-hand side ``_rhs`` replaced by one that calls
``point`` with the row's control: a copy of the loop's Python source bound to other
globals (`_rebind`), as `invimbed._backends._cuda_device.device` binds it for the GPU.

The rows run one after the other in one compiled call (`integrate`), every row with its
own adaptive steps, their dense output (``record``) chained in one buffer that doubles
when full; `integrate` returns the numpy ensemble's `RowsOutcome` (failed rows NaN,
`DenseRows` for the dense output). ``point`` arrives as a first-class function value, so
the loop is compiled once per machine (`dispatcher`, kept in numba's disk cache) and a new
problem compiles its ``point`` only (a generated module, `invimbed._core.derivatives._codegen`,
cached on disk too).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import numpy as np

from .._core.integrators.ensemble import DONE, DenseRows, RowsOutcome
from . import _bundles as bundles

#: The compiled entry (`_entry`), built at its first use.
_ENTRY: list = []


def _rebind(fn: Any, cache: bool = False, **replace: Any) -> Any:
    """A ``numba.njit`` copy of the function ``fn`` (or numba function's) whose globals
    ``replace`` names are other functions; ``cache``: kept in numba's disk cache under
    ``fn``'s name, for ``fn`` of this module only (``_rows``: `dispatcher`; numba
    keys its cache by the function's own source file and code, which `_integrate`'s
    copy with this module's `_rhs` shares with the ensemble's `_integrate`, so that copy
    is compiled into the cached ``_rows``, not cached itself)."""
    from numba import njit

    py = getattr(fn, "py_func", fn)
    glb = dict(py.__globals__)
    glb.update(replace)
    new = types.FunctionType(py.__code__, glb, py.__name__, py.__defaults__, py.__closure__)
    new.__doc__ = py.__doc__
    new.__qualname__ = py.__qualname__
    # the copies that are not cached are called by compiled code only: no CPython wrapper
    # (`invimbed._backends._numba_calls._inner_numpy`)
    return njit(cache=cache, error_model="numpy", no_cpython_wrapper=not cache)(new)


def _rhs(mode, t, y, piece, out, values, dense, nd, ptr, ctx):
    """The loop's right-hand side for a shooting row: ``point(t, y, u, out)`` with
    ``(point, u) = ctx``, the row's generated function and its control (``mode``,
    ``piece``, ``values`` and the dense output are the loop's, unused: the control is
    constant on a row)."""
    point, u = ctx
    point(t, y, u, out)


def _rows(point, t0, t1, Y, U, step, mode, status, t_end, steps, nfev, hl):
    """Rows ``r`` from ``t0[r]`` to ``t1[r]``, ``Y[r]`` updated in place, control
    ``U[r]``, one after the other; ``mode`` 0 records the dense output of each. Returns
    the dense buffer and ``starts`` (row ``r``'s steps are ``starts[r]:starts[r + 1]``)."""
    R, S = Y.shape
    ns = step.B.shape[0]
    kq = step.P.shape[1]
    rk = (np.empty((ns + 1, S)), np.empty(S), np.empty(S), np.empty(S), np.empty(S),
          np.empty(S))
    dense = np.empty((32, 2 + S + S * kq))
    # a run-time zero: numba would compile the loop once more for ``nd``'s literal 0
    # (seconds: the first call's argument types, before the loop's unify)
    nd = np.int64(0)
    ptr = np.zeros(1, dtype=np.int64)
    starts = np.zeros(R + 1, dtype=np.int64)
    for r in range(R):
        st, te, nst, nfe, h_l, dense, nd = _integrate(   # noqa: F821 - bound by `dispatcher`
            mode, t0[r], t1[r], Y[r], step, rk, dense, nd, ptr, (point, U[r]))
        status[r] = st
        t_end[r] = te
        steps[r] = nst
        nfev[r] = nfe
        hl[r] = h_l
        starts[r + 1] = nd
    return dense, starts


#: The signature of a row's right-hand side ``point(t, y, u, out)``.
POINT_SIGNATURE = "void(float64, float64[::1], float64[::1], float64[::1])"


def dispatcher() -> Any:
    """The compiled entry's numba dispatcher (cached on disk): `_rows` around
    `_ensemble_kernels._integrate` with `_rhs` in place of its right-hand side. `_rows`
    itself, not a function of this module that calls it: every level of direct calls
    has numba link and optimise the code below it again (measured from an empty cache:
    17.0 s of CPU for the kernel with such a wrapper, 10.8 s without)."""
    from ._ensemble_kernels import _integrate

    return _rebind(_rows, cache=True, _integrate=_rebind(_integrate, _rhs=_rebind(_rhs)))


def _entry(step: Any) -> Any:
    """The compiled `dispatcher` for the types of ``step`` (once per machine, kept in
    numba's disk cache; announced by `invimbed._core.runtime.compile_cost.compiling`
    while it is compiled), ``point`` a first-class function value."""
    if not _ENTRY:
        import numba
        from numba import types as nt
        from numba.core import sigutils

        from .._core.runtime.compile_cost import compiling

        run = dispatcher()
        args, ret = sigutils.normalize_signature(POINT_SIGNATURE)
        f8, i8 = nt.float64, nt.int64
        C1, C2, I1 = nt.Array(f8, 1, "C"), nt.Array(f8, 2, "C"), nt.Array(i8, 1, "C")
        sig = (nt.FunctionType(ret(*args)), C1, C1, C2, C2, numba.typeof(step), i8, I1, C1,
               I1, I1, C1)
        with compiling("ocp_rows", [(run, sig)]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
            run.compile(sig)
        run.disable_compile()
        # its entry point: no typing of the arguments at each call
        _ENTRY.append(run.overloads[run.signatures[0]].entry_point)
    return _ENTRY[0]


def integrate(point: Any, t0: np.ndarray, t1: np.ndarray, y0: np.ndarray, U: np.ndarray, *,
              tableau: Any, rtol: float, atol: float, max_steps: int,
              first_step: float | None = None, max_step: float = np.inf,
              record: bool = False) -> RowsOutcome:
    """`integrate_rows` of the rows ``y0`` (R, S) from ``t0`` to ``t1`` with controls
    ``U`` (R, m), the right-hand side of a row the generated ``point(t, y, u, out)``
    (compiled for `POINT_SIGNATURE`): the same outcome, ``nfev`` the most evaluations of
    any row."""
    R, S = y0.shape
    m = U.shape[1]
    Y = np.array(y0, dtype=float, order="C")
    status = np.zeros(R, dtype=np.int64)
    t_end = np.zeros(R)
    steps = np.zeros(R, dtype=np.int64)
    nfev = np.zeros(R, dtype=np.int64)
    hl = np.zeros(R)
    step = bundles.row_steps(tableau, np.array([-np.inf, np.inf]), np.zeros((1, max(m, 1))),
                             np.empty(0), rtol, atol, first_step, max_step, max_steps)
    c = np.ascontiguousarray
    dense, starts = _entry(step)(point, c(t0, dtype=float), c(t1, dtype=float), Y,
                                 c(U, dtype=float), step, 0 if record else 1, status,
                                 t_end, steps, nfev, hl)
    Y[status != DONE] = np.nan
    rows = None
    if record:
        nd = int(starts[-1])
        D = dense[:nd]
        rows = DenseRows(D[:, 0].copy(), D[:, 1].copy(), D[:, 2:2 + S].copy(),
                         D[:, 2 + S:].reshape(nd, S, -1).copy(), starts)
    return RowsOutcome(y=Y, status=status, t=t_end, nsteps=steps,
                       nfev=int(nfev.max()) if R else 0, h_lambda=hl, dense=rows)

