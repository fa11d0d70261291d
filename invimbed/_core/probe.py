"""The first call of a user's function: what it does to its arguments and what it returns.

`invimbed.BolzaProblem.check_shapes` calls each of the problem's functions once at a
solve's first point through `first_call`. Two mistakes that would otherwise pass in
silence are caught there:

- **Arguments modified in place** (``z *= 0.5``, ``z[0] = ...``). The solvers hand their
  own state to the functions (the numpy ensemble a view of its batch, the compiled
  kernels their stage buffers), so a function that writes into ``z`` or ``theta``
  changes the solution it is asked to differentiate. This raises ``ValueError`` naming
  the function, the argument and the first entry changed.
- **Lower precision** (a float32 or float16 result). The solvers compute in float64; a
  function rounded to float32 carries relative noise of about 1.2e-7 into every step,
  which no error estimate sees. It is reported by a `SolverWarning` (code
  ``"low_precision"``) in every result of the problem, and a solve asking for a relative
  tolerance finer than that precision is not a success (`PRECISION_MARGIN`,
  `Status.IMPRECISE`, -5).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from .results import SolverWarning

#: A solve whose ``rtol`` is below this many times the returned precision (the ``eps``
#: of the dtype) cannot be within its tolerance: its result is `Status.IMPRECISE` (-5).
PRECISION_MARGIN = 10.0

WARNING_CODE = "low_precision"


def first_call(fn: Callable, name: str, which: str, t: float, z: np.ndarray,
               theta: np.ndarray) -> tuple[Any, np.dtype | None]:
    """Call ``fn`` once on copies of ``z`` and ``theta``; raise where it wrote into
    them; return what it returned and its floating dtype where that is narrower than
    float64 (else None)."""
    z_in, th_in = np.array(z, dtype=float), np.array(theta, dtype=float)
    try:
        out = fn(z_in) if which == "T" else fn(t, z_in, th_in)
    except TypeError as exc:
        wrong = _arity_error(fn, name, which)
        if wrong is None:
            raise
        raise _ours(wrong) from exc
    for arg, given, seen in (("z", z, z_in), ("theta", theta, th_in)):
        if which == "T" and arg == "theta":
            continue
        changed = ~((given == seen) | (np.isnan(given) & np.isnan(seen)))
        if np.any(changed):
            i = np.unravel_index(int(np.flatnonzero(changed)[0]), given.shape)
            where = ", ".join(map(str, i))
            raise _ours(ValueError(
                f"`{name}` modified its argument `{arg}` in place ({arg}[{where}] was "
                f"{float(given[i])!r} and became {float(seen[i])!r} after the call): the "
                f"solvers pass their own state, so this changes the solution. Compute "
                f"on a new array instead (`{arg} = {arg} * c`, not `{arg} *= c`; "
                f"`{arg} = {arg}.copy()` before assigning into it)"))
    dtype = getattr(out, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize < 8:
        return out, dtype
    return out, None


def _ours(exc: Exception) -> Exception:
    exc.from_first_call = True     # a verdict of this module: passed on as it is
    return exc


def precision_warning(name: str, dtype: np.dtype) -> SolverWarning:
    """The `SolverWarning` of a function that returns ``dtype`` (narrower than float64)."""
    eps = float(np.finfo(dtype).eps)
    return SolverWarning(
        WARNING_CODE,
        f"`{name}` returns {dtype.name} (relative precision {eps:.2g}); the solvers compute "
        f"in float64, and a relative tolerance below {PRECISION_MARGIN * eps:.2g} cannot "
        f"be reached through it: return float64 (np.asarray(..., dtype=float))")


def precision_limit(dtypes: dict[str, np.dtype]) -> float:
    """The finest relative tolerance the returned dtypes allow (0.0 for float64 only)."""
    return max((PRECISION_MARGIN * float(np.finfo(d).eps) for d in dtypes.values()),
               default=0.0)


#: The arguments each function of the problem is called with, for the messages.
_SIGNATURES = {"f": "(t, z, theta)", "R": "(t, z, theta)", "T": "(z)"}
_OTHER = {"running_loss": "terminal_loss", "terminal_loss": "running_loss"}


def _arity_error(fn: Callable, name: str, which: str) -> TypeError | None:
    """A TypeError naming ``name`` where ``fn`` cannot take the arguments it is called
    with (a terminal loss given as the running loss, ...); None where it can (the
    TypeError came from inside it)."""
    n_args = 1 if which == "T" else 3
    try:
        inspect.signature(fn).bind(*range(n_args))
        return None
    except TypeError:
        pass
    except ValueError:      # no signature (a builtin, a compiled function)
        return None
    takes = len([p for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    hint = ""
    if name in _OTHER and takes == (3 if which == "T" else 1):
        hint = (f": it looks like the {_OTHER[name].replace('_', ' ')}; pass it as "
                f"`{_OTHER[name]}=`")
    return TypeError(f"`{name}` must take the arguments {_SIGNATURES[which]}, but it takes "
                     f"{takes} positional argument(s){hint}")


def per_sample_error(fn: Callable, name: str, which: str, t: float, z: np.ndarray,
                     theta: np.ndarray, exc: Exception) -> ValueError | None:
    """With ``vectorized=True``, a ``fn`` that failed on the batch ``z`` (1, N) but works
    on one sample ``z[0]`` (N,) is a per-sample function: a ValueError naming
    ``vectorized``; None otherwise."""
    z1, th1 = np.array(z[0], dtype=float), np.array(theta[0], dtype=float)
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(fn(z1) if which == "T" else fn(t, z1, th1))
    except Exception:    # noqa: BLE001 - it fails per sample too: the user's own error
        return None
    expected = (z.shape[1],) if which == "f" else ()
    if out.shape != expected:
        return None
    return ValueError(
        f"`{name}` raised {type(exc).__name__} ({exc}) on a batch z of shape {z.shape}, but "
        f"works on one sample of shape {z[0].shape}: it is a per-sample function, and the "
        f"problem was built with `vectorized=True`, which passes batches (z of shape (B, N), "
        f"theta (B, M)); drop `vectorized=True`, or write it for batches (z[:, 0], not z[0])")
