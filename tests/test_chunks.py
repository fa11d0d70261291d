"""The numba kernels' row loops in chunks on threads (`invimbed._backends._chunks`):
the chunks are numba's static ``prange`` schedule, every row runs once, a chunk's
exception reaches the caller, and the kernels give the same numbers bit for bit on any
number of threads, without a parallel region of numba."""

from __future__ import annotations

import threading

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from invimbed import Constant, solve_adjoint, solve_imbedding  # noqa: E402
from invimbed._backends import _numba  # noqa: E402
from invimbed._backends._chunks import chunks, run_rows  # noqa: E402


def test_chunks_are_the_static_prange_schedule():
    """Contiguous, every row once, ``min(threads, rows)`` chunks whose lengths differ by
    at most one, the longer first: the chunks numba's ``prange`` gave its threads
    (measured with ``get_thread_id`` on numba 0.68: 11 rows on 4 threads 3, 3, 3, 2;
    5 rows 2, 1, 1, 1; 3 rows on 2 threads 2, 1)."""
    assert chunks(11, 4) == [(0, 3), (3, 6), (6, 9), (9, 11)]
    assert chunks(5, 4) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert chunks(3, 2) == [(0, 2), (2, 3)]
    assert chunks(3, 8) == [(0, 1), (1, 2), (2, 3)]
    for rows in range(1, 40):
        for threads in range(1, 6):
            got = chunks(rows, threads)
            assert len(got) == min(rows, threads)
            assert got[0][0] == 0 and got[-1][1] == rows
            assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
            sizes = [hi - lo for lo, hi in got]
            assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("rows", [1, 3, 4, 37])
def test_every_row_runs_once_in_its_chunk(threads, rows):
    """Each row is visited once, by the chunk `chunks` gives it; one chunk runs in the
    calling thread, without the pool."""
    seen = np.zeros(rows, np.int64)
    where = np.full(rows, -1)
    caller = threading.get_ident()
    idents = {}
    lock = threading.Lock()

    def loop(out, span):
        lo, hi, c = span
        with lock:
            idents[c] = threading.get_ident()
        for i in range(lo, hi):
            seen[i] += 1
            out[i] = c

    run_rows(loop, (where,), rows, threads=threads)
    assert (seen == 1).all()
    parts = chunks(rows, threads)
    assert sorted(idents) == list(range(len(parts)))
    for c, (lo, hi) in enumerate(parts):
        assert (where[lo:hi] == c).all()
    if len(parts) == 1:
        assert idents[0] == caller


def test_a_chunks_exception_reaches_the_caller_after_every_chunk_ended():
    done = []

    def loop(span):
        lo, hi, c = span
        if c == 1:
            raise ZeroDivisionError(f"rows {lo} to {hi}")
        done.append(c)

    with pytest.raises(ZeroDivisionError, match="rows 3 to 5"):
        run_rows(loop, (), 7, threads=3)
    assert sorted(done) == [0, 2]


def test_kernels_agree_bit_for_bit_on_any_number_of_threads(monkeypatch):
    """The fixed-step and adaptive numba sweeps, the numba ensemble and the depth
    gradient's compiled values loop, on 1 to ``NUMBA_NUM_THREADS`` threads and batches
    smaller and larger than that: every field equal to the one-thread run; and their
    loops are serial ``nogil`` functions of numba, not ``parallel`` ones (they were
    ``prange`` loops before)."""
    from invimbed._backends._warm import _problem

    monkeypatch.setattr(_numba, "COMPILED_ROWS", 1)        # the values loop at any size
    problem, depths, ctrl = _problem(), np.array([-0.5, -0.25, 0.0]), Constant([0.1])
    fields = ("z", "value", "adjoint", "param_grad", "depth_grad")
    threads = numba.get_num_threads()
    runs = {"rk4": dict(method="rk4", step=0.125), "RK45": dict(method="RK45")}
    try:
        for B in (1, 3, 7):
            x = np.random.default_rng(B).normal(scale=0.4, size=(B, 2))
            ref = None
            for n in range(1, numba.config.NUMBA_NUM_THREADS + 1):
                numba.set_num_threads(n)
                got = {k: solve_imbedding(problem, x, depths, control=ctrl, backend="numba",
                                          **kw) for k, kw in runs.items()}
                got["ensemble"] = solve_adjoint(problem, x, depths, control=ctrl,
                                                backend="numba")
                if ref is None:
                    ref = got
                    assert all(np.isfinite(r.value).all() for r in ref.values())
                for k, res in got.items():
                    for f in fields:
                        np.testing.assert_array_equal(res[f], ref[k][f], err_msg=f"{k} {f}")
                    if k != "ensemble":
                        for f in fields[:4]:
                            np.testing.assert_array_equal(res.error_estimate[f],
                                                          ref[k].error_estimate[f])
    finally:
        numba.set_num_threads(threads)
    for name in ("sweep_fixed", "values", "sweep_adaptive", "ensemble"):
        options = _numba.LOOPS[name].targetoptions
        assert options.get("nogil") and not options.get("parallel"), name
