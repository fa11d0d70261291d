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
(one worker per core); ``-n 0`` runs in one process, and without xdist (or with
``-p no:xdist``) the suite runs in one process. The option is added here rather than in
``addopts`` so that a bare ``python -m pytest`` works with and without xdist.

The numba kernels
-----------------
Each worker would otherwise compile the package's numba kernels itself (minutes of CPU
each, docs/performance.md, "Compiled kernels and the first run on a machine"): before
the workers start, the controller runs ``python -m invimbed compile`` for the kernels
numba's cache does not hold, split over one process per worker, so that every kernel is
compiled once and the workers load it from numba's on-disk cache.
``INVIMBED_TEST_WARM=0`` skips this.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
    """``-n auto`` where pytest-xdist is installed and no ``-n`` was given (before xdist's
    own hook, which turns ``auto`` into the number of cores)."""
    if (config.pluginmanager.hasplugin("xdist") and _controller(config)
            and getattr(config.option, "numprocesses", 0) is None):
        config.option.numprocesses = "auto"


def _groups(names: list[str], seconds: dict[str, float], n: int) -> list[list[str]]:
    """``names`` in ``n`` groups of about equal expected compile time (longest first,
    each into the lightest group)."""
    groups: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for name in sorted(names, key=lambda k: -seconds[k]):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += seconds[name]
    return [g for g in groups if g]


def _warm_kernels(workers: int) -> str | None:
    """Compile the kernels numba's cache lacks in ``workers`` processes at once (each
    ``python -m invimbed compile --kernel ...``): the summary line, or None where there
    is nothing to do."""
    if importlib.util.find_spec("numba") is None:
        return None
    from invimbed._backends._warm import representative
    from invimbed._core.runtime.compile_cost import (KERNELS, cache_directory,
                                                     expected_seconds, ready)

    todo = [k for k in KERNELS if not ready(representative(k))]
    if not todo:
        return None
    seconds = {k: expected_seconds(k, cache_directory(representative(k)))[0] for k in todo}
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "invimbed", "compile", *(a for k in g for a in ("--kernel", k))],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for g in _groups(todo, seconds, max(1, workers))]
    failed = [out for p in procs if (out := p.communicate()[0]) is not None and p.returncode]
    if failed:      # the tests that need a kernel compile it themselves, and fail there
        return "numba kernels not warmed: " + failed[0].strip().splitlines()[-1]
    return (f"numba kernels compiled once before the workers started ({', '.join(todo)}; "
            f"{len(procs)} processes, {time.perf_counter() - start:.0f} s)")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Before xdist starts the workers (its `pytest_sessionstart` runs last): compile
    the kernels once, in the controller (module docstring, "The numba kernels")."""
    config = session.config
    workers = getattr(config.option, "numprocesses", None) or 0
    if (not _controller(config) or workers < 2 or config.option.collectonly
            or os.environ.get("INVIMBED_TEST_WARM", "1") == "0"):
        return
    line = _warm_kernels(workers)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
