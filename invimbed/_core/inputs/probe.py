"""The first call of a user's function: what it does to its arguments and what it returns.

`invimbed.BolzaProblem.check_shapes` calls each of the problem's functions once at a
solve's first point through `first_call`. Two mistakes that would otherwise pass in
silence are caught there:

- **Arguments modified in place** (``z *= 0.5``, ``z[0] = ...``). Every solver calls
  the functions on copies of its state (`BolzaProblem` on numpy and cupy, a compiled
  copying wrapper on numba), so a write cannot change the solution; it cannot do what
  it was meant to either (change the state), so it is refused: a ``ValueError`` naming
  the function, the argument and the first entry changed, where the first point or one
  of `TEST_POINTS` seeded points shows it (`writes_at_test_points`).
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

from ..results.results import SolverWarning

#: A solve whose ``rtol`` is below this many times the returned precision (the ``eps``
#: of the dtype) cannot be within its tolerance: its result is `Status.IMPRECISE` (-5).
PRECISION_MARGIN = 10.0

WARNING_CODE = "low_precision"
#: Seeded points besides the first at which `writes_at_test_points` calls each function.
TEST_POINTS = 2


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
    _refuse_writes(name, which, z, theta, z_in, th_in)
    dtype = getattr(out, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize < 8:
        return out, dtype
    return out, None


def writes_at_test_points(fn: Callable, name: str, which: str, t: float, z: np.ndarray,
                          theta: np.ndarray) -> None:
    """Call ``fn`` on copies of `TEST_POINTS` seeded points shaped as ``z`` and ``theta``
    (the point of `first_call`), and raise as `first_call` where it wrote into them: a
    write that depends on the values (``z[1] = 0.9 * z[1]`` at ``z[1] = 0``) is then
    refused whatever the first point. A point where ``fn`` raises is skipped (outside
    its domain); the solvers call it on copies in any case, so a write the points miss
    cannot change the solution."""
    rng = np.random.default_rng(7)
    for k in range(TEST_POINTS):
        draw = rng.uniform(0.2, 1.3, size=2) if k % 2 == 0 else rng.normal(size=2)
        zk = np.full(np.shape(z), draw[0]) + 0.1 * rng.normal(size=np.shape(z))
        thk = np.full(np.shape(theta), draw[1]) + 0.1 * rng.normal(size=np.shape(theta))
        z_in, th_in = zk.copy(), thk.copy()
        try:
            with np.errstate(all="ignore"):
                fn(z_in) if which == "T" else fn(t, z_in, th_in)
        except Exception:   # noqa: BLE001 - outside the function's domain: no verdict
            continue
        _refuse_writes(name, which, zk, thk, z_in, th_in, lambda zk=zk, thk=thk: (
            f", at the test point t = {t:.6g}, z = {_fmt(zk)}" + (
                f", theta = {_fmt(thk)}" if which != "T" and np.size(thk) else "")))


def _refuse_writes(name: str, which: str, z: np.ndarray, theta: np.ndarray,
                   z_in: np.ndarray, th_in: np.ndarray,
                   at: Callable[[], str] | None = None) -> None:
    """The ValueError of a function ``name`` that changed ``z_in`` or ``th_in``, copies
    of ``z`` and ``theta`` it was called on (``at()``: where, for the message; formatted
    only for the message, since most calls write nothing)."""
    for arg, given, seen in (("z", z, z_in), ("theta", theta, th_in)):
        if which == "T" and arg == "theta":
            continue
        given = np.asarray(given, dtype=float)
        changed = ~((given == seen) | (np.isnan(given) & np.isnan(seen)))
        if np.any(changed):
            i = np.unravel_index(int(np.flatnonzero(changed)[0]), given.shape)
            where = ", ".join(map(str, i))
            raise _ours(ValueError(
                f"`{name}` modified its argument `{arg}` in place ({arg}[{where}] was "
                f"{float(given[i])!r} and became {float(seen[i])!r} after the call"
                f"{'' if at is None else at()}): the "
                f"solvers call it on copies, so the write cannot change the state it was "
                f"meant for, and it is refused. Compute on a new array instead "
                f"(`{arg} = {arg} * c`, not `{arg} *= c`; `{arg} = {arg}.copy()` before "
                f"assigning into it)"))


def _fmt(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a, dtype=float).ravel(), precision=4, threshold=6,
                           separator=", ")


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
