"""The user's functions for the numba kernels: compiled for one sample, checked, and
guarded against writes into their arguments.

* `function_tuple` gives the kernels one compiled function per key of
  `invimbed._backends._plans.BASE_KEYS`: the user's own function or derivative where the
  kernels use it, the provider's generated per-sample code for ``from_sympy`` and traced
  problems (and for the derivatives a problem does not give), a never-called stand-in
  elsewhere.
* `_compile_user` compiles a user function for one sample in numba's nopython mode and
  checks what it returns; a function numba cannot compile is a `BackendCompileError`
  naming it, with numba's reason.
* `_on_copies` passes a user function to the kernels as it is where numba proves that it
  writes into neither ``z`` nor ``theta``, else through a compiled wrapper that calls it
  on copies (docs/tutorial.md, section 9).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

from .._core.derivatives._codegen import is_generated
from .._core.setup.arguments import Setup
from ._plans import BASE_KEYS, key_name

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
    from ._numba_calls import ABSENT

    _STATE["dummies"] = {k: ABSENT[_dummy_name(k)] for k in BASE_KEYS}
    for k, d in _STATE["dummies"].items():
        d.compile(sigs[k].args)
    _STATE["numba"] = numba
    return _STATE


def _dummy_name(key: tuple[str, int, int]) -> str:
    which, dz, dth = key
    rank = (1 if which == "f" else 0) + dz + dth
    return f"{'T' if which == 'T' else 'tz'}{rank}"


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


_GUARDED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _on_copies(disp: Any, key: tuple[str, int, int]) -> Any:
    """What the kernels call for the user's ``disp`` (compiled for the signature of
    ``key``): ``disp`` itself where it also compiles with read-only ``z`` and ``theta``
    (numba then proves that it writes into neither), else a compiled wrapper that calls
    it on copies of them. The kernels pass their stage buffers and difference points,
    which a function writing into its arguments would change
    (`invimbed._core.inputs.probe`); the wrapper's two copies cost an allocation each per
    call, the proof one more compilation of ``disp`` (bench_argument_copy.py). A
    provider's generated per-sample code given as a user function (`_codegen.is_generated`)
    is passed as it is, unproved: it writes into nothing."""
    if is_generated(disp):       # the provider's generated code: writes into nothing
        return disp
    st = _types()
    from numba import types

    sig = st["sigs"][key]
    seen = _GUARDED.setdefault(disp, {})
    if key not in seen:
        readonly = tuple(types.Array(a.dtype, a.ndim, a.layout, readonly=True)
                         if isinstance(a, types.Array) else a for a in sig.args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                disp.compile(readonly)
                seen[key] = None                    # disp itself (no reference to it)
            except Exception:  # noqa: BLE001 - it writes (or numba cannot tell): copies
                seen[key] = _copying(disp, key)
                seen[key].compile(sig.args)
    return disp if seen[key] is None else seen[key]


def _copying(disp: Any, key: tuple[str, int, int]) -> Any:
    """A numba function calling ``disp`` on copies of its array arguments."""
    if key[0] == "T":
        def on_copies(z):
            return disp(z.copy())
    else:
        def on_copies(t, z, theta):
            return disp(t, z.copy(), theta.copy())
    return _types()["numba"].njit(on_copies)


def _weakrefable(fn: Any) -> bool:
    try:
        weakref.ref(fn)
    except TypeError:
        return False
    return True


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def function_tuple(setup: Setup, used: frozenset, generated: frozenset | None = None) -> tuple:
    """The function tuple of the kernels: user functions where used, stand-ins elsewhere;
    the provider's generated code (from_sympy and traced problems) only for the keys in
    ``generated`` (default: every key used), a stand-in for the other keys, which the
    kernel does not call (the fixed-step sweep on the problem's generated jet code)."""
    st = _types()
    prob = setup.problem
    user = prob.derivative_provider
    if getattr(setup.provider, "traced", False):   # traced functions: generated code
        user = setup.provider
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
    if user is not None:   # from_sympy, traced: the provider's generated per-sample code
        source = {key: _SymbolicSource(user, key) for key in BASE_KEYS}
        if getattr(user, "known", None) and not prob.vectorized:
            # derivatives given, the rest traced (`CompletedProvider`): the user's own
            # per-sample functions where given (a vectorised problem's are not per-sample)
            source.update({k: fn for k, fn in (
                (("f", 0, 0), prob.dynamics), (("R", 0, 0), prob.running_loss),
                (("T", 0, 0), prob.terminal_loss), *prob.known_derivatives.items())
                if fn is not None})
    else:
        source = {("f", 0, 0): prob.dynamics, ("R", 0, 0): prob.running_loss,
                  ("T", 0, 0): prob.terminal_loss}
        source.update(prob.known_derivatives)
    out = []
    for key in BASE_KEYS:
        fn = source.get(key)
        if key in used and fn is not None:
            if isinstance(fn, _SymbolicSource):     # generated code: writes into nothing
                out.append(_compile_user(fn.compile(), key) if generated is None
                           or key in generated else st["dummies"][key])
            else:
                out.append(_on_copies(_compile_user(fn, key), key))
        else:
            out.append(st["dummies"][key])
    return tuple(out)


class _SymbolicSource:
    """A derivative of a `SympyProvider`, generated when the kernels need it."""

    def __init__(self, provider: Any, key: tuple[str, int, int]) -> None:
        self.provider, self.key = provider, key

    def compile(self) -> Any:
        return self.provider.sample_function(*self.key)
