"""The suite's shared set-up: hypothesis profiles, one worker per core where pytest-xdist
is installed, and the numba kernels compiled once before the workers start.

Hypothesis profiles
-------------------
``ci``:  derandomized (the same examples on every run, so a CI failure reproduces),
         no deadline (timings on shared runners are noise), failing examples printed
         with a reproduction blob (``@reproduce_failure``), no example database.
``dev``: random examples (a fresh search on each run; failures are replayed from the
         local ``.hypothesis`` database), no deadline.

The profile is ``$HYPOTHESIS_PROFILE`` if set, else ``ci`` when ``$CI`` is set (as CI
services do), else ``dev``. Settings a test gives itself (``@settings(...)``) take
precedence over the profile for the options they name.

Workers
-------
With pytest-xdist installed (the ``test`` extra), a run without ``-n`` gets ``-n auto``
(one worker per core) and ``--dist worksteal``; ``-n 0`` runs in one process, and without xdist (or with
``-p no:xdist``) the suite runs in one process. The option is added here rather than in
``addopts`` so that a bare ``python -m pytest`` works with and without xdist. With two
workers or more, each worker's torch, BLAS and OpenMP thread pools get its share of the
cores (``OMP_NUM_THREADS`` and friends, unless the environment sets them): the workers
already keep every core busy.

Assertion rewriting
-------------------
pytest rewrites the asserts of the test modules, of this file, and of every module of a
distribution that ships a pytest plugin: for hypothesis, its whole library (about 80
modules, 0.8 to 1.3 s of CPU in every worker and in the controller, since
``PYTHONDONTWRITEBYTECODE`` or a fresh clone leaves no cached rewrite). Only hypothesis's
plugin module is kept rewritten (`_library_not_rewritten`); the test modules' asserts are
rewritten as always.

The numba kernels
-----------------
Each worker would otherwise compile the package's numba kernels itself (minutes of CPU
each, docs/performance.md, "Compiled kernels and the first run on a machine"). As the
workers start, the controller starts ``python -m invimbed compile`` for the kernels
numba's cache does not hold, in two processes that compile no function twice
(`invimbed._backends._warm.LINES`; one with one worker), beside the tests; a
test that needs a kernel still being compiled waits for it and then loads it from
numba's on-disk cache. So every kernel is compiled once, and the tests that need none
run meanwhile (with one worker, on the core it leaves free). Only in a run with xdist
workers: with ``-n 0`` or without xdist the test process compiles what it needs, as a
targeted run should. ``INVIMBED_TEST_WARM=0`` skips this (each worker compiles what it
needs).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest


def _library_not_rewritten(name: str) -> None:
    """Keep pytest from rewriting the asserts of the library ``name`` (module docstring,
    "Assertion rewriting"). pytest marks for rewriting every top-level module of a
    distribution that ships a pytest plugin; for hypothesis that is the whole library, not
    only its plugin module ``_hypothesis_pytestplugin`` (which stays marked). Done before
    ``name`` is first imported (here, below); a pytest without the private set this reads
    rewrites as before."""
    from _pytest.assertion.rewrite import AssertionRewritingHook

    for hook in sys.meta_path:
        if isinstance(hook, AssertionRewritingHook) and name in getattr(hook, "_must_rewrite",
                                                                          ()):
            hook._must_rewrite.discard(name)
            getattr(hook, "_marked_for_rewrite_cache", {}).clear()


_library_not_rewritten("hypothesis")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if "CI" in os.environ else "dev"))

ROOT = Path(__file__).resolve().parents[1]


def _controller(config: pytest.Config) -> bool:
    """Whether this process is the one that starts the run (not an xdist worker)."""
    return not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n auto --dist worksteal`` where pytest-xdist is installed and no ``-n`` was given
    (before xdist's own hook, which turns ``auto`` into the number of cores). Work
    stealing: a worker that runs out of tests takes some of the other's, so that a few
    long tests at the end do not leave a core idle."""
    if (config.pluginmanager.hasplugin("xdist") and _controller(config)
            and getattr(config.option, "numprocesses", 0) is None):
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "worksteal"


def _groups(names: list[str], n: int) -> list[list[str]]:
    """``names`` (the kernels to compile) in at most ``n`` groups, one per process, each
    in the order it is compiled: with one process, all in the order of
    `invimbed._core.runtime.compile_cost.KERNELS`; with more, the two lines of
    `invimbed._backends._warm.LINES`, which compile no function twice (a third process
    would compile the same callees as one of them)."""
    from invimbed._backends._warm import LINES

    if n < 2:
        return [list(names)]
    return [g for g in ([k for k in line if k in names] for line in LINES) if g]


#: The environment variable that tells the workers which kernels the controller is
#: compiling and where it marks each one done: ``<folder>:<kernel>,<kernel>,...``.
WARMING = "INVIMBED_TEST_WARMING"
_WARM: dict[str, Any] = {}


