"""Row chunks within a memory budget: the exact ensemble run a few rows at a time.

The rows of the ensemble adjoint (`invimbed._core.reference.adjoint`, every (depth, input) pair)
are independent: each row takes the steps it would take alone. So the rows can be
solved in chunks, one after the other, and put together: every row's numbers are those
of the whole run, bit for bit. `run_in_chunks` does this so that the peak memory stays
under a budget (``memory_budget`` of `solve_adjoint`, `memory_budget` here):

* held for the whole call: the outputs (five fields and ``nsteps``) and each row's
  status, `RowCost.held` bytes a row; if they alone do not fit, `too_large` raises a
  `MemoryError` before anything is allocated;
* per chunk: `RowCost.work` bytes a row of working arrays, plus `RowCost.step` bytes a
  row and step of dense output (the numpy ensemble keeps every row's forward steps
  until its backward pass; the numba kernel keeps them per thread, ``step = 0``).

The steps a row takes are not known in advance. The chunks go from the deepest depths
(the longest rows) up; the first chunk is sized for `FIRST_STEPS` steps a row (or
``max_steps`` if fewer; a non-stiff problem takes tens to hundreds: a row that takes
more than that makes the first chunk exceed the budget by that ratio), the next ones for 1.5 times the largest mean of the steps (forward and backward,
attempted: about twice the forward steps that the dense output keeps) of the chunks
already run. The budget is thus kept unless shallower rows take about three times as
many forward steps as the deeper ones did, which a smooth problem does not.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..setup.arguments import Setup
from ..results.failures import DONE, empty_fields, ensemble_failure
from ..results.status import Status, row_status
from ..inputs.validation import as_memory_budget

#: The largest default budget: chunks of the numpy ensemble of about 10^4 rows (N = 2)
#: already run as fast per row as one chunk of 10^5 rows (docs/performance.md, "Memory
#: budget"), so a larger default would buy no speed, only memory.
DEFAULT_CAP = 1 << 30
#: The share of what the process can still allocate that the default budget takes.
DEFAULT_SHARE = 0.5
#: The steps a row is assumed to take (forward and backward) when sizing the first chunk:
#: ten times the most of the problems measured (docs/performance.md, "Memory budget"),
#: so that up to thousands of rows run in one chunk, as fast as before any chunking.
FIRST_STEPS = 1000
#: How much more address space than its estimate a sweep may take (`default_memory_limit`):
#: the estimate counts numpy's arrays; under ``ulimit -v`` the 10^6-row sweep of
#: benchmarks/bench_memory.py's oscillator (1000 depths x 1000 inputs, states dropped)
#: grew the address space by 245 MiB, 1.05 times the peak of its numpy arrays (234 MiB,
#: `tracemalloc`), which its estimate (259 MiB, `invimbed._core.sweep.memory`) covers.
LIMIT_MARGIN = 1.25
#: Margin on the measured steps per row when sizing the next chunk.
STEP_MARGIN = 1.5

#: ``run(setup, ...) -> (fields, nfev, rows)``: one chunk's fields (n, B, ...), its
#: right-hand-side count and its rows' status ``(fwd_codes, bwd_codes, t, h_lambda)``:
#: arrays of ``n B`` rows, the `RowCode` of each row's forward and backward pass, and its
#: last time and Shampine estimate in the pass that failed (`row_outcome`).
ChunkRun = Callable[..., tuple[dict, int, tuple]]


@dataclass(frozen=True)
class RowCost:
    """Bytes per row of an ensemble (see the module docstring)."""

    held: int
    work: int
    step: int


def available_bytes() -> int | None:
    """What this process can still allocate: the smaller of the system's available
    memory (``MemAvailable``) and the room left under an address-space limit
    (``ulimit -v``, ``RLIMIT_AS``); None where neither is known (not Linux)."""
    room = []
    try:
        with open("/proc/meminfo") as fh:
            m = re.search(r"MemAvailable:\s+(\d+) kB", fh.read())
        if m:
            room.append(int(m.group(1)) * 1024)
    except OSError:
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/status") as fh:
                m = re.search(r"VmSize:\s+(\d+) kB", fh.read())
            used = int(m.group(1)) * 1024 if m else 0
            room.append(max(0, soft - used))
    except (ImportError, OSError, ValueError):
        pass
    return min(room) if room else None


def default_memory_budget(outputs: int = 0) -> int:
    """The default ``memory_budget`` of a request whose outputs take ``outputs`` bytes:
    `DEFAULT_SHARE` of `available_bytes`, and of that at most `DEFAULT_CAP` (1 GiB) beyond
    the outputs (the cap sizes the chunks; it never refuses outputs that fit)."""
    room = available_bytes()
    limit = outputs + DEFAULT_CAP
    return int(max(1, limit if room is None else min(limit, DEFAULT_SHARE * room)))


def default_memory_limit() -> int | None:
    """The most a request that cannot be cut into chunks (an imbedding sweep) may take
    under the default ``memory_budget``: `available_bytes` divided by `LIMIT_MARGIN`
    (None where that is not known: then nothing is refused before numpy's own
    allocation fails). Refusing at `default_memory_budget`, half of it and at most 1 GiB
    beyond the outputs, refused requests that fit (docs/performance.md, "The imbedding
    sweep")."""
    room = available_bytes()
    return None if room is None else int(room / LIMIT_MARGIN)


def resolve_budget(value: Any) -> int | None:
    """``memory_budget`` as bytes (`as_memory_budget`); None for the default, which
    `run_in_chunks` sets from the request's outputs (`default_memory_budget`)."""
    return as_memory_budget(value)


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


def too_large(who: str, n: int, B: int, need: int, budget: int, what: str,
              solver: str) -> MemoryError:
    """The `MemoryError` of a request whose outputs alone exceed the budget."""
    return MemoryError(
        f"{who}: {what} of {n * B} (depth, input) rows ({n} depths x {B} inputs) need "
        f"{_size(need)}, more than memory_budget = {_size(budget)} ({budget} bytes); pass a "
        f"larger memory_budget (bytes, or a string such as '4GiB') if the memory is there, "
        f"or solve the rows in chunks with invimbed.dask.solve_batch(problem, x, depths, "
        f"solver={solver!r}, as_dask=True), which keeps each chunk's outputs on its worker")


def output_bytes(setup: Setup) -> int:
    """Bytes of the result's fields (z, value, adjoint, param_grad, depth_grad, nsteps)
    per (depth, input) row."""
    N, nw = setup.x.shape[1], setup.control.n_params
    return 8 * (2 * N + nw + 3)


def _sub_setup(setup: Setup, c: int, d: int, a: int, b: int) -> Setup:
    """The rows of depths ``depths_desc[c:d]`` and inputs ``x[a:b]`` as a setup."""
    dep = setup.depths_desc[c:d]
    return dataclasses.replace(setup, x=setup.x[a:b], depths=dep,
                               permutation=np.arange(dep.size), depths_desc=dep)


def run_in_chunks(run: ChunkRun, setup: Setup, budget: int | None, cost: RowCost,
                  max_steps: int, nfev_of: Callable[[list[int]], int],
                  who: str = "solve_adjoint") -> tuple[dict, int, Status, str | None]:
    """``run`` over row chunks that keep the peak memory under ``budget`` bytes (None:
    `default_memory_budget` of the request's outputs).

    Returns ``(fields, nfev, status, failure)`` as ``run`` would for every row at once:
    ``nfev_of`` combines the chunks' counts (their sum for vectorised calls, the largest
    for a per-row count); ``status, failure`` are `row_outcome` over every row.

    Raises
    ------
    MemoryError
        If the outputs and row statuses (`RowCost.held`), or twice the outputs when
        they must be put back in the user's order of depths, leave no room for a row's
        work in ``budget``. (Chunks have at least one row: a budget that leaves room for
        less than one row's dense output is exceeded by that row.)
    """
    B = setup.x.shape[0]
    n = setup.depths_desc.size
    rows = n * B
    held = rows * cost.held
    reorder = not np.array_equal(setup.permutation, np.arange(n))
    need = max(held, 2 * rows * output_bytes(setup) if reorder else 0)
    if budget is None:
        budget = default_memory_budget(need)
    if need + cost.work > budget:
        raise too_large(who, n, B, need, budget, "the outputs", "adjoint")
    room = budget - held
    worst = cost.work + min(max_steps, FIRST_STEPS) * cost.step
    if rows * worst <= room:
        fields, nfev, rows = run(setup)
        return (fields, nfev) + row_outcome(setup, rows, max_steps)
    fields = empty_fields(n, B, setup.x.shape[1], setup.control.n_params)
    status = [np.empty((n, B), dtype=dt) for dt in (np.int64, np.int64, float, float)]
    counts: list[int] = []
    mean_steps = 0.0

    def rows_now() -> int:
        per = worst if not counts else cost.work + STEP_MARGIN * mean_steps * cost.step
        return int(max(1, room // max(per, 1)))

    def solve(c: int, d: int, a: int, b: int) -> None:
        nonlocal mean_steps
        got, nfev, rows = run(_sub_setup(setup, c, d, a, b))
        for k, v in got.items():
            fields[k][c:d, a:b] = v
        for arr, v in zip(status, rows):
            arr[c:d, a:b] = np.reshape(v, (d - c, b - a))
        counts.append(nfev)
        mean_steps = max(mean_steps, float(np.mean(got["nsteps"])))

    d = n                                   # deepest (longest) rows first
    while d > 0:
        size = rows_now()
        if size >= B:
            c = max(0, d - size // B)
            solve(c, d, 0, B)
            d = c
            continue
        a = 0
        while a < B:
            b = min(B, a + rows_now())
            solve(d - 1, d, a, b)
            a = b
        d -= 1
    return (fields, nfev_of(counts)) + row_outcome(setup, [s.ravel() for s in status],
                                                   max_steps)


def row_outcome(setup: Setup, rows: tuple | list,
                max_steps: int) -> tuple[Status, str | None]:
    """``(status, failure)`` of an ensemble's rows ``(fwd_codes, bwd_codes, t, h_lambda)``
    (`ChunkRun`): the `Status` is `row_status` of each row's last code (the backward
    pass's where the forward pass reached ``q``), as for `invimbed.simulate`; ``failure``
    is None or `ensemble_failure`'s message, naming the first failed row."""
    fwd_codes, bwd_codes, t, h_lambda = rows
    codes = np.where(fwd_codes == DONE, bwd_codes, fwd_codes)
    status = row_status(codes)
    if status is Status.SUCCESS:
        return status, None
    B = setup.x.shape[0]
    return status, ensemble_failure(setup.batched, codes, fwd_codes,
                                    np.repeat(setup.depths_desc, B), t, h_lambda, max_steps, B)
