"""What a benchmark ran on, printed at the top of its output, and how two sides are
timed in turn: one implementation for all the benchmark scripts (they import it as
``from _machine import machine_info, alternating``, the script's own folder being on
``sys.path``)."""

from __future__ import annotations

import importlib
import os
import platform
import time

import numpy as np
import scipy

import invimbed


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine_info(*packages: str, extra: tuple[str, ...] = ()) -> str:
    """Platform, CPU model and count (and how many this process may use), load average,
    Python, numpy, scipy, the versions of ``packages`` (``"not installed"`` if absent),
    invimbed (version and location), the BLAS/OpenMP thread settings, then ``extra``."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    lines = [
        f"platform : {platform.platform()}",
        f"cpu      : {_cpu_model()}, {os.cpu_count()} logical CPUs (usable: {usable})",
    ]
    if hasattr(os, "getloadavg"):
        lines.append("load avg : %.2f %.2f %.2f (1, 5, 15 min) at the start" % os.getloadavg())
    lines += [
        f"python   : {platform.python_version()} ({platform.python_implementation()})",
        f"numpy    : {np.__version__}",
        f"scipy    : {scipy.__version__}",
    ]
    for name in packages:
        try:
            version = importlib.import_module(name).__version__
        except ImportError:
            version = "not installed"
        lines.append(f"{name:<9}: {version}")
    lines.append(f"invimbed : {invimbed.__version__} ({os.path.dirname(invimbed.__file__)})")
    lines.append("threads  : " + ", ".join(f"{v}={os.environ.get(v)}" for v in
                                          ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")))
    return "\n".join(lines + list(extra))


def alternating(fns: list, counts: list[int], rounds: int) -> list[float]:
    """Each ``fns[i]`` called ``counts[i]`` times per round, in turn, for ``rounds``
    rounds; the best time of each (seconds)."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, (fn, count) in enumerate(zip(fns, counts)):
            for _ in range(count):
                t0 = time.perf_counter()
                fn()
                best[i] = min(best[i], time.perf_counter() - t0)
    return best
