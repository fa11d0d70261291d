"""Batches of inputs on a Dask cluster (optional extra ``invimbed[dask]``).

`solve_batch` cuts a batch into chunks, solves each chunk on a Dask worker and puts the
results back together in the user's order. Two solvers:

* ``solver="imbedding"`` (default): the imbedding sweep, `invimbed.solve_imbedding`, is
  sequential in depth but independent across inputs ``x``: the batch is cut along the
  batch axis into chunks of inputs, each swept through every depth;
* ``solver="adjoint"``: the exact fields of `invimbed.solve_adjoint` (ensemble strategy),
  where every (depth, input) pair is an independent row: the rows are cut into chunks
  of whole inputs (every depth) when there are enough inputs, and into chunks of
  consecutive depths of one input otherwise (a single input with many depths).

A chunk that fails is reported with its rows (``chunk_status``) and the other chunks'
rows are kept. dask is imported when `solve_batch` is called, not when this module is.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
import traceback
from typing import Any

import numpy as np

from ._core.reference.adjoint import OPTIONS as _ADJOINT_OPTIONS
from ._core.reference.adjoint import solve_adjoint
from ._core.sweep.imbedding import solve_imbedding
from ._core.problem.bolza import BolzaProblem
from ._core.results.results import ImbeddingResult, sweep_result
from ._core.results.status import Status, as_status
from ._core.inputs.validation import (SOLVE_IVP_OPTIONS, STEP_BUDGET, as_bool, as_depths,
                                      as_float_array, check_choice, describe,
                                      require_finite)

#: What ``solver`` may be.
SOLVERS = ("imbedding", "adjoint")
_SOLVE = {"imbedding": solve_imbedding, "adjoint": solve_adjoint}
#: The per-depth arrays of a result, with their batch axis (axis 1).
_FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
#: A `solve_imbedding` result's other per-(depth, input) arrays (batch axis 1), where it
#: has them; a chunk that raised has them False, NaN or 0.
_PAIR_ARRAYS = ("converged", "series_ratio", "depth_order", "exact_fallback")
#: Every `Status`, most severe first: the batch has the most severe of its chunks' (all
#: NaN, some NaN, approximate, stopped, as precise as the functions, unchecked, success).
_SEVERITY = (Status.RAISED, Status.FAILED, Status.NOT_CONVERGED, Status.STOPPED,
             Status.IMPRECISE, Status.UNCHECKED, Status.SUCCESS)


def _keyword_only(fn: Any) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _check_keywords(solver: str, kwargs: dict) -> None:
    """Refuse, before any work is submitted, the keywords the chosen solver does not take
    (naming each, with the closest name it takes)."""
    adjoint_takes = _keyword_only(solve_adjoint) | set(_ADJOINT_OPTIONS)
    imbedding_takes = (_keyword_only(solve_imbedding) | set(SOLVE_IVP_OPTIONS)
                       | {STEP_BUDGET})
    takes = adjoint_takes if solver == "adjoint" else imbedding_takes
    unknown = [k for k in kwargs if k not in takes]
    if not unknown:
        return
    if solver == "imbedding":
        only = sorted(k for k in unknown if k in adjoint_takes)
        if only:
            raise TypeError(
                f"solve_batch(solver='imbedding') got keyword argument(s) "
                f"{', '.join(map(repr, only))} that solve_imbedding does not take (they are "
                f"solve_adjoint's: pass solver='adjoint')")
    names = []
    for k in sorted(unknown):
        close = difflib.get_close_matches(k, sorted(takes), n=1)
        names.append(repr(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(
        f"solve_batch(solver={solver!r}) got keyword argument(s) {', '.join(names)} that "
        f"solve_{solver} does not take; it takes {', '.join(map(repr, sorted(takes)))}")


def _import_dask() -> tuple[Any, Any]:
    try:
        import dask
        import dask.array as da
    except ImportError as exc:
        raise ImportError(
            "invimbed.dask needs dask (and dask.distributed for a cluster): "
            "pip install invimbed[dask]  (or pip install 'dask[distributed]')") from exc
    return dask, da


#: The statuses of a distributed Client that can no longer run anything.
_CLOSED = ("closing", "closed", "failed")


def _default_client(client: Any) -> Any:
    if client is not None:
        if not all(callable(getattr(client, m, None)) for m in ("scatter", "submit", "gather")):
            hint = (f"; to use the scheduler at that address pass "
                    f"client=distributed.Client({client!r})" if isinstance(client, str) else "")
            raise TypeError(f"`client` must be a dask.distributed Client (with scatter, "
                            f"submit and gather), but got {describe(client)}{hint}")
        status = getattr(client, "status", None)
        if status in _CLOSED:      # distributed fails deep inside (no scheduler, no loop)
            raise ValueError(f"`client` is {status} (client.status == {status!r}): pass an "
                             f"open client (a new distributed.Client(...)), or client=None "
                             f"for dask's local scheduler")
        return client
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:  # no client in this process: dask's local scheduler
        return None


def _solve_chunk(solver: str, problem: BolzaProblem, x: Any, depths: Any,
                 kwargs: dict) -> dict:
    """Solve one chunk on a worker; an exception is returned, not raised, so that one
    chunk cannot take the batch down."""
    try:
        res = _SOLVE[solver](problem, np.asarray(x, dtype=float), depths, **kwargs)
    except Exception as exc:  # reported per chunk by solve_batch
        return {"result": None, "error": exc,
                "traceback": "".join(traceback.format_exception(exc))}
    return {"result": res, "error": None, "traceback": None}


def _status(out: dict) -> dict:
    res = out["result"]
    if res is None:
        return {"success": False, "status": Status.RAISED, "nfev": 0,
                "message": f"{type(out['error']).__name__}: {out['error']}",
                "error": out["error"], "shapes": None, "dtypes": None}
    keys = (_FIELDS + (("nsteps",) if res.get("nsteps") is not None else ())
            + tuple(k for k in _PAIR_ARRAYS if res.get(k) is not None))
    shapes = {k: tuple(res[k].shape) for k in keys}
    dtypes = {k: res[k].dtype for k in keys}
    if res.get("error_estimate") is not None:
        for k, v in res.error_estimate.items():
            shapes[f"error_estimate.{k}"] = tuple(v.shape)
            dtypes[f"error_estimate.{k}"] = v.dtype
    return {"success": bool(res.success), "status": as_status(res.status), "nfev": int(res.nfev),
            "message": res.message, "error": None, "shapes": shapes, "dtypes": dtypes,
            "closure": res.get("closure"), "method": res.get("method"),
            "strategy": res.get("strategy"), "warnings": list(res.get("warnings") or []),
            "derivatives": res.get("derivatives"), "order": res.get("order"),
            "orders_run": res.get("orders_run")}


def _field(out: dict, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    res = out["result"]
    if res is None:  # the chunk raised: NaN (no steps taken for ``nsteps``, no order,
        # not converged, not recomputed)
        return np.full(shape, np.nan if np.issubdtype(dtype, np.floating) else 0, dtype=dtype)
    if key.startswith("error_estimate."):
        return res.error_estimate[key.split(".", 1)[1]]
    return res[key]


def _tiles(solver: str, n: int, B: int, chunk_size: int) -> list[tuple[int, int, int, int]]:
    """The chunks ``(start, stop, depth_start, depth_stop)``: inputs ``x[start:stop]`` at
    ``depths[depth_start:depth_stop]`` (see `solve_batch`, ``chunk_size``)."""
    if solver == "imbedding":
        return [(a, min(a + chunk_size, B), 0, n) for a in range(0, B, chunk_size)]
    if chunk_size >= n:   # whole inputs, every depth
        per = chunk_size // n
        return [(a, min(a + per, B), 0, n) for a in range(0, B, per)]
    return [(a, a + 1, d, min(d + chunk_size, n))   # consecutive depths of one input
            for a in range(B) for d in range(0, n, chunk_size)]


def _global_inputs(message: str, start: int) -> str:
    """solve_adjoint names a failed input by its index in the chunk: make it the batch's."""
    return re.sub(r"input x\[(\d+)\]", lambda m: f"input x[{start + int(m.group(1))}]",
                  message)


