"""Compile every numba kernel of the package once: ``python -m invimbed compile``
(docs/performance.md, "Compiled kernels and the first run on a machine").

Each kernel of `invimbed._core.runtime.compile_cost.KERNELS` is warmed by the smallest call
that runs it, through the code path a solve takes (so the announcement, the on-disk
cache and the recorded compile time are those of a solve): the fixed-step and adaptive
numba sweeps and the numba ensemble on a 2-state problem of per-sample functions
compiled here (``cache=True``, derivatives by finite differences, so nothing is traced
or generated per problem), the depth gradient's loop on 1024 rows, the Taylor-mode
kernel on a one-variable tape, the contraction on a small table, the compiled
shooting rows on one row, the generated jet right-hand side (compiled per problem)
on the same 2-state problem from sympy expressions. A kernel already in numba's
cache is loaded, not compiled.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, Callable

import numpy as np
from numba import njit

from .._core.reference.adjoint import solve_adjoint
from .._core.runtime.compile_cost import COMPILED
from .._core.sweep.imbedding import solve_imbedding
from .._core.problem.open_loop import Constant
from .._core.problem.bolza import BolzaProblem


@njit(cache=True)
def _f(t, z, th):
    return np.array([z[1], -z[0] + th[0]])


@njit(cache=True)
def _R(t, z, th):
    return 0.5 * (z[0] * z[0] + th[0] * th[0])


@njit(cache=True)
def _T(z):
    return 0.5 * (z[0] * z[0] + z[1] * z[1])


@lru_cache(maxsize=None)
def _problem() -> Any:
    return BolzaProblem(_f, _R, _T, derivatives="finite-differences")


_X = np.array([0.3, -0.1])
_DEPTHS = np.array([-0.5, -0.25])


def _solve(**kw: Any) -> None:
    x = kw.pop("x", _X)
    _check(solve_imbedding(_problem(), x, _DEPTHS, control=Constant([0.1]), backend="numba",
                           **kw))


def _check(res: Any) -> None:
    if not np.all(np.isfinite(res.value)):
        raise RuntimeError(f"the warm-up solve failed: {res.message}")


def _ensemble() -> None:
    _check(solve_adjoint(_problem(), _X, _DEPTHS, control=Constant([0.1]), backend="numba"))


def _values() -> None:
    from ._numba import COMPILED_ROWS

    _solve(method="euler", step=0.25, x=np.tile(_X, (COMPILED_ROWS // _DEPTHS.size, 1)),
           estimate_error=False)


def _taylor() -> None:
    import sympy as sp

    from .._core.derivatives._taylor_numba import evaluate
    from .._core.derivatives._tape import build_tape

    t, a = sp.symbols("t a")
    tape = build_tape(sp, [sp.sin(a) * a], t, [a], [a])
    evaluate(tape, np.zeros(1), np.array([[0.5]]), 4)


def _contract() -> None:
    from .._core.closures.jet import _kernel, run_contraction
    from .._core.derivatives.multiindex import n_coefficients, product_table

    ia, ib, io = product_table(1, 1, 1, 1)
    a, b = np.ones((1, 1, 1, 2)), np.ones((1, 1, 1, 2))
    run_contraction(_kernel(), a, b, ia, ib, io, n_coefficients(1, 1))


@njit(cache=True)
def _point(t, y, u, out):
    out[0] = u[0] - y[0]


def _ocp_rows() -> None:
    from .._core.integrators.ensemble import TABLEAUX
    from .ocp_rows import integrate

    out = integrate(_point, np.zeros(1), np.ones(1), np.ones((1, 1)), np.zeros((1, 1)),
                    tableau=TABLEAUX["RK45"], rtol=1e-6, atol=1e-9, max_steps=100)
    if not np.all(np.isfinite(out.y)):
        raise RuntimeError("the warm-up of the compiled shooting rows failed")


@lru_cache(maxsize=None)
def _sympy_problem() -> Any:
    """The 2-state problem of `_problem` from sympy expressions (its jet code)."""
    import sympy as sp

    t, a, b, u = sp.symbols("t a b u")
    return BolzaProblem.from_sympy(t, [a, b], [u], [b, -a + u], (a * a + u * u) / 2,
                                   (a * a + b * b) / 2)


def _jet_code() -> None:
    _check(solve_imbedding(_sympy_problem(), _X, _DEPTHS, control=Constant([0.1]),
                           backend="numba", method="rk4", step=0.25))


#: How each kernel of `invimbed._core.runtime.compile_cost.KERNELS` is warmed.
WARMERS: dict[str, Callable[[], None]] = {
    "sweep_fixed": lambda: _solve(method="rk4", step=0.25),
    "values": _values,
    "sweep_adaptive": lambda: _solve(method="RK45"),
    "ensemble": _ensemble,
    "taylor": _taylor,
    "contract": _contract,
    "ocp_rows": _ocp_rows,
    "jet_code": _jet_code,
}

#: The kernels in two lines of compilation, for compiling them in two processes at once
#: (the test suite's warm-up, tests/conftest.py) without compiling the same functions
#: twice. Numba compiles a kernel's callees as functions of their own and keeps them in
#: its on-disk cache, where any later compilation finds them: the first line's kernels
#: reuse each other's (the depth gradient's warm-up runs the fixed-step sweep; the
#: adaptive sweep calls its jet right-hand side), and the adaptive sweep also calls the
#: second line's tape interpreter and the ensemble's step helpers
#: (`_ensemble_parts`), which that line
#: compiles first, while the first line compiles the fixed-step sweep. The generated jet
#: code's warm-up runs the fixed-step sweep (first line); the compiled shooting rows are
#: the ensemble's per-row loop rebound (second line, after the ensemble). Split otherwise
#: (the adaptive sweep alone against the rest), the shared functions were compiled in
#: both processes.
LINES: tuple[tuple[str, ...], ...] = (("sweep_fixed", "jet_code", "values", "sweep_adaptive"),
                                      ("taylor", "ensemble", "ocp_rows", "contract"))


def warm(name: str) -> tuple[float, float, bool]:
    """Run kernel ``name`` once: ``(wall, cpu, compiled)``, its wall and CPU seconds (of
    this process) and whether it was compiled here (False: loaded from numba's cache, or
    already in this process)."""
    before = COMPILED.get(name)
    start, cpu = time.perf_counter(), time.process_time()
    WARMERS[name]()
    return (time.perf_counter() - start, time.process_time() - cpu,
            COMPILED.get(name) is not before)


def representative(name: str) -> Any:
    """A numba dispatcher of kernel ``name`` (the one that costs most of its compile
    time), for its cache directory and a look at whether numba's cache holds it."""
    if name == "sweep_fixed":
        from ._numba_kernels import _jet_sweep_one as d
    elif name == "values":   # the loop is compiled with `cache=True` where it is built
        from numba import njit as _njit

        from ._numba_calls import request_rows

        d = _njit(cache=True, nogil=True)(request_rows)
    elif name == "sweep_adaptive":
        from ._sweep_kernels import sweep_one as d
    elif name == "ensemble":
        from ._ensemble_kernels import _row as d
    elif name == "taylor":
        from .._core.derivatives._taylor_numba import run as d
    elif name == "ocp_rows":
        from .ocp_rows import dispatcher

        d = dispatcher()
    elif name == "contract":
        from .._core.closures._contract_numba import contract as d
    else:   # generated per problem: the warm-up problem's
        from .._core.derivatives._jet_code import jet_function

        d = jet_function(_sympy_problem().derivative_provider, (1, 2))
    return d

