"""``solve_imbedding(memory_budget=...)``: the sweep within a budget, bit for bit.

An adaptive sweep takes one sequence of steps for its whole batch, so the batch is never
cut; where the sweep's state at every requested depth does not fit, each depth's fields
are computed as the sweep reaches it (`invimbed._core.sweep.memory.DepthSink`). The
results must be those of the run that keeps every state, asserted with ``array_equal``;
a request whose outputs and working state cannot fit gets the `MemoryError` naming the
rows, the budget and invimbed.dask, before the sweep starts.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from invimbed import PiecewiseConstant, solve_imbedding
from invimbed._core.sweep import memory as sweep_memory
from problems import sympy_pendulum

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
X = np.array([[0.4, -0.3], [1.1, 0.6], [-0.8, 0.2], [0.1, 0.9], [-0.5, -0.7]])
DEPTHS = np.linspace(-1.0, 0.0, 12)      # deepest first: put back in this order
CTRL = PiecewiseConstant([-1.0, -0.55, -0.15, 0.0], [[0.2, 0.1], [-0.3, 0.05], [0.4, 0.2]])


@pytest.fixture(scope="module")
def problem():
    return sympy_pendulum()


@pytest.fixture
def costs(monkeypatch):
    """The `SweepCost` of every sweep planned, the bytes held meanwhile (the order loop's
    result of the lower order), and how many streamed (`DepthSink`)."""
    from invimbed._core.sweep import imbedding

    seen = {"costs": [], "held": [], "sinks": 0}
    cost, init = sweep_memory.sweep_cost, sweep_memory.DepthSink.__init__
    real_plan = imbedding.memory_plan

    def spy_plan(*a, **k):
        seen["held"].append(a[5] if len(a) > 5 else k.get("held", 0))
        return real_plan(*a, **k)

    def spy_cost(*a, **k):
        c = cost(*a, **k)
        seen["costs"].append(c)
        return c

    def spy_init(self, *a, **k):
        seen["sinks"] += 1
        init(self, *a, **k)

    monkeypatch.setattr(sweep_memory, "sweep_cost", spy_cost)
    monkeypatch.setattr(imbedding, "memory_plan", spy_plan)
    monkeypatch.setattr(sweep_memory.DepthSink, "__init__", spy_init)
    return seen


def assert_bitwise(res, ref):
    assert (res.success, res.status, res.message) == (ref.success, ref.status, ref.message)
    for k in FIELDS:
        np.testing.assert_array_equal(res[k], ref[k], err_msg=k)
    for k in ref.error_estimate:
        np.testing.assert_array_equal(res.error_estimate[k], ref.error_estimate[k], err_msg=k)
    np.testing.assert_array_equal(res.converged, ref.converged)


@pytest.mark.parametrize("kw", [dict(method="RK45", order=2),
                                dict(method="rk4", step=0.05),
                                dict(tol=1e-6, max_order=3)],
                         ids=["RK45", "rk4", "tol"])
def test_a_sweep_without_its_states_is_bitwise_the_sweep_with_them(problem, costs, kw):
    ref = solve_imbedding(problem, X, DEPTHS, control=CTRL, **kw)
    assert costs["sinks"] == 0                     # the default budget keeps every state
    largest = max(h + c.outputs + c.work for h, c in zip(costs["held"], costs["costs"]))
    res = solve_imbedding(problem, X, DEPTHS, control=CTRL, memory_budget=largest, **kw)
    assert costs["sinks"] >= 1
    assert_bitwise(res, ref)


def test_an_unbatched_input_and_a_failure_part_way(problem, costs):
    # rk4 with a step the pendulum's jet cannot follow at depth: NaN from some depth on
    kw = dict(control=CTRL, method="rk4", step=0.5, order=1)
    ref = solve_imbedding(problem, X[1] * 40, DEPTHS, **kw)
    budget = costs["costs"][-1].outputs + costs["costs"][-1].work
    res = solve_imbedding(problem, X[1] * 40, DEPTHS, memory_budget=budget, **kw)
    assert costs["sinks"] == 1
    assert_bitwise(res, ref)


def test_outputs_beyond_the_budget_raise_memory_error_before_the_sweep(problem):
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as info:
            solve_imbedding(problem, np.zeros((20_000, 2)), np.linspace(-1, 0, 2_000),
                            control=CTRL, memory_budget="64MiB")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = str(info.value)
    assert "solve_imbedding" in text and "40000000 (depth, input) rows" in text
    assert "2000 depths x 20000 inputs" in text and "67108864 bytes" in text
    assert "invimbed.dask.solve_batch" in text and "solver='imbedding'" in text
    assert peak < 64 * 2**20                       # refused before anything large exists


def test_a_higher_order_that_does_not_fit_keeps_the_lower_one(problem, costs):
    kw = dict(control=CTRL, tol=1e-6, max_order=4)
    depths = np.array([-0.3, -0.2])
    ref = solve_imbedding(problem, X, depths, **kw)
    assert ref.orders_run[0] == 1 and len(ref.orders_run) > 1
    one, two = (c.outputs + c.work for c in costs["costs"][:2])
    assert two > one                             # the higher order's jet is the larger
    res = solve_imbedding(problem, X, depths, memory_budget=one, **kw)
    assert res.orders_run == [1]
    assert any(w.code == "higher_order_failed" and "memory_budget" in w.message
               for w in res.warnings)
    assert not res.success and res.status == -2
    first_sweep = solve_imbedding(problem, X, depths, control=CTRL, tol=1e-6, max_order=1)
    for k in FIELDS:
        np.testing.assert_array_equal(res[k], first_sweep[k], err_msg=k)


def test_memory_budget_is_checked_as_an_argument(problem):
    with pytest.raises(ValueError, match="memory_budget"):
        solve_imbedding(problem, X, DEPTHS, control=CTRL, memory_budget=-1)


# -- the compiled sweep (backend="numba") ------------------------------------------------


def njit_problem():
    """Per-sample ``numba.njit`` functions, derivatives by finite differences (the
    problem ``python -m invimbed compile`` warms the kernels with)."""
    pytest.importorskip("numba")
    from invimbed._backends._warm import _problem

    return _problem()


@pytest.mark.parametrize("kw", [dict(method="RK45"), dict(method="rk4", step=0.25)],
                         ids=["adaptive", "fixed-step"])
def test_the_compiled_sweep_refuses_a_budget_its_outputs_exceed(kw):
    """backend="numba" raises the numpy sweep's MemoryError where the request does not
    fit (it ran regardless before): 100 depths x 1000 inputs need 20 MiB of outputs."""
    from invimbed import Constant

    problem = njit_problem()
    x, depths = np.zeros((1000, 2)), np.linspace(-1.0, 0.0, 100)
    args = (problem, x, depths)
    with pytest.raises(MemoryError) as numpy_info:
        solve_imbedding(*args, control=Constant([0.1]), memory_budget="10MB", **kw)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as info:
            solve_imbedding(*args, control=Constant([0.1]), memory_budget="10MB",
                            backend="numba", **kw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = str(info.value)
    assert text.startswith("solve_imbedding: the outputs and the compiled sweep's arrays of "
                           "100000 (depth, input) rows (100 depths x 1000 inputs) need ")
    # the numpy sweep's message, the same budget and way out
    tail = "more than memory_budget = 9.5 MiB (10000000 bytes); pass a larger memory_budget"
    assert tail in text and tail in str(numpy_info.value)
    assert "invimbed.dask.solve_batch(problem, x, depths, solver='imbedding'" in text
    assert peak < 10_000_000                       # refused before the fields exist


def test_the_compiled_sweeps_estimate_counts_its_arrays():
    """`memory_bytes` of the adaptive kernel: its fields at every depth and the kept steps
    of a dense output, as `sweep_numba_adaptive` allocates them."""
    pytest.importorskip("numba")
    from invimbed._backends.sweep_adaptive import memory_bytes

    empty = ((np.zeros((0, 4), np.int64),),) * 3
    n, B, N, orders, width, size, kq = 10, 100, 2, 2, 6, 40, 4
    held, work = memory_bytes(n, B, N, orders, width, size, 0, kq, 7, empty, 3, 1, 10)
    fields = 8 * (n * B * orders * width + n * B * (N + 1))
    assert fields <= held <= fields + 8 * 5 * B
    dense, _ = memory_bytes(n, B, N, orders, width, size, 64, kq, 7, empty, 3, 1, 10)
    assert dense - held == 8 * B * 64 * (2 + size * (1 + kq))
    assert 0 < work < held


# -- the default budget ------------------------------------------------------------------


def _request(n, B, N=2, nw=0):
    """A stand-in of a request's setup (what `sweep_memory.plan` reads)."""
    from types import SimpleNamespace

    return SimpleNamespace(x=np.zeros((B, N)), depths_desc=np.zeros(n),
                           control=SimpleNamespace(n_params=nw))


