"""The result of an accelerated fixed-step sweep, assembled by the core.

The kernels (numba) and the device loop (cupy) write the fields of each recorded depth
into arrays indexed by the depth's position in the user's ``depths`` (`Schedule.record`)
and report the first non-finite value as a position code (`Stopped.code`). `finish` turns
the code back into the core's `Stopped` and reports it as the numpy sweep does (the
whole batch stops at the first failing stage, NaN from there on; message, ``nfev`` and
the cut at ``max_steps`` by `invimbed._core.integrators.fixed`), and hands everything to
`invimbed._core.sweep.assembly.collect_results`, which computes the depth gradient
(`depth_gradient`), the status, the accuracy verdict and packs the result exactly as for
``backend="numpy"``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._core.setup.arguments import Setup
from .._core.sweep.assembly import collect_results
from .._core.integrators.common import Outcome
from .._core.integrators.fixed import Stopped, evaluations, stop_message
from .._core.integrators.schedule import Schedule
from .._core.results.results import ImbeddingResult

_NONE = np.iinfo(np.int64).max
_KEYS = ("z", "value", "adjoint", "param_grad")


def stopped(fail_pos: np.ndarray, fail_p: np.ndarray, stages: int) -> Stopped | None:
    """The first failure of the batch from per-sample codes ``2 (k (S + 1) + s) + rhs``
    (the inverse of `Stopped.code`; `_NONE` where a sample did not fail)."""
    first = int(fail_pos.min()) if fail_pos.size else _NONE
    if first == _NONE:
        return None
    pos, rhs = divmod(first, 2)
    k, s = divmod(pos, stages + 1)
    return Stopped(k, s, bool(rhs), float(fail_p[int(np.argmin(fail_pos))]))


def finish(setup: Setup, sched: Schedule, fields: dict, error: dict | None,
           fail_pos: np.ndarray, fail_p: np.ndarray, closure: str, method: str,
           backend: str, provider: object | None = None) -> ImbeddingResult:
    """The `ImbeddingResult` of an accelerated sweep, by `collect_results`.

    ``fields`` and ``error`` hold arrays (n, B, ...) indexed by the user's order of the
    depths (a ``"depth_grad"`` in ``fields`` is ignored: the core computes it);
    ``fail_pos``/``fail_p`` the per-sample failure codes and depths (`_NONE` where none).
    ``provider`` replaces the problem's provider for the depth gradient's ``f`` and
    ``R`` (the numba backend evaluates per-sample functions in a compiled loop).
    """
    stop = stopped(fail_pos, fail_p, sched.stages)
    outcome = Outcome(ys=np.empty(0), nfev=evaluations(sched, stop))
    message = stop_message(sched, stop, setup.q)
    if message is not None:
        outcome.success, outcome.message = False, message
        outcome.failed_at = stop.p if stop is not None else (float(sched.p_end[-1]) if sched.n_steps else setup.q)
    reached = np.zeros(setup.depths.size, bool)   # by the whole batch
    if sched.record_initial >= 0:
        reached[sched.record_initial] = True
    done = sched.record[:stop.k] if stop is not None else sched.record
    reached[done[done >= 0]] = True
    # the "state" of depth i (descending) is where its row is in the outputs, NaN if the
    # sweep did not reach it
    outcome.ys = np.where(reached[setup.permutation], setup.permutation, np.nan)[:, None]

    permutation = setup.permutation         # user's order -> descending depths
    same = bool(np.all(permutation == np.arange(permutation.size)))

    def descending(arrays: dict) -> dict:      # no copy when the depths were given so
        return {k: arrays[k] if same else arrays[k][permutation] for k in _KEYS}

    B, N = setup.x.shape
    shapes = {"z": (B, N), "value": (B,), "adjoint": (B, N),
              "param_grad": (B, setup.control.n_params), "depth_grad": (B,)}
    if provider is not None:
        setup = dataclasses.replace(setup, provider=provider)
    return collect_results(setup, outcome, None, shapes, closure=closure, method=method,
                           with_errors=error is not None, backend=backend,
                           stacked_fields=(descending(fields),
                                           None if error is None else descending(error)))