#: The thread pools of the libraries the tests call (torch's and numpy's BLAS, OpenMP).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _share_cores(workers: int) -> None:
    """The workers' thread pools sized to their share of the cores (module docstring,
    "Workers"), where the environment does not size them already: set in the controller
    before xdist starts the workers, which inherit it. Each worker already keeps a core
    busy; a torch or BLAS pool of one thread per core in every worker oversubscribes the
    cores, and OpenMP's waiting threads spin: on the 2-core container the two training
    tests of test_experiments took 80 s of CPU with two threads and 18 s with one."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, share)


def _start_warming(workers: int) -> str | None:
    """Start compiling the kernels numba's cache lacks, in one process per group of
    `_groups` (each ``python -m invimbed compile --kernel ...``), and return at once: a thread per
    process marks each kernel done (a file ``<kernel>.done`` in a fresh folder) as the
    process reports it, or when the process ends, however it ends. `WARMING` names the
    folder and the kernels for the workers (`_wait_for_warming`). None: nothing to do."""
    if importlib.util.find_spec("numba") is None:
        return None
    from invimbed._backends._warm import representative
    from invimbed._core.runtime.compile_cost import KERNELS, ready

    todo = [k for k in KERNELS if not ready(representative(k))]
    if not todo:
        return None
    folder = Path(tempfile.mkdtemp(prefix="invimbed-warm-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs, threads, reported = [], [], []
    for group in _groups(todo, workers):
        proc = subprocess.Popen(
            [sys.executable, "-m", "invimbed", "compile", *(a for k in group
                                                             for a in ("--kernel", k))],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def follow(proc: subprocess.Popen = proc, group: list[str] = group) -> None:
            for line in proc.stdout:        # "<kernel>  <wall> s  <cpu> s  compiled"
                if line.split()[:1] and line.split()[0] in group:
                    reported.append(line.split()[0])
                    (folder / f"{line.split()[0]}.done").touch(exist_ok=True)
            proc.wait()
            for name in group:              # failed or killed: the tests compile it
                (folder / f"{name}.done").touch(exist_ok=True)
        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        procs.append(proc)
        threads.append(thread)
    _WARM.update(procs=procs, threads=threads, folder=folder, start=time.perf_counter(),
                 todo=todo, reported=reported)
    os.environ[WARMING] = f"{folder}{os.pathsep}{','.join(todo)}"
    return (f"numba kernels compiling once, beside the tests, in {len(procs)} processes: "
            f"{', '.join(todo)} (a test that needs one waits for it)")


def _wait_for_warming() -> None:
    """In a worker: make every compilation of a kernel the controller is compiling
    (`invimbed._core.runtime.compile_cost.compiling`) wait until the controller marks it
    done, then load it from numba's cache instead of compiling it a second time."""
    spec = os.environ.get(WARMING)
    if not spec:
        return
    folder, names = spec.rsplit(os.pathsep, 1)
    warming = set(names.split(","))
    import contextlib

    from invimbed._core.runtime import compile_cost

    real = compile_cost.compiling

    @contextlib.contextmanager
    def compiling(name: str, pending: Any) -> Iterator[bool]:
        marker = Path(folder) / f"{name}.done"
        deadline = time.monotonic() + 3600.0
        while name in warming and not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        with real(name, pending) as compiles:
            yield compiles

    compile_cost.compiling = compiling
    try:
        from invimbed._backends import _numba
    except ImportError:
        return
    _numba.compiling = compiling


def pytest_configure(config: pytest.Config) -> None:
    """A worker started while the controller compiles kernels waits for them."""
    if not _controller(config):
        _wait_for_warming()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Before xdist starts the workers (its `pytest_sessionstart` runs last): start
    compiling the kernels once, in the controller (module docstring, "The numba
    kernels")."""
    config = session.config
    workers = getattr(config.option, "numprocesses", None) or 0
    if _controller(config) and isinstance(workers, int) and workers > 1:
        _share_cores(workers)
    if (not _controller(config) or not isinstance(workers, int) or workers < 1
            or config.option.collectonly or os.environ.get("INVIMBED_TEST_WARM", "1") == "0"):
        return
    line = _start_warming(workers)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The compile processes of a run that ended first are stopped (a kernel is cached
    only once compiled whole); the run's summary says how long the warm-up took."""
    if not _WARM or not _controller(session.config):
        return
    running = [p for p in _WARM["procs"] if p.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in _WARM["procs"]:
        proc.wait()
    for thread in _WARM["threads"]:
        thread.join(timeout=10.0)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        done = _WARM["reported"]
        left = [k for k in _WARM["todo"] if k not in done]
        reporter.write_line(f"numba kernels compiled once beside the tests: "
                            f"{', '.join(done) or 'none'}"
                            + (f"; stopped unfinished at the end of the run: {', '.join(left)}"
                               if left else ""))
    shutil.rmtree(_WARM["folder"], ignore_errors=True)
    _WARM.clear()
