"""``solve_adjoint(memory_budget=...)``: the ensemble in row chunks, bit for bit.

The rows of the exact ensemble are independent, so a run in chunks (`invimbed._core.reference.row_chunks`)
must give every row exactly the numbers of one run of all rows: asserted with
``array_equal`` (not a tolerance) for the numpy and numba ensembles, with chunks of whole
depths, of part of a depth's inputs and of single rows, with depths in the user's order
and with failed rows. The `MemoryError` of a request whose outputs cannot fit is raised
before they are allocated (the peak of `tracemalloc` stays small); the budget is checked
as an argument and the peak of a chunked run stays under it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from invimbed import PiecewiseConstant, solve_adjoint
from invimbed._core.reference import row_chunks as budget_mod
from invimbed._core.inputs.validation import as_memory_budget
from problems import sympy_pendulum

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad", "nsteps")
X = np.array([[0.4, -0.3], [1.1, 0.6], [-0.8, 0.2], [0.1, 0.9], [-0.5, -0.7]])
DEPTHS = np.linspace(-1.0, 0.0, 7)      # deepest first: put back in this order
CTRL = PiecewiseConstant([-1.0, -0.55, -0.15, 0.0], [[0.2, 0.1], [-0.3, 0.05], [0.4, 0.2]])
KW = dict(control=CTRL, rtol=1e-8, atol=1e-10)
#: budgets (bytes) that cut the 35 rows into chunks of several depths and into parts of a
#: depth's inputs (numpy ensemble, whose rows cost about 5 KiB; single rows: below)
BUDGETS = (200_000, 60_000)


@pytest.fixture(scope="module")
def problem():
    return sympy_pendulum()


def assert_bitwise(res, ref):
    assert res.success == ref.success
    assert res.message == ref.message
    for k in FIELDS:
        np.testing.assert_array_equal(res[k], ref[k], err_msg=k)


def chunk_sizes(monkeypatch):
    """Record ``(depths, inputs)`` of every chunk `run_in_chunks` runs."""
    sizes = []
    real = budget_mod._sub_setup

    def spy(setup, c, d, a, b):
        sizes.append((d - c, b - a))
        return real(setup, c, d, a, b)

    monkeypatch.setattr(budget_mod, "_sub_setup", spy)
    return sizes


@pytest.mark.parametrize("budget", BUDGETS)
def test_numpy_chunks_are_bitwise_equal_to_one_run(problem, budget, monkeypatch):
    ref = solve_adjoint(problem, X, DEPTHS, memory_budget="1GiB", **KW)
    sizes = chunk_sizes(monkeypatch)
    res = solve_adjoint(problem, X, DEPTHS, memory_budget=budget, **KW)
    assert len(sizes) > 1 and sum(a * b for a, b in sizes) == X.shape[0] * DEPTHS.size
    if budget == BUDGETS[0]:
        assert max(a for a, _ in sizes) >= 2               # chunks of several depths
    else:
        assert any(1 < b < X.shape[0] for _, b in sizes)    # parts of a depth's inputs
    assert ref.success
    assert_bitwise(res, ref)
    assert res.nfev > ref.nfev        # more vectorised calls: one set per chunk


def test_single_row_chunks_and_an_unbatched_input(problem, monkeypatch):
    ref = solve_adjoint(problem, X[1], DEPTHS, memory_budget="1GiB", **KW)
    sizes = chunk_sizes(monkeypatch)
    res = solve_adjoint(problem, X[1], DEPTHS, memory_budget=6_000, **KW)
    assert set(sizes) == {(1, 1)}
    assert_bitwise(res, ref)
    assert res.z.shape == (DEPTHS.size, 2)


def test_failed_rows_give_the_same_message_in_chunks(problem, monkeypatch):
    kw = dict(KW, max_steps=12)              # the deep rows run out of steps
    ref = solve_adjoint(problem, X, DEPTHS, memory_budget="1GiB", **kw)
    assert not ref.success and "max_steps = 12" in ref.message
    sizes = chunk_sizes(monkeypatch)
    res = solve_adjoint(problem, X, DEPTHS, memory_budget=12_000, **kw)
    assert len(sizes) > 1
    assert_bitwise(res, ref)              # same first failed row, same count


def test_numba_chunks_are_bitwise_equal_to_one_run(problem, monkeypatch):
    pytest.importorskip("numba")
    kw = dict(KW, backend="numba")
    # several depths a chunk (depths put back in the user's order); parts of a depth's
    # inputs (depths given descending: no reordered copy of the outputs to make room for)
    for depths, budget in ((DEPTHS, 9_000), (DEPTHS[::-1], 6_000)):
        ref = solve_adjoint(problem, X, depths, memory_budget="1GiB", **kw)
        sizes = chunk_sizes(monkeypatch)
        res = solve_adjoint(problem, X, depths, memory_budget=budget, **kw)
        assert len(sizes) > 1
        if budget == 9_000:
            assert all(b == X.shape[0] for _, b in sizes)       # whole depths
        else:
            assert any(b < X.shape[0] for _, b in sizes)
        assert_bitwise(res, ref)
        assert res.nfev == ref.nfev      # the largest count of one row


def test_peak_memory_of_a_chunked_run_stays_under_the_budget(problem):
    x = 0.3 * np.random.default_rng(0).standard_normal((10, 2))
    depths = np.linspace(0.0, -1.0, 20)
    solve_adjoint(problem, x[:2], depths[:2], **KW)        # code generated outside
    budget = 300_000
    tracemalloc.start()
    try:
        res = solve_adjoint(problem, x, depths, memory_budget=budget, **KW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.success
    # one run of all rows would hold about 5 KiB x 200 rows = 1 MB
    assert peak < budget, f"peak {peak} bytes above memory_budget = {budget}"


def test_outputs_beyond_the_budget_raise_memory_error_before_allocating(problem):
    x = np.zeros((20_000, 2))
    depths = np.linspace(0.0, -1.0, 50_000)        # 10^9 rows: outputs of about 70 GB
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as info:
            solve_adjoint(problem, x, depths, memory_budget="1GiB", **KW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert "1000000000 (depth, input) rows (50000 depths x 20000 inputs)" in msg
    assert "memory_budget = 1.0 GiB" in msg
    assert "invimbed.dask.solve_batch" in msg and "solver='adjoint'" in msg
    assert peak < 20 * 2**20, f"{peak} bytes allocated before the MemoryError"


def test_outputs_that_fit_only_in_the_users_order_of_depths_raise(problem):
    # 35 rows of 88 bytes of outputs: a reordered copy of them does not fit in 5000
    with pytest.raises(MemoryError, match="35 \\(depth, input\\) rows"):
        solve_adjoint(problem, X, DEPTHS, memory_budget=5_000, **KW)


@pytest.mark.parametrize("text, nbytes", [("512MB", 512 * 10**6), ("1.5 GiB", 3 * 2**29),
                                          ("100B", 100), ("2kB", 2000), (4096, 4096)])
def test_budget_reads_bytes_and_units(text, nbytes):
    assert as_memory_budget(text) == nbytes


@pytest.mark.parametrize("bad, error, match", [
    (1.5e9, TypeError, "positive number of bytes"),
    (True, TypeError, "positive number of bytes"),
    ("12 parsecs", ValueError, "units: B, kB"),
    ("1 gb", ValueError, "units: B, kB"),
    (0, ValueError, "at least 1 byte"),
    ("-2MB", ValueError, "at least 1 byte"),
])
def test_a_bad_budget_is_refused_naming_it(problem, bad, error, match):
    with pytest.raises(error, match=match) as info:
        solve_adjoint(problem, X, DEPTHS, memory_budget=bad, **KW)
    assert "`memory_budget`" in str(info.value)


def test_default_budget_is_half_of_what_is_left_at_most_one_gib_beyond_outputs(monkeypatch):
    assert 0 < budget_mod.default_memory_budget() <= 2**30
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 300 * 2**20)
    assert budget_mod.default_memory_budget() == 150 * 2**20
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 64 * 2**30)
    assert budget_mod.default_memory_budget() == 2**30
    # outputs that fit in what is left are not refused by the cap: it sizes the chunks
    assert budget_mod.default_memory_budget(5 * 2**30) == 6 * 2**30
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: None)
    assert budget_mod.default_memory_budget() == 2**30


def test_default_budget_refuses_outputs_beyond_half_of_what_is_left(problem, monkeypatch):
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 10_000)
    with pytest.raises(MemoryError, match="memory_budget = 4.9 KiB"):
        solve_adjoint(problem, X, DEPTHS, **KW)