def _closure(size, ratio=True):
    from types import SimpleNamespace

    return SimpleNamespace(layout=SimpleNamespace(size=size), has_error_estimate=True,
                           has_ratio_test=ratio, has_look_ahead=ratio)


def test_the_default_budget_admits_a_sweep_that_fits_what_is_left(monkeypatch):
    """10^6 rows of benchmarks/bench_memory.py's N = 2 oscillator (1000 depths x 1000
    inputs, RK45, jet 1 with its estimate): 460 MB with its states by the old estimate.
    Dropping the states, its numpy arrays peaked at 234 MiB (`tracemalloc`) and the
    address space grew by 245 MiB; the estimate is 258.7 MiB. With 350 MiB left, the
    old default (half of it, 175 MiB) refused it; it fits, and now runs."""
    from invimbed._core.reference import row_chunks as budget_mod

    setup, clo = _request(1000, 1000), _closure(34 * 1000, ratio=False)
    cost = sweep_memory.sweep_cost(setup, 34 * 1000, "RK45", 1)
    assert (cost.outputs + cost.work) / 2**20 == pytest.approx(258.7, abs=0.1)
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 350 * 2**20)
    assert isinstance(sweep_memory.plan(setup, clo, "RK45", None, per_depth=None),
                      sweep_memory.DepthSink)
    # what does not fit what is left (with its margin, 1.25) is still refused
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 300 * 2**20)
    with pytest.raises(MemoryError, match=r"need 258\.7 MiB, more than memory_budget = "
                                          r"240\.0 MiB"):
        sweep_memory.plan(setup, clo, "RK45", None, per_depth=None)
    # ... as is a sweep that fits only without the result the order loop keeps meanwhile
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 350 * 2**20)
    with pytest.raises(MemoryError, match=r"need 308\.7 MiB"):
        sweep_memory.plan(setup, clo, "RK45", None, per_depth=None, held=50 * 2**20)
    # states that fit half of what is left, and 1 GiB beyond the outputs, are kept
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 64 * 2**30)
    assert sweep_memory.plan(setup, clo, "RK45", None, per_depth=None) is None
    # an explicit budget is the limit, as before
    with pytest.raises(MemoryError, match=r"memory_budget = 240\.0 MiB"):
        sweep_memory.plan(setup, clo, "RK45", 240 * 2**20, per_depth=None)


