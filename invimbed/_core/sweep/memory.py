"""The imbedding sweep within a memory budget (``memory_budget`` of `solve_imbedding`).

An adaptive sweep takes one sequence of steps for its whole batch (the error norm is
taken over every input's state at once), so cutting the batch into chunks of inputs
would change the steps, and the numbers. What grows with the request is elsewhere: the
integrator keeps the sweep's state at every requested depth (``n`` copies of the
batch's state, the jets of every order carried: ``S`` values an input, 50 for ``N = 2``
at order 1 with the estimate, hundreds at higher orders), and the fields (with their
error estimates and series differences) are assembled from them. So:

* while those states fit, the sweep runs as it always has (`plan` returns None);
* otherwise a `DepthSink` takes the integrator's state at each depth as it is reached
  and keeps only the fields computed from it (``per_depth``, a pure function of the
  state): the same numbers, bit for bit, without the ``n`` states;
* a request whose outputs and one sweep's working state do not fit even then gets the
  `MemoryError` of `invimbed._core.reference.row_chunks.too_large`, before the sweep starts.

The bytes are estimated (`SweepCost`): the outputs are counted exactly, the working
arrays as copies of the batch's state (`WORK_COPIES` by method, `RHS_COPIES` for the
right-hand side; the implicit methods also hold a dense Jacobian of the whole batch's
state, `JACOBIAN_COPIES`).
docs/performance.md, "Memory budget", has the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..reference.row_chunks import default_memory_budget, default_memory_limit, too_large

#: Copies of the batch's state the integrator works with, by method: the stages and
#: dense output of the explicit Runge-Kutta pairs, the stages of the fixed-step methods,
#: the vectors of the implicit ones (their Jacobian: `JACOBIAN_COPIES`).
WORK_COPIES = {"RK23": 10, "RK45": 16, "DOP853": 30, "euler": 3, "midpoint": 4, "rk4": 6,
               "disc": 3, "Radau": 12, "BDF": 10, "LSODA": 10}
#: Copies of the batch's state that one evaluation of the right-hand side holds (the
#: derivative tensors and Taylor coefficients at every input): measured with
#: `tracemalloc`: 30 to 40 for the jet of order 1 with its estimate, N = 2, n_w = 6
#: (docs/performance.md, "Memory budget").
RHS_COPIES = 40
#: Copies of the dense Jacobian (size x size) of the implicit methods (Radau's real and
#: complex factorisations, BDF's and LSODA's one).
JACOBIAN_COPIES = {"Radau": 4, "BDF": 2, "LSODA": 2}
#: Bytes of a float.
FLOAT = 8


@dataclass(frozen=True)
class SweepCost:
    """Bytes of one sweep (see the module docstring)."""

    outputs: int        # the fields and their error arrays of every (depth, input) pair
    states: int         # the state of every requested depth (what `DepthSink` saves)
    work: int           # the integrator's and the right-hand side's working arrays


#: Copies of the fields, and of each error-like array, that a sweep's assembly holds at
#: once: the per-depth results and their stacked arrays, and for the error-like ones the
#: accuracy rule's and the order loop's arrays computed from them. Measured with
#: `tracemalloc` on benchmarks/bench_memory.py's oscillator (N = 2, no control, 1000
#: depths x 1000 inputs, states dropped): 28.7 values a row without `tol` (one
#: error-like copy), 68.4 with `tol=1e-3` (three), i.e. about 1.5 copies of the 6 field
#: values and 4 of the 5 error values.
FIELD_COPIES, ERROR_COPIES = 2, 4


def sweep_outputs(setup: Any, copies: int) -> int:
    """Bytes of a sweep's fields and their ``copies`` error-like arrays per field (the
    estimate, the ratio test's differences) at every (depth, input) pair, as its
    assembly holds them (`FIELD_COPIES`, `ERROR_COPIES`)."""
    B, N = setup.x.shape
    n = int(setup.depths_desc.size)
    nw = setup.control.n_params
    fields = 2 * N + nw + 2                  # z, value, adjoint, param_grad, depth_grad
    errors = 2 * N + nw + 1                  # z, value, adjoint, param_grad
    return n * B * FLOAT * (FIELD_COPIES * fields + ERROR_COPIES * copies * errors)


def sweep_cost(setup: Any, size: int, method: str, copies: int) -> SweepCost:
    """The bytes of a sweep of ``setup`` whose state has ``size`` values (the batch's),
    carrying ``copies`` error-like arrays per field (`sweep_outputs`)."""
    n = int(setup.depths_desc.size)
    work = FLOAT * size * (WORK_COPIES.get(method, 16) + RHS_COPIES)
    if method in JACOBIAN_COPIES:
        work += FLOAT * size * size * JACOBIAN_COPIES[method]
    return SweepCost(outputs=sweep_outputs(setup, copies), states=n * size * FLOAT, work=work)


def plan(setup: Any, clo: Any, method: str, budget: int | None,
         per_depth: Callable, held: int = 0) -> "DepthSink | None":
    """None where the sweep fits ``budget`` (bytes) as it is; a `DepthSink` where it
    fits only without the states of every depth. Raises `MemoryError` where it does
    not fit at all. ``held`` bytes are taken already (the result of the order loop's
    previous sweep, `invimbed._core.sweep.orders.raise_order`).

    ``budget=None`` (the default): the states are kept within
    `invimbed._core.reference.row_chunks.default_memory_budget` (half of what the process can still
    allocate, at most 1 GiB beyond the outputs), and dropped beyond it; the request is
    refused only where it does not fit in what the process can still allocate, less a
    margin (`invimbed._core.reference.row_chunks.default_memory_limit`): a sweep cannot be cut into
    chunks, so refusing what fits would only refuse, not save memory."""
    size = int(clo.layout.size)
    copies = (int(clo.has_error_estimate) + int(getattr(clo, "has_ratio_test", False))
              + int(getattr(clo, "has_look_ahead", False)))
    cost = sweep_cost(setup, size, method, copies)
    need = int(held) + cost.outputs + cost.work
    keep = default_memory_budget(int(held) + cost.outputs) if budget is None else budget
    if need + cost.states <= keep:
        return None
    limit = default_memory_limit() if budget is None else budget
    if limit is None or need <= limit:
        return DepthSink(setup.depths_desc, per_depth)
    B, n = setup.x.shape[0], int(setup.depths_desc.size)
    raise too_large("solve_imbedding", n, B, need, limit,
                    "the outputs and the sweep's working state", "imbedding")


def check_compiled(setup: Any, *, copies: int, held: int, work: int,
                   budget: int | None) -> None:
    """Raise the `MemoryError` of `too_large` before a compiled sweep
    (``backend="numba"``) whose bytes exceed ``budget`` (None: `default_memory_limit`):
    its outputs (`sweep_outputs`, ``copies`` as there), ``held``, the arrays the kernel
    writes at every depth (it cannot drop them as `DepthSink` does), and ``work``, its
    working arrays (the threads' scratch, the dense output's steps)."""
    limit = default_memory_limit() if budget is None else budget
    need = sweep_outputs(setup, copies) + int(held) + int(work)
    if limit is not None and need > limit:
        B, n = setup.x.shape[0], int(setup.depths_desc.size)
        raise too_large("solve_imbedding", n, B, need, limit,
                        "the outputs and the compiled sweep's arrays", "imbedding")


class DepthSink:
    """Where the integrator writes the state of depth ``i`` (``sink[i] = y``): the
    fields of that depth are computed at once (``per_depth(p, y)``) and the state is not
    kept. `states` stands in for the integrator's ``ys`` afterwards (0 where a depth was
    reached with finite values, NaN elsewhere), and `per_depth` hands back what was
    computed, raising again an ``ArithmeticError`` raised at that depth."""

    def __init__(self, depths_desc: np.ndarray, per_depth: Callable) -> None:
        self.depths = np.asarray(depths_desc, dtype=float)
        self.index = {float(p): i for i, p in enumerate(self.depths)}
        self.compute = per_depth
        self.got: list[Any] = [None] * self.depths.size
        self.reached = np.zeros(self.depths.size, dtype=bool)

    def __setitem__(self, i: int, y: np.ndarray) -> None:
        y = np.asarray(y)
        if not np.all(np.isfinite(y)):
            self.reached[i] = False
            self.got[i] = None
            return
        self.reached[i] = True
        try:
            self.got[i] = self.compute(float(self.depths[i]), y)
        except ArithmeticError as exc:
            self.got[i] = exc

    def states(self) -> np.ndarray:
        """One value per depth in place of its state: 0 where reached, else NaN."""
        return np.where(self.reached, 0.0, np.nan)[:, None]

    def per_depth(self, p: float, y: Any) -> Any:
        got = self.got[self.index[float(p)]]
        if isinstance(got, ArithmeticError):
            raise got
        return got