def solve_batch(problem: BolzaProblem, x: Any, depths: Any, *, client: Any = None,
                chunk_size: int | None = None, as_dask: bool = False,
                solver: str = "imbedding", **solve_kwargs: Any) -> ImbeddingResult:
    """Solve a batch of inputs chunk by chunk on Dask workers.

    The batch is cut into chunks; each chunk is one task, run where the scheduler puts
    it, and the results are put back in the user's order of inputs and depths. The
    numbers are those of one call of the solver on the whole batch (its rows are
    independent), except where a chunk fails: see ``chunk_status``.

    - ``solver="imbedding"``: chunks of ``chunk_size`` inputs along axis 0 of ``x``, each
      ``invimbed.solve_imbedding(problem, x[a:b], depths, **solve_kwargs)``.
    - ``solver="adjoint"``: the exact fields, ``invimbed.solve_adjoint(problem, x[a:b],
      depths[c:d], **solve_kwargs)``, whose every (depth, input) pair is a row of its
      own; ``chunk_size`` counts such rows. If ``chunk_size >= n`` (the number of
      depths), a chunk is ``chunk_size // n`` whole inputs at every depth; otherwise it
      is ``chunk_size`` consecutive depths (in the order given) of a single input. With
      the default ``chunk_size`` this cuts a large batch along the inputs and a single
      input (or a few) along the depths.

    Parameters
    ----------
    problem : BolzaProblem
        Sent to every worker (with cloudpickle: lambdas and closures travel; numba
        functions are recompiled there unless cached).
    x : array_like or dask.array.Array, shape (B, N)
        The inputs. A dask array is used block by block without being gathered.
    depths : array_like, shape (n,)
        As in `solve_imbedding` (with ``solver="adjoint"`` they are checked before any
        chunk is submitted, as a chunk of depths sees only its own).
    client : distributed.Client, optional
        Where to run; by default the current client (``distributed.get_client()``) if
        there is one, else dask's local threaded scheduler.
    chunk_size : int, optional
        Rows per chunk: inputs for ``solver="imbedding"``, (depth, input) pairs for
        ``solver="adjoint"`` (see above for how they are grouped). By default the rows
        are split into about four chunks per worker thread (at least 1 row each). Each
        chunk carries per-task overhead (tens of milliseconds on a local cluster): keep
        chunks at thousands of rows.
    as_dask : bool, default False
        Return the per-depth arrays (``z``, ``value``, ``adjoint``, ``param_grad``,
        ``depth_grad``, and ``nsteps`` or the ``error_estimate`` arrays) as dask arrays,
        chunked like the chunks, whose blocks stay on the workers until computed (for
        outputs larger than the client's memory). The chunk statuses are gathered in any
        case.
    solver : {"imbedding", "adjoint"}, default "imbedding"
        Which solver runs on the chunks: the imbedding sweep or the exact ensemble
        adjoint.
    **solve_kwargs
        Passed to the solver: to `solve_imbedding` (``control``, ``closure``, ``method``,
        ``step``, ``backend``, ...) or to `solve_adjoint` (``control``, ``method``,
        ``rtol``, ``atol``, ``strategy``, ``backend``, ``first_step``, ``max_step``,
        ``max_steps``).

    Returns
    -------
    ImbeddingResult
        The fields with the batch axis after the depth axis, as from a batched call of
        the solver (``solve_adjoint``'s ``nsteps`` and ``strategy``; `solve_imbedding`'s
        ``converged``, ``series_ratio``, ``depth_order`` and ``exact_fallback`` put
        together like the fields, ``order`` the highest of the chunks', ``orders_run``
        the orders any chunk swept; ``derivatives``; ``warnings`` gathered over the
        chunks, each once), and

        - ``chunk_status``: a list with, for each chunk, ``start``, ``stop`` (its inputs
          ``x[start:stop]``), ``depth_start``, ``depth_stop`` (its depths
          ``depths[depth_start:depth_stop]``; every depth for the imbedding sweep),
          ``success``, ``status`` (the solver's `invimbed.STATUS` code: 0 success, 1
          reached but not checked, -1 the solve failed, e.g. a non-finite value, -2 not
          converged; or -3 for an exception in the task), ``message`` (for
          ``solver="adjoint"`` the failed input is numbered as in the whole batch) and
          ``nfev``;
        - ``success``: whether every chunk succeeded (status 0 or 1); ``message`` names
          the chunks that did not, the first first, with the depth (and, for
          ``solver="adjoint"``, the input) where each failed. A chunk that failed keeps
          what its solver returned (NaN from the failing depth on for the sweep, NaN in
          the failed rows for the adjoint; all NaN, ``converged`` False and
          ``depth_order`` 0 after an exception): nothing is dropped.
        - ``status``: the most severe of the chunks' statuses, in the order -3, -1, -2,
          -4, -5, 1, 0 (so a batch of status-1 chunks has status 1);
        - ``nfev``: the sum over chunks.

    Raises
    ------
    ImportError
        If dask is not installed (``pip install invimbed[dask]``).
    ValueError
        For an invalid ``x`` (shape, non-finite values), ``depths``, ``chunk_size`` or
        ``solver``, or a ``client`` already closed, before any chunk is submitted; if every chunk raised an exception,
        the first chunk's exception is raised again (an invalid argument, most likely).
    TypeError
        For a ``problem`` that is not a `BolzaProblem`, a complex or non-numeric ``x``,
        a non-bool ``as_dask``, a ``client`` that is not a Dask client (an address
        string: wrap it in ``distributed.Client``), or a keyword argument that the chosen solver does not
        take (with the closest name it takes), before any chunk is submitted.

    Examples
    --------
    >>> from distributed import Client, LocalCluster          # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))            # doctest: +SKIP
    >>> res = invimbed.dask.solve_batch(problem, x, depths, client=client,
    ...                                 method="rk4", step=0.01, chunk_size=4096)  # doctest: +SKIP
    >>> res.success, [c["start"] for c in res.chunk_status]   # doctest: +SKIP

    The exact fields of one input at many depths, cut along the depths:

    >>> res = invimbed.dask.solve_batch(problem, x[:1], np.linspace(0, -5, 4000),
    ...                                 client=client, solver="adjoint",
    ...                                 chunk_size=500)       # doctest: +SKIP
    >>> [(c["depth_start"], c["depth_stop"]) for c in res.chunk_status][:2]  # doctest: +SKIP
    [(0, 500), (500, 1000)]
    """
    check_choice(solver, "solver", SOLVERS)
    _check_keywords(solver, solve_kwargs)
    if not isinstance(problem, BolzaProblem):
        raise TypeError(f"`problem` must be an invimbed.BolzaProblem, but got "
                        f"{describe(problem)}")
    as_dask = as_bool(as_dask, "as_dask")
    dask, da = _import_dask()
    client = _default_client(client)
    is_dask = isinstance(x, da.Array)
    if not is_dask:     # checked whole: a chunk's error would be one status among many
        x = as_float_array(x, "x")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"`x` must have shape (B, N) with B >= 1 (solve_batch splits the "
                         f"batch axis), but got shape {tuple(x.shape)}")
    if not is_dask:
        require_finite(x, "x")
    B = int(x.shape[0])
    # a chunk of depths would check only its own: check them all here
    depths_arr = as_depths(depths, problem.q)
    n = max(1, int(np.size(depths_arr)))
    rows = B if solver == "imbedding" else n * B
    if chunk_size is None:
        threads = 1
        if client is not None:
            try:
                threads = max(1, sum(client.nthreads().values()))
            except Exception:  # pragma: no cover - exotic clients
                threads = 1
        chunk_size = max(1, math.ceil(rows / (4 * threads)))
    if (not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool)
            or chunk_size < 1):
        raise ValueError(f"`chunk_size` must be a positive integer, but got "
                         f"{describe(chunk_size)}")
    tiles = _tiles(solver, n, B, int(chunk_size))
    groups = list(dict.fromkeys((a, b) for a, b, _, _ in tiles))   # input ranges, in order
    if is_dask:
        blocks = x.rechunk({0: groups[0][1] - groups[0][0], 1: -1}).to_delayed().ravel().tolist()
    else:
        blocks = [x[a:b] for a, b in groups]
    solve = dask.delayed(_solve_chunk, pure=False)
    if client is not None and not is_dask:
        # hash=False: fresh keys, so that a release of the same data scattered by an
        # earlier call cannot race with this one ("lost dependencies")
        blocks = client.scatter(blocks, hash=False)
        problem_ref = client.scatter(problem, broadcast=True, hash=False)
    else:
        problem_ref = problem
    block_of = dict(zip(groups, blocks))
    if solver == "imbedding":
        tasks = [solve(solver, problem_ref, block_of[(a, b)], depths_arr, solve_kwargs)
                 for a, b, _, _ in tiles]
    else:
        tasks = [solve(solver, problem_ref, block_of[(a, b)], depths_arr[c:d], solve_kwargs)
                 for a, b, c, d in tiles]

    if as_dask:
        if client is not None:
            outs = client.compute(tasks)
            status = client.gather([client.submit(_status, o) for o in outs])
        else:
            outs = list(dask.persist(*tasks))
            status = list(dask.compute(*[dask.delayed(_status)(o) for o in outs]))
    else:
        outs = client.gather(client.compute(tasks)) if client is not None else \
            list(dask.compute(*tasks))
        status = [_status(o) for o in outs]

    def label(tile: tuple[int, int, int, int]) -> str:
        a, b, c, d = tile
        return f"rows {a}:{b}" + ("" if solver == "imbedding" else f", depths {c}:{d}")

    ok = next((s for s in status if s["shapes"] is not None), None)
    if ok is None:  # every chunk raised: an invalid argument, most likely
        first = status[0]["error"]
        try:
            first.add_note(f"(raised by invimbed.dask.solve_batch for {label(tiles[0])}; "
                           f"every one of the {len(tiles)} chunks raised)")
        except AttributeError:  # pragma: no cover - Python < 3.11
            pass
        raise first
    shapes, dtypes = ok["shapes"], ok["dtypes"]

    def tile_shape(key: str, tile: tuple[int, int, int, int]) -> tuple[int, ...]:
        a, b, c, d = tile
        s = list(shapes[key])
        s[0], s[1] = d - c, b - a
        return tuple(s)

    # the chunks on a grid: depth ranges (axis 0) by input ranges (axis 1)
    depth_ranges = sorted({(c, d) for _, _, c, d in tiles})
    at = {(c, d, a, b): i for i, (a, b, c, d) in enumerate(tiles)}
    arrays: dict[str, Any] = {}
    for key in shapes:
        def part(i: int, key: str = key) -> Any:
            shape = tile_shape(key, tiles[i])
            if as_dask:
                return da.from_delayed(dask.delayed(_field)(outs[i], key, shape, dtypes[key]),
                                       shape=shape, dtype=dtypes[key])
            return _field(outs[i], key, shape, dtypes[key])

        cat = da.concatenate if as_dask else np.concatenate
        bands = [cat([part(at[(c, d, a, b)]) for a, b in groups], axis=1)
                 for c, d in depth_ranges]
        arrays[key] = bands[0] if len(bands) == 1 else cat(bands, axis=0)

    chunk_status = []
    for (a, b, c, d), s in zip(tiles, status):
        message = s["message"]
        if solver == "adjoint" and not s["success"] and s["status"] != Status.RAISED:
            message = _global_inputs(message, a)
        chunk_status.append({"start": a, "stop": b, "depth_start": c, "depth_stop": d,
                             "success": s["success"], "status": s["status"],
                             "message": message, "nfev": s["nfev"]})
    failed = [(t, cs) for t, cs in zip(tiles, chunk_status) if not cs["success"]]
    if failed:
        listed = "; ".join(f"{label(t)}: {cs['message']}" for t, cs in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        codes = {cs["status"] for _, cs in failed}
        word = ("did not converge" if codes == {Status.NOT_CONVERGED} else
                "are as precise as their functions, not as rtol"
                if codes == {Status.IMPRECISE} else "failed")
        message = (f"{len(failed)} of {len(tiles)} chunks {word} ({listed}{more}). The other "
                   f"chunks' rows are valid; see `chunk_status`.")
    else:
        message = f"All {len(tiles)} chunks succeeded. {status[0]['message']}"
    code = min((s["status"] for s in status), key=_SEVERITY.index)
    done = [s for s in status if s["shapes"] is not None]
    common = dict(
        depths=np.asarray(depths_arr, dtype=float).copy(),
        **{k: arrays[k] for k in _FIELDS},
        success=code.success,
        status=code,
        message=message,
        nfev=int(sum(c["nfev"] for c in chunk_status)),
        closure=ok.get("closure"),
        method=ok.get("method"),
        derivatives=ok.get("derivatives"),
        warnings=list(dict.fromkeys(w for s in done for w in s["warnings"])),
    )
    if solver == "adjoint":
        return sweep_result(dict(common, nsteps=arrays["nsteps"], error_estimate=None,
                                 strategy=ok.get("strategy"), chunk_status=chunk_status))
    error = ({k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("error_estimate.")}
             or None)
    orders = [s["order"] for s in done if s["order"] is not None]
    runs = [s["orders_run"] for s in done if s["orders_run"] is not None]
    return sweep_result(dict(common, error_estimate=error,
                             **{k: arrays.get(k) for k in _PAIR_ARRAYS},
                             order=max(orders) if orders else None,
                             orders_run=sorted(set().union(*runs)) if runs else None,
                             chunk_status=chunk_status))


__all__ = ["solve_batch"]