def test_the_default_budget_admits_working_arrays_beyond_one_gib_that_fit(monkeypatch):
    """10^6 rows as 10 depths x 10^5 inputs: the working arrays of the batch's state are
    estimated at 1.4 GiB, beyond the 1 GiB the default allowed beyond the outputs, which
    refused the request on any machine; with 64 GiB left it runs (its states dropped)."""
    from invimbed._core.reference import row_chunks as budget_mod

    setup, clo = _request(10, 100_000), _closure(34 * 100_000, ratio=False)
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 64 * 2**30)
    assert isinstance(sweep_memory.plan(setup, clo, "RK45", None, per_depth=None),
                      sweep_memory.DepthSink)


def test_the_estimate_covers_the_measured_peak_with_tol():
    """The same 10^6 rows with ``tol=1e-3`` (three error-like copies): 553.8 MiB of numpy
    arrays at the peak of the first sweep, its states dropped (`tracemalloc`); the
    estimate was 352 MiB, and under ``ulimit -v 1GiB`` (641 MiB left) the sweep then
    ran out of memory part-way where it should have been refused."""
    cost = sweep_memory.sweep_cost(_request(1000, 1000), 74 * 1000, "RK45", 3)
    assert cost.outputs + cost.work >= 553.8 * 2**20
    assert cost.outputs + cost.work > 641 * 2**20 / 1.25          # refused there


def test_the_compiled_sweeps_default_limit_is_what_is_left(monkeypatch):
    from invimbed._core.reference import row_chunks as budget_mod

    setup = _request(1000, 1000)
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: 800 * 2**20)
    sweep_memory.check_compiled(setup, copies=1, held=350 * 2**20, work=0, budget=None)
    with pytest.raises(MemoryError, match=r"compiled sweep's arrays .* memory_budget = "
                                          r"640\.0 MiB"):
        sweep_memory.check_compiled(setup, copies=1, held=400 * 2**20, work=0, budget=None)
    monkeypatch.setattr(budget_mod, "available_bytes", lambda: None)   # not known: run
    sweep_memory.check_compiled(setup, copies=3, held=2**40, work=0, budget=None)


def test_the_order_loop_counts_the_result_it_keeps():
    from invimbed._core.sweep.orders import result_bytes
    from invimbed._core.results.results import ImbeddingResult

    res = ImbeddingResult(z=np.zeros((10, 3, 2)), value=np.zeros((10, 3)),
                          error_estimate={"z": np.zeros((10, 3, 2))}, message="m")
    assert result_bytes(res) == 8 * (60 + 30 + 60)
