"""``backend="numba"``: the fixed-step jet sweep (order 1) compiled with numba.

How it works
------------
* The user's ``dynamics``, ``running_loss``, ``terminal_loss`` (and any derivatives given
  in ``derivatives=``) are compiled for one sample, ``(t: float, z: (N,), theta: (M,))``
  (``T(z)`` for the terminal loss), with numba's ``nopython`` mode. Functions already
  decorated with ``numba.njit`` are used as they are; plain Python functions are passed
  to ``numba.njit`` once. A function numba cannot compile raises
  `invimbed._backends._numba_functions.BackendCompileError`, naming it, with numba's reason: there is no silent fallback.
* Derivatives not given are taken inside the compiled code by the rule of
  `invimbed.FiniteDifferences` (nested central differences, the steps of
  `finite_difference.step_size`, compiled), and the numpy sweep adds its sums in the
  kernel's order (`invimbed._core.runtime.ordered`), so the numba and numpy backends agree bit
  for bit for the same functions (``tests/test_backends.py``: 1e-14).
* What it runs (`SCOPE`): the jet of order 1, which with exact derivatives beats numpy
  at every batch size measured (docs/performance.md; the stencil did not). The result
  (depth gradient, failures, accuracy) is assembled by the core, as for
  ``backend="numpy"`` (`invimbed._backends._result`).
* A problem built with ``from_sympy`` runs on the symbolic provider's generated
  per-sample code (`SympyProvider.sample_function`), the code ``compile="numba"`` uses.
* A problem with exact expressions (``from_sympy``, traced, or derivatives given that
  equal the trace's) runs, in the fixed-step sweep, the jet right-hand side generated for
  it (`jet_code`, `invimbed._core.derivatives._jet_code`): its Taylor coefficients and
  their products with the jet, only the terms that are not identically zero, compiled
  once per problem and cached on disk; the generic kernel (`_numba_kernels.jet_rhs` on
  index tables) serves the others. ``JET_CODE = False`` runs the generic one for all.
* The kernels (`invimbed._backends._numba_kernels`) run every sample's sweep in a
  serial loop over a chunk of the samples, the chunks on numba's number of threads
  (`invimbed._backends._chunks.run_rows`), write into preallocated outputs and are cached on disk
  (``cache=True``): the first call on a machine compiles them (about 40 s of CPU),
  saying so on stderr first (`compile_loop`, `invimbed._core.runtime.compile_cost.compiling`);
  later processes load them. ``python -m invimbed compile`` compiles them ahead of time.
* ``memory_budget``: the sweep's outputs and the kernel's fields at every depth are
  estimated before they are allocated (`invimbed._core.sweep.memory.check_compiled`).
"""

from __future__ import annotations

import warnings
from functools import cached_property, lru_cache
from typing import Any, Callable

import numpy as np

from .._core.setup.arguments import Setup
from .._core.runtime.compile_cost import compiling
from .._core.sweep.memory import check_compiled
from .._core.derivatives import DerivativeProvider
from .._core.derivatives._jet_code import jet_function
from .._core.derivatives.symbolic import SympyProvider
from .._core.derivatives.traced import CompletedProvider
from .._core.derivatives.multiindex import (derivative_table, multi_indices, n_coefficients,
                                             product_table)
from .._core.integrators.common import check_max_steps
from ._plans import Request, build_plan
from ._result import finish
from ._schedule import build_schedule, check_scope


from . import _bundles as bundles
from ._chunks import run_rows
from ._numba_functions import _types, function_tuple, import_numba


# -- jet -------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _jet_tables(N: int, K: int) -> tuple:
    """The index tables of `_numba_kernels.jet_rhs` for the jet of order ``K`` in ``N``
    variables, from `derivative_table` and `product_table` (those of the numpy closure):
    the derivative tables of Z and V, the product tables of the transports of Z and of V
    and W (without their (degree 1) x (degree 1) pairs, which `_numba_kernels._transport`
    takes as a dense N x N product) and of the parameter source, the pairs of each left
    coefficient (``ptr``), and the dense pairs' output indices of Z and of V."""
    zsrc, _, zfac = derivative_table(N, K)
    vsrc, _, vfac = derivative_table(N, K + 1)
    zp, zd = _dense_pairs(product_table(N, K - 1, K, K), N)
    vp, vd = _dense_pairs(product_table(N, K, K + 1, K + 1), N)
    sp = product_table(N, K + 1, K, K + 1)
    c = np.ascontiguousarray
    # the pairs of each left coefficient (`_numba_kernels.jet_rhs` walks them by it)
    ptrs = [np.searchsorted(t[0], np.arange((n_coefficients(N, k) if k >= 0 else 0) + 1))
            .astype(np.int64) for t, k in ((zp, K - 1), (vp, K), (sp, K + 1))]
    return (c(zsrc), c(zfac), *map(c, zp), c(vsrc), c(vfac), *map(c, vp), *map(c, sp),
            *ptrs, c(zd), c(vd))


