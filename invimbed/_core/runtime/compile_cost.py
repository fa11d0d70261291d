"""Whether a numba kernel is ready to run without compiling, and the announcement of a
compilation that is not (docs/performance.md, "Compiled kernels and the first run on a
machine").

The package's generic numba kernels (the Taylor tape's interpreter, the jet closure's
truncated contraction) are compiled once per machine and kept in numba's on-disk cache.
Compiling them costs far more than a short solve (43 s of CPU for the tape kernel, 1.5 s
for the contraction, on the shared 2-core container), so the paths that can run without
them (numpy evaluators computing the same sums) use a kernel only where it is `ready`,
or where the work is large enough that compiling it pays (each caller's threshold).

Every place that compiles one of the package's kernels (`KERNELS`: the numba sweeps,
fixed-step and adaptive, the numba ensemble of `solve_adjoint`, the depth gradient's
loop, the Taylor-mode tape kernel, the jet contraction) does it inside `compiling`:
where numba's cache does not hold the kernel, one line on stderr says what is compiled
and how long it should take on this machine (the last compile time recorded beside
numba's cache, else a reference time scaled), before the minutes of silence that would
otherwise look like a hang. ``python -m invimbed compile`` (`invimbed._backends._warm`)
compiles them all ahead of time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Iterator, Sequence

_ON_DISK: dict[int, bool] = {}
#: The kernels `ready` found compiled in this process, by ``id`` (each kept alive here,
#: so that its ``id`` is not reused).
_READY: dict[int, Any] = {}


def ready(kernel: Any) -> bool:
    """Whether calling the numba dispatcher ``kernel`` compiles nothing: it was compiled
    in this process, or numba's on-disk cache holds machine code of it for this source
    (checked once per process; an unreadable cache counts as empty). A kernel found
    ready stays so for the process: the answer is remembered (the jet closure asks on
    every contraction, and a dispatcher lists its ``signatures`` anew each time)."""
    if compiled_here(kernel):
        return True
    key = id(kernel)
    hit = _ON_DISK.get(key)
    if hit is None:
        try:    # numba's cache index: empty, or missing, until a compilation wrote it
            hit = bool(kernel._cache._cache_file._load_index())
        except Exception:   # noqa: BLE001 - a numba without this layout: not known ready
            hit = False
        _ON_DISK[key] = hit
    return hit


def compiled_here(kernel: Any) -> bool:
    """Whether the numba dispatcher ``kernel`` holds machine code in this process (compiled
    or loaded from the cache), remembered once found (`ready`)."""
    key = id(kernel)
    if key in _READY:
        return True
    if getattr(kernel, "signatures", None):
        _READY[key] = kernel
        return True
    return False


# -- the announcement of a compilation -------------------------------------------------

#: The package's compiled kernels: what each serves (the announcement names it) and its
#: compile time in seconds of CPU on the reference machine, the shared 2-core container
#: (``python -m invimbed compile`` from an empty cache, one process, 2026-11-29, the mean
#: of two runs at a load average of 7 to 9: ``sweep_fixed``, ``values``,
#: ``sweep_adaptive``, ``ensemble`` and ``ocp_rows``; the Taylor-mode kernel alone, the
#: contraction and the generated jet code as measured before: docs/performance.md,
#: "Compiled kernels and the first run on a machine"). ``sweep_fixed``, ``values``,
#: ``sweep_adaptive`` and ``ensemble`` since their row loops are no ``prange`` loops: those
#: times scaled by the ratio of the new code's CPU time to the old code's, three runs of
#: each alternated from empty caches, load 4 to 6 (docs/performance.md, "The row loops:
#: chunks on a pool of threads, not `prange`").
#: `expected_seconds` scales them to the machine it runs on.
KERNELS: dict[str, tuple[str, float]] = {
    "sweep_fixed": ("the fixed-step numba sweep (backend='numba', method='euler', "
                    "'midpoint', 'rk4' or 'disc')", 26.8),
    "values": ("the numba loop of f and R over many rows (the depth gradient of "
               "backend='numba')", 0.8),
    "sweep_adaptive": ("the compiled adaptive sweep (backend='numba', method='RK45' or "
                       "'RK23')", 30.5),
    "ensemble": ("the numba ensemble of solve_adjoint(backend='numba')", 18.0),
    "taylor": ("the Taylor-mode tape kernel (from_sympy problems, jets of degree 4 and "
               "more)", 42.0),
    "contract": ("the jet closure's compiled contraction (jets of high order)", 1.5),
    "ocp_rows": ("the compiled shooting rows of solve_ocp / OCPSolver (from_sympy "
                 "and traced problems)", 5.5),
    # per problem: 3.0 to 4.0 s of CPU for the coupled pendulums of the benchmarks (N = 4,
    # orders 1 and 2; 8.0 to 9.4 s before its loop bodies per degree, same runs)
    "jet_code": ("this problem's generated jet right-hand side (backend='numba' on a "
                 "problem with sympy or traced expressions)", 4.0),
}
#: The generated code compiled once per problem (and machine), not a kernel of the package
#: (`python -m invimbed compile` cannot know the problem): what it serves and its compile
#: time in seconds of CPU on the reference machine (a typical problem; measured 1 to 15 s
#: on the 2-core container, docs/optimization.md, "Compiled rows").
GENERATED: dict[str, tuple[str, float]] = {
    "ocp_point": ("this problem's generated shooting rows (solve_ocp / OCPSolver; "
                  "backend='numpy' runs without them)", 5.0),
}
#: The kernels generated for each problem (``python -m invimbed compile`` warms only
#: its own problem's).
PER_PROBLEM = ("jet_code",)
#: The file beside numba's cache (in the kernels' cache directory) that keeps the last
#: compile time of each kernel on this machine, in seconds of wall time.
TIMES_FILE = "invimbed-compile-seconds.json"
#: The kernels compiled in this process by `compiling`, and the seconds each took.
COMPILED: dict[str, float] = {}
#: Where the announcements go (`sys.stderr` when None: looked up at each one, so that a
#: redirected ``sys.stderr`` receives them).
STREAM: Any = None


def compiled(dispatcher: Any, sig: Any = None) -> bool:
    """Whether numba runs ``dispatcher`` for the signature ``sig`` without compiling it:
    compiled in this process, or its machine code in numba's on-disk cache for this
    source, this machine's CPU and ``sig`` (None: for any signature, as `ready`).

    ``sig`` is what the caller hands to ``dispatcher.compile`` (a `Signature` or a tuple
    of argument types; numba keys its cache by it), or, for a call that lets numba type
    the arguments, the tuple of their types.
    """
    if sig is None:
        return ready(dispatcher)
    try:
        from numba.core import sigutils

        args = tuple(sigutils.normalize_signature(sig)[0])
        if args in dispatcher.overloads:
            return True
        cache = dispatcher._cache
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:   # noqa: BLE001 - not a caching dispatcher, or another numba layout
        return False


def cache_directory(dispatcher: Any) -> str | None:
    """The directory of numba's on-disk cache of ``dispatcher`` (None: no cache)."""
    try:
        return str(dispatcher._cache.cache_path)
    except Exception:   # noqa: BLE001
        return None


