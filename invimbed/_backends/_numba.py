"""``backend="numba"``: fixed-step jet and stencil sweeps compiled with numba.

How it works
------------
* The user's ``dynamics``, ``running_loss``, ``terminal_loss`` (and any derivatives given
  in ``derivatives=``) are compiled for one sample, ``(t: float, z: (N,), theta: (M,))``
  (``T(z)`` for the terminal loss), with numba's ``nopython`` mode. Functions already
  decorated with ``numba.njit`` are used as they are; plain Python functions are passed
  to ``numba.njit`` once. A function numba cannot compile raises
  `BackendCompileError`, naming it, with numba's reason: there is no silent fallback.
* Derivatives not given are taken inside the compiled code by the rule of
  `invimbed.FiniteDifferences` (nested central differences, the same steps), and the
  numpy sweep adds its sums in the kernels' order (`invimbed._core.ordered`), so the numba and
  numpy backends agree bit for bit for the same functions.
* A problem built with ``from_sympy`` runs on the symbolic provider's generated
  per-sample code (`SympyProvider.sample_function`), the code ``compile="numba"`` uses.
* The kernels (`invimbed._backends._numba_kernels`) run every sample's sweep in a
  ``prange`` loop, write into preallocated outputs and are cached on disk
  (``cache=True``): the first call on a machine compiles them (tens of seconds), later
  processes load them.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

import numpy as np

from .._core.failures import sweep_stopped
from .._core.derivatives.multiindex import derivative_table, n_coefficients, product_table
from .._core.integrators.common import NonFiniteError, Outcome
from .._core.results import ImbeddingResult
from .._core.setup import Setup
from ._plans import BASE_KEYS, Request, build_plan, key_name
from ._schedule import Schedule, build_schedule, check_scope

FIXED = ("euler", "midpoint", "rk4", "disc")


class BackendCompileError(TypeError):
    """A user function could not be compiled for an accelerated backend."""


def import_numba() -> Any:
    try:
        import numba
    except ImportError as exc:  # pragma: no cover - exercised only without numba
        raise ImportError(
            "backend='numba' needs numba, which is not installed: pip install invimbed[numba] "
            "(or pip install numba), or use backend='numpy'") from exc
    return numba


_STATE: dict[str, Any] = {}


def _types() -> dict[str, Any]:
    """Signatures of the user functions and the never-called stand-ins for absent ones."""
    if "sigs" in _STATE:
        return _STATE
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
        return _make_types()


def _make_types() -> dict[str, Any]:
    numba = import_numba()
    from numba import types

    f8 = types.float64
    C1 = types.Array(f8, 1, "C")
    A = {k: types.Array(f8, k, "C") for k in (1, 2, 3, 4, 5)}
    sigs = {}
    for key in BASE_KEYS:
        which, dz, dth = key
        rank = (1 if which == "f" else 0) + dz + dth
        ret = f8 if rank == 0 else A[rank]
        sigs[key] = ret(C1) if which == "T" else ret(f8, C1, C1)
    _STATE["sigs"] = sigs
    _STATE["ftypes"] = types.Tuple(tuple(types.FunctionType(sigs[k]) for k in BASE_KEYS))
    from . import _numba_kernels as kern

    _STATE["dummies"] = {k: getattr(kern, _dummy_name(k)) for k in BASE_KEYS}
    for k, d in _STATE["dummies"].items():
        d.compile(sigs[k].args)
    _STATE["numba"] = numba
    return _STATE


def _dummy_name(key: tuple[str, int, int]) -> str:
    which, dz, dth = key
    rank = (1 if which == "f" else 0) + dz + dth
    return f"_absent_{'T' if which == 'T' else 'tz'}{rank}"


_JITTED: "weakref.WeakKeyDictionary[Callable, Any]" = weakref.WeakKeyDictionary()


def _compile_user(fn: Callable, key: tuple[str, int, int]) -> Any:
    """The numba dispatcher of ``fn``, compiled for the signature of ``key``."""
    st = _types()
    numba = st["numba"]
    from numba.core.registry import CPUDispatcher

    name = key_name(key)
    sig = st["sigs"][key]
    if isinstance(fn, CPUDispatcher):
        disp = fn
    else:
        disp = _JITTED.get(fn) if _weakrefable(fn) else None
        if disp is None:
            disp = numba.njit(fn)
            if _weakrefable(fn):
                _JITTED[fn] = disp
    args = "(z: float64[::1])" if key[0] == "T" else "(t: float64, z: float64[::1], theta: float64[::1])"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
            disp.compile(sig.args)
    except Exception as exc:  # numba raises TypingError, UnsupportedError, ...
        reason = str(exc).strip()
        if len(reason) > 1500:
            reason = reason[:1500] + " ..."
        raise BackendCompileError(
            f"backend='numba' could not compile `{name}` ({_fn_name(fn)}) for one sample "
            f"{args} in numba's nopython mode. numba says:\n{reason}\n"
            f"Rewrite `{name}` in the subset of Python/numpy that numba supports (a function "
            f"of a single sample, decorated with numba.njit), or use backend='numpy', which "
            f"runs any Python function.") from exc
    ret = disp.overloads[sig.args].signature.return_type
    want = sig.return_type
    from numba import types

    ok = (isinstance(ret, (types.Float, types.Integer)) if want == types.float64 else
          isinstance(ret, types.Array) and ret.ndim == want.ndim and ret.dtype == types.float64
          and ret.layout == "C")
    if not ok:
        shape = ("a float" if want == types.float64 else
                 f"a C-contiguous {want.ndim}-D float64 array")
        raise BackendCompileError(
            f"backend='numba': `{name}` ({_fn_name(fn)}) compiled, but returns {ret} where "
            f"{shape} is needed; return e.g. np.array([...], dtype=np.float64) (or "
            f"np.ascontiguousarray of a view), or use backend='numpy'")
    return disp


def _weakrefable(fn: Any) -> bool:
    try:
        weakref.ref(fn)
    except TypeError:
        return False
    return True


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def function_tuple(setup: Setup, used: frozenset) -> tuple:
    """The function tuple of the kernels: user functions where used, stand-ins elsewhere."""
    st = _types()
    prob = setup.problem
    user = prob._user_provider
    if prob.vectorized and not hasattr(user, "sample_function"):
        raise ValueError(
            "backend='numba' calls the problem's functions one sample at a time, but the "
            "problem has vectorized=True; give per-sample functions f(t, z (N,), theta (M,)) "
            "(decorated with numba.njit) and vectorized=False, or use backend='numpy'")
    if user is not None and not hasattr(user, "sample_function"):
        raise ValueError(
            f"backend='numba' needs the problem's functions themselves, but the problem "
            f"uses the derivative provider {user.name!r}; give the functions and their "
            f"derivatives as numba-compilable callables (or build the problem with "
            f"from_sympy), or use backend='numpy'")
    if user is not None:   # from_sympy: the provider's generated per-sample code
        source = {key: _SymbolicSource(user, key) for key in BASE_KEYS}
    else:
        source = {("f", 0, 0): prob.dynamics, ("R", 0, 0): prob.running_loss,
                  ("T", 0, 0): prob.terminal_loss}
        source.update(prob._known)
    out = []
    for key in BASE_KEYS:
        fn = source.get(key)
        if key in used and fn is not None:
            if isinstance(fn, _SymbolicSource):
                fn = fn.compile()
            out.append(_compile_user(fn, key))
        else:
            out.append(st["dummies"][key])
    return tuple(out)


class _SymbolicSource:
    """A derivative of a `SympyProvider`, generated when the kernels need it."""

    def __init__(self, provider: Any, key: tuple[str, int, int]) -> None:
        self.provider, self.key = provider, key

    def compile(self) -> Any:
        return self.provider.sample_function(*self.key)


# -- jet -------------------------------------------------------------------------------


def _jet_tables(N: int, K: int) -> tuple:
    zsrc, _, zfac = derivative_table(N, K)
    vsrc, _, vfac = derivative_table(N, K + 1)
    zp = product_table(N, K - 1, K, K)
    vp = product_table(N, K, K + 1, K + 1)
    sp = product_table(N, K + 1, K, K + 1)
    c = np.ascontiguousarray
    return (c(zsrc), c(zfac), *map(c, zp), c(vsrc), c(vfac), *map(c, vp), *map(c, sp))


def _kernel(name: str, args: tuple) -> tuple[Callable, Callable, Callable]:
    """The compiled kernel ``name`` for the types of ``args`` (cached on disk), the
    per-sample sweep it runs in its ``prange`` loop, and the derivative evaluator.

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
    second) and the signature and first-class type of `eval_request` for them."""
    st = _types()
    numba = st["numba"]
    from numba import types

    argtypes = tuple(st["ftypes"] if i == 0 else numba.typeof(a) for i, a in enumerate(args))
    f8, i8 = types.float64, types.int64
    C1, C2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
    ev_sig = types.void(st["ftypes"], argtypes[1], i8, f8, C1, C1, C2, C2, C1, C2, C1)
    return argtypes, ev_sig, types.FunctionType(ev_sig)


def _build_kernel(name: str, args: tuple) -> tuple[Callable, Callable, Callable]:
    numba = _types()["numba"]
    from numba import types

    from . import _numba_kernels as kern

    argtypes, ev_sig, ev_type = eval_signature(args)
    one_sig = types.void(types.int64, ev_type, *argtypes)
    one = getattr(kern, f"_{name}_one")
    kern.eval_request.compile(ev_sig.args)
    one.compile(one_sig.args)
    loop = numba.njit(types.void(types.FunctionType(one_sig), ev_type, *argtypes),
                      cache=True, parallel=True)(getattr(kern, name))
    # the compiled entry point: calling it skips the dispatcher's typing of the arguments
    # (milliseconds for the tuple of function values)
    entry = loop.overloads[loop.signatures[0]].entry_point
    return entry, one, kern.eval_request


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


def _run(name: str, args: tuple) -> None:
    loop, one, ev = _kernel(name, args)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
        loop(one, ev, *args)


def sweep_numba(setup: Setup, *, closure: str, order: int, method: str, step: float | None,
                difference: str, delta: Any, estimate_error: bool) -> Any:
    """Run the sweep on the numba backend; see the module docstring."""
    import_numba()
    check_scope("numba", closure, order, method)
    prov = setup.provider
    ctrl = setup.control
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    sched = build_schedule(setup, method, step)
    n = setup.depths_desc.size
    nan = np.nan
    out_z = np.full((n, B, N), nan)
    out_v = np.full((n, B), nan)
    out_a = np.full((n, B, N), nan)
    out_w = np.full((n, B, nw), nan)
    out_g = np.full((n, B), nan)
    fail_pos = np.full(B, np.iinfo(np.int64).max, dtype=np.int64)
    fail_p = np.full(B, nan)
    common = (sched.stage_p, sched.h, sched.theta, sched.jac)
    depth_p = sched.depth_p
    if closure == "jet":
        orders = [order] + ([order + 1] if estimate_error else [])
        top = orders[-1]
        F = W = top + 1
        reqs = [Request("f", 0, F), Request("R", 0, F),
                Request("f", 1, W if nw else 0), Request("R", 1, W if nw else 0),
                Request("T", 0, F), Request("f", 0, 0), Request("R", 0, 0)]
        plan = build_plan(prov, reqs)
        fns = function_tuple(setup, plan.used)
        cZs = np.array([n_coefficients(N, K) for K in orders], dtype=np.int64)
        cVs = np.array([n_coefficients(N, K + 1) for K in orders], dtype=np.int64)
        sizes = N * cZs + cVs * (1 + nw)
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        tab_lo = _jet_tables(N, orders[0])
        tab_hi = _jet_tables(N, orders[-1])
        if estimate_error:
            errs = (np.full((n, B, N), nan), np.full((n, B), nan), np.full((n, B, N), nan),
                    np.full((n, B, nw), nan))
        else:
            errs = (np.empty((0, 0, 0)), np.empty((0, 0)), np.empty((0, 0, 0)),
                    np.empty((0, 0, 0)))
        args = (fns, plan.arrays(), setup.x, N, M, nw, n_coefficients(N, F), n_coefficients(N, W),
                float(setup.q), np.array(orders, dtype=np.int64), cZs, cVs, offs,
                int(sizes.sum()), tab_lo, tab_hi, *common, sched.A, sched.weights,
                sched.record, int(sched.record_initial), bool(sched.disc), depth_p,
                sched.depth_theta, out_z, out_v, out_a, out_w, out_g, *errs, fail_pos, fail_p)
        _run("jet_sweep", args)
        name = "jet"
    else:
        from .._core.closures import StencilClosure

        clo = StencilClosure(prov, ctrl, setup.x, setup.q, difference=difference, delta=delta)
        reqs = [Request("f", 0, 1), Request("R", 0, 1), Request("f", 1, 0), Request("R", 1, 0),
                Request("T", 0, 1), Request("f", 0, 0), Request("R", 0, 0)]
        if not nw:
            reqs[2] = Request("f", 0, 0)
            reqs[3] = Request("R", 0, 0)
        plan = build_plan(prov, reqs)
        fns = function_tuple(setup, plan.used)
        args = (fns, plan.arrays(), np.ascontiguousarray(clo.points),
                np.ascontiguousarray(clo.delta), difference == "central", N, M, nw,
                float(setup.q), *common, sched.A, sched.weights, sched.record,
                int(sched.record_initial), depth_p, sched.depth_theta,
                out_z, out_v, out_a, out_w, out_g, fail_pos, fail_p)
        _run("stencil_sweep", args)
        errs = None
        name = "stencil"
    fields = {"z": out_z, "value": out_v, "adjoint": out_a, "param_grad": out_w,
              "depth_grad": out_g}
    error = (None if not (closure == "jet" and estimate_error) else
             dict(zip(("z", "value", "adjoint", "param_grad"), errs)))
    return finish(setup, sched, fields, error, fail_pos, fail_p, name, method, "numba")


def finish(setup: Setup, sched: Schedule, fields: dict, error: dict | None,
           fail_pos: np.ndarray, fail_p: np.ndarray, closure: str, method: str,
           backend: str) -> ImbeddingResult:
    """Turn kernel outputs into an `ImbeddingResult` as the numpy sweep does.

    ``fields`` and ``error`` hold axes (n, B, ...) in the user's order of the depths (the
    kernels write there), so the result takes them without a copy (`pack_result` would
    reorder them into new arrays).
    """
    from .._core.setup import assess

    S = sched.stages
    per_step = 1 if sched.disc else S
    outcome = Outcome(ys=np.empty(0))
    nfev = sched.n_steps * per_step
    first = int(fail_pos.min()) if fail_pos.size else np.iinfo(np.int64).max
    if first != np.iinfo(np.int64).max:
        b = int(np.argmin(fail_pos))
        pos, kind = divmod(first, 2)
        k, s = divmod(pos, S + 1)
        what = "right-hand side" if kind else "imbedded fields"
        exc = NonFiniteError(float(fail_p[b]), what)
        outcome.success = False
        outcome.message = sweep_stopped(exc, fixed_step=True)
        nfev = k * per_step + min(s + 1, per_step)
        for kk in np.nonzero(sched.record[k:] >= 0)[0] + k:   # not reached by the batch
            d = sched.record[kk]
            for arr in list(fields.values()) + (list(error.values()) if error else []):
                arr[d] = np.nan
    order = setup.order          # depths_desc[i] = depths[order[i]]
    success = outcome.success and all(np.all(np.isfinite(v)) for v in fields.values())
    message = outcome.message
    if outcome.success and not success:
        bad = [float(setup.depths[j]) for j in order
               if not np.all(np.isfinite(fields["depth_grad"][j]))]
        message = (f"Non-finite depth gradient at depth p = {bad[0]:.10g} (the dynamics or "
                   f"running loss is not finite at x there)." if bad else
                   "Non-finite value in the results.")
    status = 0 if success else -1
    warnings: list = []
    converged = None
    if error is not None:   # the default criterion; solve_imbedding re-judges with `tol`
        verdict = assess(setup.depths, fields, error, None, None)
        converged = verdict.converged
        warnings += verdict.warnings
        if success and not verdict.all_converged:
            success, status, message = False, -2, verdict.message

    def arrange(a: np.ndarray) -> np.ndarray:
        return a if setup.batched else a[:, 0]

    return ImbeddingResult(
        depths=setup.depths.copy(),
        **{k: arrange(v) for k, v in fields.items()},
        success=bool(success), status=status, message=message, nfev=int(nfev),
        closure=closure, method=method,
        error_estimate=(None if error is None else
                        ImbeddingResult({k: arrange(v) for k, v in error.items()})),
        converged=None if converged is None else arrange(converged),
        warnings=warnings, backend=backend,
    )


class _Desc:
    """``arr`` indexed in descending-depth order (``_Desc(arr, order)[i] = arr[order[i]]``)."""

    def __init__(self, arr: np.ndarray, order: np.ndarray) -> None:
        self.arr, self.order = arr, order

    def __getitem__(self, i: int) -> np.ndarray:
        return self.arr[self.order[i]]