#: The kind of each of the 18 tables of `_jet_tables` (``"i1"``: a 1-D int64 array, ``"i2"``
#: 2-D int64, ``"f2"`` 2-D float64), as `_packed.order_tables` rebuilds them.
TABLE_KINDS = ("i2", "f2", "i1", "i1", "i1", "i2", "f2", "i1", "i1", "i1", "i1", "i1", "i1",
               "i1", "i1", "i1", "i2", "i2")


@lru_cache(maxsize=None)
def packed_tables(N: int, orders: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `_jet_tables` of the jets of ``orders`` in ``N`` variables `bundles.pack`ed into
    three arrays ``(ti, tf, tm)``: every int64 table flat in ``ti``, every float64 one in
    ``tf``, and ``tm[o, k] = (start, rows, columns)`` of table ``k`` of ``orders[o]``
    (`_packed.order_tables` returns views of them): a kernel takes three arrays
    where it took 18 per order, and compiles minutes faster."""
    tables = [a for K in orders for a in _jet_tables(N, K)]
    for k, a in enumerate(tables):
        kind = TABLE_KINDS[k % len(TABLE_KINDS)]
        if a.dtype != (np.float64 if kind[0] == "f" else np.int64) or a.ndim != int(kind[1]):
            raise AssertionError(f"internal error: jet table {k} is a {a.ndim}-D {a.dtype} "
                                 f"array, not {kind}")
    ti, tf, _, meta = bundles.pack(tables)
    return ti, tf, meta.reshape(len(orders), len(TABLE_KINDS), 3)


def _dense_pairs(table: tuple, N: int) -> tuple[tuple, np.ndarray]:
    """``table`` (a `product_table`) without its pairs of two coefficients of degree 1,
    and those pairs' output indices as an N x N array ``D[j, k]`` (the product of the
    coefficients of ``delta_j`` and ``delta_k``); (0, 0) where it has none. The
    coefficients of degree 1 are 1 to N, those of ``delta_0`` to ``delta_{N-1}``
    (`multi_indices`' order), which is checked."""
    ia, ib, io = table
    if len(ia) and not np.array_equal(multi_indices(N, 1)[1:], np.eye(N, dtype=np.int64)):
        raise AssertionError("internal error: the coefficients of degree 1 are not 1 to N")
    one = (ia >= 1) & (ia <= N) & (ib >= 1) & (ib <= N)
    D = np.full((N, N) if one.any() else (0, 0), -1, np.int64)
    D[ia[one] - 1, ib[one] - 1] = io[one]
    if (D < 0).any():
        raise AssertionError("internal error: a dense pair of the product table is missing")
    keep = ~one
    return (ia[keep], ib[keep], io[keep]), D


def _kernel(name: str, args: tuple) -> tuple[Callable, Callable, Callable]:
    """The compiled kernel ``name`` (``"jet_sweep"``, ``"request_rows"``) for the types of
    ``args`` (cached on disk), the per-sample sweep it runs in its loop, and the
    derivative evaluator.

    The per-sample sweep and the derivative evaluator reach their callers as function
    pointers (first-class function values): numba then does not link and optimise their
    code a second time into every caller's module, which more than halves the cold
    compile time (measured: 45 s to 20 s of CPU for the jet).
    """
    st = _types()
    key = (name, _fingerprint(args[1:]))
    cache = st.setdefault("kernels", {})
    if key not in cache:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
            cache[key] = _build_kernel(name, args)
    return cache[key]


def eval_signature(args: tuple) -> tuple[tuple, Any, Any]:
    """The numba types of a kernel's arguments ``args`` (user functions first, the plan
    second; a function value of numba's wrapper-address protocol is typed by its
    signature) and the signature and first-class type of `eval_request` for them."""
    st = _types()
    from numba import types

    argtypes = tuple(st["ftypes"] if i == 0 else _typeof(a) for i, a in enumerate(args))
    f8, i8 = types.float64, types.int64
    C1, C2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
    ev_sig = types.void(st["ftypes"], argtypes[1], i8, f8, C1, C1, C2, C2, C1, C2, C1)
    return argtypes, ev_sig, types.FunctionType(ev_sig)


def _typeof(a: Any) -> Any:
    """numba's type of the kernel argument ``a``; a function value of numba's
    wrapper-address protocol, or a tuple of them, is typed by its signature."""
    from numba import typeof, types

    if hasattr(a, "__wrapper_address__"):
        return types.FunctionType(a.signature())
    if isinstance(a, tuple) and a and all(hasattr(x, "__wrapper_address__") for x in a):
        return types.Tuple(tuple(_typeof(x) for x in a))
    return typeof(a)


def jet_rhs_signature() -> Any:
    """The numba signature of `_numba_kernels.jet_rhs` as the kernels call it (the
    tables of one order, `TABLE_KINDS`; the scratch of `_numba_kernels.jet_scratch`):
    the kernels call it as a function value of this signature, so that numba does not
    link and optimise its code again into each of their functions that call it."""
    from numba import types

    f8, i8 = types.float64, types.int64
    v, m, iv, im = f8[::1], f8[:, ::1], i8[::1], i8[:, ::1]
    tab = types.Tuple(tuple({"i1": iv, "i2": im, "f2": m}[k] for k in TABLE_KINDS))
    ops = types.Tuple((iv, iv, v, im, iv, iv, iv, iv, v, v, v))
    return types.void(i8, i8, i8, i8, tab, m, v, f8[:, :, ::1], m, v, i8, v, ops, i8, m, m,
                      iv, im, v)


def _build_kernel(name: str, args: tuple) -> tuple[Callable, Callable, Callable]:
    from numba import types

    from ._numba_calls import eval_request, request_rows
    from ._numba_kernels import _jet_sweep_one, jet_rhs, jet_sweep

    if name == "request_rows":
        argtypes, ev_sig, ev_type = eval_signature(args)
        entry = compile_loop("values", request_rows, None, None, ev_sig, argtypes)
        return entry, None, eval_request
    # then the jet code, a flag, and `jet_rhs`
    argtypes, ev_sig, ev_type = eval_signature(args[:-3])
    argtypes += (types.FunctionType(code_signature()), types.boolean,
                 types.FunctionType(jet_rhs_signature()))
    one_sig = types.void(types.int64, ev_type, *argtypes)
    entry = compile_loop("sweep_fixed", jet_sweep, _jet_sweep_one, one_sig, ev_sig, argtypes,
                         first=[(jet_rhs, jet_rhs_signature())])
    return entry, _jet_sweep_one, eval_request


#: The row loops `compile_loop` compiled in this process, by kernel name (their numba
#: dispatchers: serial, ``nogil``).
LOOPS: dict[str, Any] = {}


def compile_loop(name: str, py_loop: Callable, one: Any, one_sig: Any, ev_sig: Any,
                 argtypes: tuple, first: Any = ()) -> Callable:
    """The compiled entry point of the row loop ``py_loop`` (cached on disk), which
    takes the per-item function ``one`` (signature ``one_sig``; None: none) and
    `eval_request` (``ev_sig``, `eval_signature`) as function values, then arguments of
    the types ``argtypes`` and last its chunk ``span = (lo, hi, c)``
    (`invimbed._backends._chunks.run_rows` runs the chunks on threads: compiled
    ``nogil``); compiled with ``one`` and `eval_request`, announced as the kernel ``name``
    (`invimbed._core.runtime.compile_cost.compiling`), after the ``(dispatcher,
    signature)`` pairs of ``first`` (callees passed to it as function values). Calling
    the entry point skips the dispatcher's typing of the arguments (milliseconds for the
    tuple of function values)."""
    numba = _types()["numba"]
    from numba import types

    from ._numba_calls import eval_request

    head = () if one is None else (types.FunctionType(one_sig),)
    loop = numba.njit(cache=True, nogil=True)(py_loop)
    span = types.UniTuple(types.int64, 3)
    pending = ([(d, sig.args) for d, sig in first] + [(eval_request, ev_sig.args)]
               + ([] if one is None else [(one, one_sig.args)])
               + [(loop, types.void(*head, types.FunctionType(ev_sig), *argtypes, span))])
    with compiling(name, pending):
        for dispatcher, sig in pending:
            dispatcher.compile(sig)
    loop.disable_compile()
    LOOPS[name] = loop
    return loop.overloads[loop.signatures[0]].entry_point


def code_signature() -> Any:
    """The numba signature of a problem's generated jet right-hand side
    (`invimbed._core.derivatives._jet_code`): ``(t, x, th, J, y, dy, offs, n)``."""
    from numba import types

    f8, i8 = types.float64, types.int64
    C1, C2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
    return types.void(f8, C1, C1, C2, C1, C1, types.Array(i8, 1, "C"), i8)


#: Whether the fixed-step sweep runs a problem's generated jet code where it has one
#: (`jet_code`); False runs the generic kernel for every problem (the tests compare them).
JET_CODE = True


def jet_code(setup: Setup, orders: list[int]) -> Any:
    """The compiled jet right-hand side of the problem of ``setup`` for the carried
    ``orders`` (`invimbed._core.derivatives._jet_code`), or None for the generic kernel:
    a problem without exact expressions (a derivative provider that is not symbolic,
    finite differences), derivatives given that disagree with the trace
    (`CompletedProvider.trace_agrees`: the user's are then called), or a right-hand side
    too large to compile quickly. Generated and compiled once per problem (announced,
    `invimbed._core.runtime.compile_cost.compiling`) and cached on disk."""
    if not JET_CODE:
        return None
    prov = symbolic_expressions(setup)
    if prov is None:
        return None
    fn = jet_function(prov, (orders[0], orders[0] + 1))   # the estimate's too: one compile
    if fn is None:
        return None
    sig = code_signature()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
        with compiling("jet_code", [(fn, sig.args)]):
            fn.compile(sig.args)
    return fn


def symbolic_expressions(setup: Setup) -> Any:
    """The `SympyProvider` whose expressions are the problem's ``f``, ``R``, ``T`` and
    every derivative the kernels use, or None (see `jet_code`)."""
    prov = setup.provider
    if isinstance(prov, CompletedProvider):
        return prov.traced_part if prov.trace_agrees() else None
    if isinstance(prov, SympyProvider):
        return prov
    user = setup.problem.derivative_provider
    return user if isinstance(user, SympyProvider) else None


def _fingerprint(args: Any) -> tuple:
    """What decides the numba types of the kernel arguments (cheaper than numba.typeof);
    every array must be C-contiguous, the layout the kernels are compiled for."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise ValueError("internal error: a kernel argument is not C-contiguous")
            out.append((a.dtype.str, a.ndim))
        elif isinstance(a, tuple):
            out.append(_fingerprint(a))
        else:
            out.append(type(a).__name__)
    return tuple(out)


def _threads() -> int:
    """numba's threads, each running a chunk of the kernels' rows with its own scratch
    (`invimbed._backends._chunks.run_rows`)."""
    return int(_types()["numba"].get_num_threads())


def _run(name: str, args: tuple) -> None:
    loop, one, ev = _kernel(name, args)
    run_rows(loop, (one, ev, *args), args[2].x.shape[0])


def _run_rows(args: tuple) -> None:
    loop, _, ev = _kernel("request_rows", args)
    run_rows(loop, (ev, *args), args[4].shape[0])


#: What ``backend="numba"`` runs of `solve_imbedding`, and why not more: measured on two
#: shared cores (docs/performance.md), the numba stencil lost to vectorised numpy from
#: B = 64 on (0.3x to 0.5x, exact or finite-difference derivatives), so it was removed.
SCOPE = ("closure='jet' of order 1 (with its error estimate), methods 'euler', 'midpoint', "
         "'rk4' (with `step`) and 'disc'")


def check_numba_scope(closure: str, order: int, method: str) -> None:
    """Raise a ValueError naming what ``backend="numba"`` runs, for anything else."""
    if closure != "jet":
        raise ValueError(f"backend='numba' runs {SCOPE}, but got closure={closure!r}; use "
                         f"backend='numpy' (or backend='cupy') for it")
    check_scope("numba", closure, order, method)


def sweep_numba(setup: Setup, *, closure: str, order: int, method: str, step: float | None,
                difference: str, delta: Any, estimate_error: bool,
                max_steps: int | None = None, memory_budget: int | None = None) -> Any:
    """Run the jet sweep on the numba backend; see the module docstring. A grid of more
    than ``max_steps`` steps is stepped up to there and ends with the numpy sweep's
    message. A sweep whose outputs exceed ``memory_budget`` (bytes; None: the default
    of `invimbed._core.sweep.memory.check_compiled`) raises its `MemoryError` before
    anything is allocated."""
    check_numba_scope(closure, order, method)
    import_numba()
    prov = setup.provider
    ctrl = setup.control
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    sched = build_schedule(setup, method, step, check_max_steps(max_steps))
    n = setup.depths_desc.size
    orders = [order] + ([order + 1] if estimate_error else [])
    jet = bundles.jet(setup.x, setup.q, M, nw, orders)
    # the kernel's fields (and their estimates) at every depth; per thread, a sample's
    # state and its stages
    stages = sched.A.shape[0] if np.ndim(sched.A) == 2 else 1
    check_compiled(setup, copies=len(orders) - 1,
                   held=8 * n * B * (2 * N + 1 + nw) * len(orders) + 16 * B,
                   work=8 * _threads() * jet.size * (stages + 4),
                   budget=memory_budget)
    nan = np.nan
    fields = {"z": np.full((n, B, N), nan), "value": np.full((n, B), nan),
              "adjoint": np.full((n, B, N), nan), "param_grad": np.full((n, B, nw), nan)}
    error = ({k: np.full_like(v, nan) for k, v in fields.items()} if estimate_error else None)
    errs = (tuple(error.values()) if error is not None else
            (np.empty((0, 0, 0)), np.empty((0, 0)), np.empty((0, 0, 0)), np.empty((0, 0, 0))))
    fail_pos = np.full(B, np.iinfo(np.int64).max, dtype=np.int64)
    fail_p = np.full(B, nan)
    F = W = orders[-1] + 1
    reqs = [Request("f", 0, F), Request("R", 0, F),
            Request("f", 1, W if nw else 0), Request("R", 1, W if nw else 0),
            Request("T", 0, F)]
    plan = build_plan(prov, reqs)
    code = jet_code(setup, orders)
    coded = code is not None
    # every user function compiled and checked, even where the jet code leaves f's and
    # R's uncalled (it calls T's plan only, for the initial state); the provider's
    # generated code only where it is called (each is a compilation of its own)
    fns = function_tuple(setup, plan.used,
                         generated=build_plan(prov, reqs[4:]).used if coded else None)
    from ._numba_kernels import jet_rhs
    if not coded:
        from ._numba_kernels import no_code as code     # the stand-in: never called

        code.compile(code_signature().args)

    args = (fns, plan.arrays(), jet, *packed_tables(N, (orders[0], orders[-1])),
            bundles.Fixed(sched.stage_p, sched.h, sched.theta, sched.jac, sched.A,
                          sched.weights, sched.record, int(sched.record_initial),
                          bool(sched.disc)),
            bundles.FixedOut(*fields.values(), *errs, fail_pos, fail_p),
            code, coded, jet_rhs)
    _run("jet_sweep", args)
    values = (CompiledValues(setup, prov) if setup.problem.derivative_provider is None else None)
    return finish(setup, sched, fields, error, fail_pos, fail_p, "jet", method, "numba",
                  provider=values)


#: From how many rows `CompiledValues` runs its compiled loop: below, a Python call per
#: row is cheaper than the kernel call (whose tuple of 20 function values costs about a
#: millisecond to unbox). Measured on 2 shared cores, one thread, the coupled pendulums:
#: 64 rows 4.4 ms (compiled) vs 3.4 ms per solve, 1024 rows 20.2 vs 20.9 ms, 4096 rows
#: 67 vs 74 ms.
COMPILED_ROWS = 1024


class CompiledValues(DerivativeProvider):
    """``f`` and ``R`` of per-sample user functions at many rows in one compiled loop
    (`_numba_calls.request_rows`): what `invimbed._core.sweep.assembly.depth_gradient` asks
    for, without one Python call per (depth, input) row. Everything else is the
    problem's provider's."""

    row_times = True

    def __init__(self, setup: Setup, provider: DerivativeProvider) -> None:
        self.base = provider
        self.n_state, self.n_theta = provider.n_state, provider.n_theta
        self.name = provider.name
        self.plan = build_plan(provider, [Request("f", 0, 0), Request("R", 0, 0)])
        self.setup = setup

    @cached_property
    def fns(self) -> tuple:
        """The loop's function tuple, compiled at its first use (fewer rows than
        `COMPILED_ROWS` never use it: a traced problem's generated ``f`` and ``R`` are then
        not compiled for it)."""
        return function_tuple(self.setup, self.plan.used)

    def order_limit(self, which: str) -> int | None:
        return self.base.order_limit(which)

    def _derivative(self, which, t, z, theta, dz, dth):
        if dz or dth or which == "T" or z.shape[0] < COMPILED_ROWS:
            return self.base.derivative(which, t, z, theta, dz, dth)
        B = z.shape[0]
        out = np.empty((B, self.n_state if which == "f" else 1))
        def arg(a: Any) -> np.ndarray:    # the kernel's types: C-contiguous, writeable
            return np.require(a, float, ["C", "W"])

        ts = arg(np.broadcast_to(np.asarray(t, dtype=float), (B,)))
        args = (self.fns, self.plan.arrays(), 0 if which == "f" else 1, ts, arg(z), arg(theta),
                out)
        _run_rows(args)
        return out if which == "f" else out[:, 0]
