"""The numba kernels' loops over rows, run in contiguous chunks on a pool of threads.

Each of the package's row loops (the fixed-step sweep `_numba_kernels.jet_sweep`, the
adaptive sweep `_sweep_kernels.sweep_rows`, the ensemble `_ensemble_kernels.ensemble_rows`,
the depth gradient's values `_numba_calls.request_rows`) is a serial loop over the rows
of one chunk ``span = (lo, hi, c)``, rows ``lo`` to ``hi - 1``, ``c`` the chunk's index
(the adaptive sweep's scratch, one per chunk), compiled with ``nogil=True``
(`invimbed._backends._numba.compile_loop`). `run_rows` splits the rows into contiguous
chunks as numba's static ``prange`` schedule does (`chunks`) and runs them on
``numba.get_num_threads()`` threads: the calling thread and a persistent pool of threads
each take the next chunk not yet taken, calling the compiled loop, which releases the
GIL. Which thread runs a chunk does not change its numbers. One chunk (one thread, or
one row) runs in the calling thread, without the pool.

Why not ``prange``: the loops only call the per-row function, and numba's parallel
compilation of them (the loop outlined into a gufunc, its arguments flattened) cost
15.7 s of CPU on every clean machine where the serial loops cost 4.3 s
(docs/performance.md, "The row loops: chunks on a pool of threads, not `prange`").
"""

from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

_POOL: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def chunks(rows: int, threads: int) -> list[tuple[int, int]]:
    """The contiguous chunks ``(lo, hi)`` of ``rows`` rows on ``threads`` threads, as
    numba's static ``prange`` schedule makes them: ``min(threads, rows)`` chunks (at least
    one), the first ``rows % n`` of them one row longer than the others."""
    n = max(1, min(int(threads), int(rows)))
    q, r = divmod(int(rows), n)
    out, lo = [], 0
    for c in range(n):
        hi = lo + q + (1 if c < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _pool() -> ThreadPoolExecutor:
    """This process's pool (a forked child makes its own: the parent's threads are not
    in it), of up to ``NUMBA_NUM_THREADS - 1`` threads, started as they are needed."""
    import numba

    pid = os.getpid()
    with _LOCK:
        pool = _POOL.get(pid)
        if pool is None:
            _POOL.clear()
            pool = _POOL[pid] = ThreadPoolExecutor(
                max_workers=max(1, int(numba.config.NUMBA_NUM_THREADS) - 1),
                thread_name_prefix="invimbed-rows")
    return pool


def run_rows(loop: Callable, head: tuple, rows: int, threads: int | None = None) -> None:
    """Call the compiled row loop ``loop(*head, (lo, hi, c))`` once on every chunk ``c``
    of ``rows`` rows (`chunks`) for ``threads`` threads (None: ``numba.get_num_threads()``,
    so that ``NUMBA_NUM_THREADS`` and ``numba.set_num_threads`` decide): the calling
    thread and ``threads - 1`` tasks of the pool each take the next chunk not yet taken
    until none is left, so a pool thread that starts late (a busy machine) leaves its
    chunk to the others instead of holding up the call. Returns when every chunk has
    ended; an exception of a chunk is raised then (the calling thread's first). numba's
    warning that first-class function types are experimental is silenced meanwhile (the
    loops take their callees as function values)."""
    if rows <= 0:
        return
    if threads is None:
        import numba

        threads = numba.get_num_threads()
    parts = chunks(rows, threads)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
        if len(parts) == 1:
            loop(*head, (0, int(rows), 0))
            return
        order = iter(range(len(parts)))
        lock = threading.Lock()

        def take() -> None:
            while True:
                with lock:
                    c = next(order, None)
                if c is None:
                    return
                loop(*head, (*parts[c], c))

        pool = _pool()
        futures = [pool.submit(take) for _ in parts[1:]]
        try:
            take()
        finally:
            wait(futures)
        for f in futures:
            f.result()

