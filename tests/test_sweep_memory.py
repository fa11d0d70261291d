"""``solve_imbedding(memory_budget=...)``: the sweep within a budget, bit for bit.

An adaptive sweep takes one sequence of steps for its whole batch, so the batch is never
cut; where the sweep's state at every requested depth does not fit, each depth's fields
are computed as the sweep reaches it (`invimbed._core.sweep_memory.DepthSink`). The
results must be those of the run that keeps every state, asserted with ``array_equal``;
a request whose outputs and working state cannot fit gets the `MemoryError` naming the
rows, the budget and invimbed.dask, before the sweep starts.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from invimbed import PiecewiseConstant, solve_imbedding
from invimbed._core import sweep_memory
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
    """The `SweepCost` of every sweep planned, and how many streamed (`DepthSink`)."""
    seen = {"costs": [], "sinks": 0}
    cost, init = sweep_memory.sweep_cost, sweep_memory.DepthSink.__init__

    def spy_cost(*a, **k):
        c = cost(*a, **k)
        seen["costs"].append(c)
        return c

    def spy_init(self, *a, **k):
        seen["sinks"] += 1
        init(self, *a, **k)

    monkeypatch.setattr(sweep_memory, "sweep_cost", spy_cost)
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
    largest = max(c.outputs + c.work for c in costs["costs"])
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
