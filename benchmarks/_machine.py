"""The benchmarks' one shared helper: what a benchmark ran on (printed at the top of its
output), its command line, and how it times. Every script imports it as ``from _machine
import ...`` (the script's own folder is on ``sys.path``); no benchmark imports another.

- `machine_info` and `header`: the machine and load line, the command that ran;
- `arguments`: the argparse basics every script shares (``--quick``, ``--repeats``,
  ``--json``), to which a script adds its own options;
- `best_of` (one call, best of N), `interleaved` (several calls timed in turn, best of
  N each, one untimed warm-up: load from elsewhere on the machine spreads over every
  side) and `alternating` (the same with several calls per round);
- `write_json`: the measurements and the machine, as ``--json FILE`` asks.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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


def header(*packages: str, extra: tuple[str, ...] = (), argv: Sequence[str] | None = None,
           script: str | None = None) -> str:
    """`machine_info` and the command that ran (``python benchmarks/<script> <argv>``;
    ``argv`` None: this process's arguments)."""
    script = script or os.path.basename(sys.argv[0])
    args = list(sys.argv[1:] if argv is None else argv)
    return (machine_info(*packages, extra=extra)
            + f"\ncommand  : python benchmarks/{' '.join([script] + args)}")


# -- the command line ---------------------------------------------------------------------
def arguments(doc: str | None, *, quick: str | None = None, repeats: int | None = None,
              repeats_help: str | None = None, timed: bool = True, json_out: bool = False,
              aliases: tuple[str, ...] = (), prog: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's parser: its description is the first paragraph of ``doc`` (the
    script's docstring); ``--quick`` with the help ``quick`` (None: no ``--quick``);
    ``--repeats R`` (timed repeats, the best kept; not where ``timed`` is False: a script
    that measures accuracy, not time) with the default ``repeats`` (a script whose
    default depends on ``--quick`` passes None and reads `repeats_of`); ``--json FILE``
    with ``json_out``; ``aliases``: older spellings of ``--repeats`` a script keeps
    accepting. The script adds its own options to it."""
    description = (doc or "").strip().split("\n\n")[0] or None
    ap = argparse.ArgumentParser(prog=prog, description=description)
    if quick is not None:
        ap.add_argument("--quick", action="store_true", help=quick)
    if timed:
        ap.add_argument("--repeats", *aliases, dest="repeats", type=int, default=repeats,
                        metavar="R",
                        help=repeats_help or "timed repeats per case, the best kept"
                        + (f" (default {repeats})" if repeats is not None else ""))
    if json_out:
        ap.add_argument("--json", metavar="FILE", help="also write the measurements to FILE")
    return ap


def repeats_of(args: argparse.Namespace, full: int, quick: int = 1) -> int:
    """``--repeats`` where given, else ``quick`` with ``--quick`` and ``full`` without;
    at least 1."""
    if args.repeats is not None:
        if args.repeats < 1:
            raise SystemExit(f"--repeats must be at least 1, not {args.repeats}")
        return args.repeats
    return quick if getattr(args, "quick", False) else full


def write_json(path: str | None, doc: Any, *packages: str) -> None:
    """``doc`` to ``path`` (nothing where ``path`` is None), with the machine it ran on
    under ``"machine"`` (the lines of `machine_info`)."""
    if path is None:
        return
    with open(path, "w") as fh:
        json.dump({"machine": machine_info(*packages).splitlines(), "results": doc}, fh,
                  indent=1, default=str)


# -- timing -------------------------------------------------------------------------------
@dataclass
class Timed:
    """One side of `interleaved`: its best wall time (seconds), the process CPU time of
    that call, the untimed first call's wall time, and the last result."""
    best: float = float("inf")
    cpu: float = float("nan")
    first: float = float("nan")
    result: Any = None


def interleaved(calls: Sequence[Callable[[], Any]], repeats: int, *, warmup: bool = True,
                budget: float = float("inf"), number: int = 1) -> list[Timed]:
    """Each of ``calls`` called once untimed (``warmup``), then ``repeats`` timed rounds
    in which each is called in turn (``time.perf_counter``): a burst of load from
    elsewhere on the machine spreads over every side instead of falling on one. A timed
    measurement is ``number`` calls in a row, divided by ``number`` (short calls). Rounds
    stop early once a round's slowest measurement exceeds ``budget`` seconds."""
    out = [Timed() for _ in calls]
    if warmup:
        for t, fn in zip(out, calls):
            start = time.perf_counter()
            t.result = fn()
            t.first = time.perf_counter() - start
    for _ in range(repeats):
        slowest = 0.0
        for t, fn in zip(out, calls):
            cpu, start = time.process_time(), time.perf_counter()
            for _ in range(number):
                t.result = fn()
            wall = (time.perf_counter() - start) / number
            if wall < t.best:
                t.best, t.cpu = wall, (time.process_time() - cpu) / number
            slowest = max(slowest, wall)
        if slowest > budget:
            break
    return out


def best_of(fn: Callable[[], Any], repeats: int, *, warmup: bool = False,
            budget: float = float("inf"), number: int = 1) -> tuple[float, Any]:
    """The best wall time of ``repeats`` calls of ``fn`` (fewer once one exceeds
    ``budget`` seconds; one untimed call first with ``warmup``; each measurement
    ``number`` calls, per call) and the last result."""
    t = interleaved([fn], repeats, warmup=warmup, budget=budget, number=number)[0]
    return t.best, t.result


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