def _times(directory: str | None) -> dict[str, float]:
    if directory is None:
        return {}
    try:
        with open(os.path.join(directory, TIMES_FILE)) as fh:
            got = json.load(fh)
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in got.items()
            if (k in KERNELS or k in GENERATED) and isinstance(v, (int, float)) and v > 0}


def record(name: str, seconds: float, directory: str | None) -> None:
    """Keep ``seconds`` as the last compile time of kernel ``name`` on this machine (in
    `TIMES_FILE` beside numba's cache; nothing where that cannot be written)."""
    if directory is None:
        return
    times = _times(directory)
    times[name] = round(float(seconds), 2)
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f"{TIMES_FILE}.{os.getpid()}")
        with open(tmp, "w") as fh:
            json.dump(times, fh, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(directory, TIMES_FILE))
    except OSError:
        pass


def expected_seconds(name: str, directory: str | None) -> tuple[float, str]:
    """The expected compile time of kernel ``name`` on this machine, and how it was
    found: the last compile time of this kernel recorded beside numba's cache
    (`record`); else its reference time (`KERNELS`) times the median ratio of this
    machine's recorded times of the other kernels to theirs; else the reference time.
    The recorded times are wall seconds, what a user waited, the machine's load
    included; the reference times CPU seconds, about the wall time of an idle core (the
    compilation runs on one thread)."""
    ref = {**KERNELS, **GENERATED}[name][1]
    times = _times(directory)
    if name in times:
        return times[name], "its last compilation on this machine"
    ratios = sorted(times[k] / KERNELS[k][1] for k in times if k in KERNELS)
    if ratios:
        scale = ratios[len(ratios) // 2]
        return ref * scale, (f"its time on a 2-core reference machine scaled by this "
                             f"machine's other compilations ({scale:.2g}x)")
    return ref, "its CPU time on a 2-core reference machine, more on a busy one"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min"


def announcement(name: str, seconds: float, basis: str, directory: str | None) -> str:
    """The line `compiling` writes before compiling kernel ``name``."""
    where = f" in {directory}" if directory else ""
    if name in GENERATED or name in PER_PROBLEM:
        what = {**KERNELS, **GENERATED}[name][0]
        return (f"invimbed: compiling {what}, not in numba's cache yet: "
                f"expected about {_duration(seconds)} ({basis}), once per problem and "
                f"machine; later processes load it from the cache{where}.")
    return (f"invimbed: compiling {KERNELS[name][0]}, not in numba's cache yet: expected "
            f"about {_duration(seconds)} ({basis}), once per machine; later processes "
            f"load it from the cache{where}. `python -m invimbed compile` compiles every "
            f"kernel ahead of time.")


@contextlib.contextmanager
def compiling(name: str, pending: Sequence[tuple[Any, Any]]) -> Iterator[bool]:
    """Around the compilation of kernel ``name`` (a key of `KERNELS`, or of `GENERATED`
    for a problem's generated code): where one of
    the ``(dispatcher, sig)`` of ``pending`` is not `compiled`, write one line to
    stderr first (`announcement`: what is compiled and its expected duration,
    `expected_seconds`), show a tqdm bar of the elapsed time against it where tqdm is
    installed and stderr is a terminal, and afterwards `record` the time taken, so that
    the next announcement on this machine (after an upgrade, or with another
    ``NUMBA_CACHE_DIR``) expects it. Where everything is compiled or cached, nothing is
    written. Yields whether it compiles."""
    todo = [d for d, sig in pending if not compiled(d, sig)]
    if not todo:
        yield False
        return
    directory = cache_directory(todo[0])
    seconds, basis = expected_seconds(name, directory)
    stream = STREAM if STREAM is not None else sys.stderr
    print(announcement(name, seconds, basis, directory), file=stream, flush=True)
    bar = _ElapsedBar(seconds, name, stream)
    start = time.perf_counter()
    try:
        yield True
    finally:
        bar.close()
    COMPILED[name] = took = time.perf_counter() - start
    record(name, took, directory)


class _ElapsedBar:
    """A tqdm bar of the seconds elapsed against the expected ones, advanced by a
    daemon thread once a second (numba's compiler holds no lock that stops it); nothing
    without tqdm or where ``stream`` is not a terminal (a log would get a line a
    second)."""

    def __init__(self, seconds: float, name: str, stream: Any) -> None:
        self.bar = None
        isatty = getattr(stream, "isatty", None)
        if not (callable(isatty) and isatty()):
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:   # the optional `progress` extra
            return
        self.bar = tqdm(total=max(1, round(seconds)), desc=f"compiling {name}", file=stream,
                        leave=False, bar_format="{desc}: {bar} {n}/{total} s expected")
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True)
        self.thread.start()

    def _tick(self) -> None:
        while not self.done.wait(1.0):
            if self.bar.n < self.bar.total - 1:
                self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.done.set()
            self.thread.join()
            self.bar.close()
