"""Batches of inputs on a Dask cluster (optional extra ``invimbed[dask]``).

The imbedding sweep is sequential in depth but independent across inputs ``x``: a batch
too large for one machine (or one process) is cut along the batch axis into chunks, each
solved by `invimbed.solve_imbedding` on a Dask worker, and put back together in input
order. dask is imported when `solve_batch` is called, not when this module is.
"""

from __future__ import annotations

import math
import traceback
from typing import Any

import numpy as np

from ._imbedding import solve_imbedding
from ._problem import BolzaProblem
from ._results import ImbeddingResult
from ._validation import describe

#: The per-depth arrays of a result, with their batch axis (axis 1).
_FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def _import_dask() -> tuple[Any, Any]:
    try:
        import dask
        import dask.array as da
    except ImportError as exc:
        raise ImportError(
            "invimbed.dask needs dask (and dask.distributed for a cluster): "
            "pip install invimbed[dask]  (or pip install 'dask[distributed]')") from exc
    return dask, da


def _default_client(client: Any) -> Any:
    if client is not None:
        return client
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:  # no client in this process: dask's local scheduler
        return None


def _solve_chunk(problem: BolzaProblem, x: Any, depths: Any, kwargs: dict) -> dict:
    """Solve one chunk on a worker; an exception is returned, not raised, so that one
    chunk cannot take the batch down."""
    try:
        res = solve_imbedding(problem, np.asarray(x, dtype=float), depths, **kwargs)
    except Exception as exc:  # reported per chunk by solve_batch
        return {"result": None, "error": exc,
                "traceback": "".join(traceback.format_exception(exc))}
    return {"result": res, "error": None, "traceback": None}


def _status(out: dict) -> dict:
    res = out["result"]
    if res is None:
        return {"success": False, "status": -2, "nfev": 0,
                "message": f"{type(out['error']).__name__}: {out['error']}",
                "error": out["error"], "shapes": None}
    shapes = {k: tuple(res[k].shape) for k in _FIELDS}
    if res.get("error_estimate") is not None:
        shapes.update({f"error_estimate.{k}": tuple(v.shape)
                       for k, v in res.error_estimate.items()})
    return {"success": bool(res.success), "status": int(res.status), "nfev": int(res.nfev),
            "message": res.message, "error": None, "shapes": shapes,
            "closure": res.get("closure"), "method": res.get("method")}


def _field(out: dict, key: str, shape: tuple[int, ...]) -> np.ndarray:
    res = out["result"]
    if res is None:
        return np.full(shape, np.nan)
    if key.startswith("error_estimate."):
        return res.error_estimate[key.split(".", 1)[1]]
    return res[key]


def solve_batch(problem: BolzaProblem, x: Any, depths: Any, *, client: Any = None,
                chunk_size: int | None = None, as_dask: bool = False,
                **solve_kwargs: Any) -> ImbeddingResult:
    """Solve a batch of inputs chunk by chunk on Dask workers.

    The batch is cut along axis 0 into chunks of ``chunk_size`` rows; each chunk is one
    task, ``invimbed.solve_imbedding(problem, x[a:b], depths, **solve_kwargs)``, run where
    the scheduler puts it, and the results are put back in input order. The numbers are
    those of one `solve_imbedding` call on the whole batch (the rows of a batch are
    independent), except where a chunk fails: see ``chunk_status``.

    Parameters
    ----------
    problem : BolzaProblem
        Sent to every worker (with cloudpickle: lambdas and closures travel; numba
        functions are recompiled there unless cached).
    x : array_like or dask.array.Array, shape (B, N)
        The inputs. A dask array is used block by block without being gathered.
    depths : array_like, shape (n,)
        As in `solve_imbedding`.
    client : distributed.Client, optional
        Where to run; by default the current client (``distributed.get_client()``) if
        there is one, else dask's local threaded scheduler.
    chunk_size : int, optional
        Rows per chunk; by default the batch is split into about four chunks per worker
        thread (at least 1 row each). Each chunk carries per-task overhead (tens of
        milliseconds on a local cluster): keep chunks at thousands of rows.
    as_dask : bool, default False
        Return ``z``, ``value``, ``adjoint``, ``param_grad``, ``depth_grad`` (and the
        ``error_estimate`` arrays) as dask arrays, chunked like the input, whose blocks
        stay on the workers until computed (for outputs larger than the client's memory).
        The chunk statuses are gathered in any case.
    **solve_kwargs
        Passed to `solve_imbedding` (``control``, ``closure``, ``method``, ``step``,
        ``backend``, ...).

    Returns
    -------
    ImbeddingResult
        The fields with the batch axis after the depth axis, as from a batched
        `solve_imbedding`, and

        - ``chunk_status``: a list with, for each chunk, ``start``, ``stop`` (its rows
          ``x[start:stop]``), ``success``, ``status`` (0 success, -1 the sweep failed,
          e.g. a non-finite value, -2 an exception in the task), ``message`` and
          ``nfev``;
        - ``success``: whether every chunk succeeded; ``message`` names the rows of the
          chunks that did not. A chunk that failed keeps what its sweep returned (NaN
          from the failing depth on; all NaN after an exception): nothing is dropped.
        - ``nfev``: the sum over chunks.

    Raises
    ------
    ImportError
        If dask is not installed (``pip install invimbed[dask]``).
    ValueError, TypeError
        For an invalid ``x`` or ``chunk_size``; if every chunk raised an exception, the
        first chunk's exception is raised again (an invalid argument, most likely).

    Examples
    --------
    >>> from distributed import Client, LocalCluster          # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))            # doctest: +SKIP
    >>> res = invimbed.dask.solve_batch(problem, x, depths, client=client,
    ...                                 method="rk4", step=0.01, chunk_size=4096)  # doctest: +SKIP
    >>> res.success, [c["start"] for c in res.chunk_status]   # doctest: +SKIP
    """
    dask, da = _import_dask()
    client = _default_client(client)
    is_dask = isinstance(x, da.Array)
    if not is_dask:
        try:
            x = np.asarray(x, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"`x` must be array_like of real numbers, but got "
                            f"{describe(x)}") from exc
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"`x` must have shape (B, N) with B >= 1 (solve_batch splits the "
                         f"batch axis), but got shape {tuple(x.shape)}")
    B = int(x.shape[0])
    if chunk_size is None:
        threads = 1
        if client is not None:
            try:
                threads = max(1, sum(client.nthreads().values()))
            except Exception:  # pragma: no cover - exotic clients
                threads = 1
        chunk_size = max(1, math.ceil(B / (4 * threads)))
    if (not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool)
            or chunk_size < 1):
        raise ValueError(f"`chunk_size` must be a positive integer, but got "
                         f"{describe(chunk_size)}")
    chunk_size = int(chunk_size)
    bounds = [(a, min(a + chunk_size, B)) for a in range(0, B, chunk_size)]
    if is_dask:
        blocks = x.rechunk({0: chunk_size, 1: -1}).to_delayed().ravel().tolist()
    else:
        blocks = [x[a:b] for a, b in bounds]
    depths_arr = np.asarray(depths, dtype=float) if not isinstance(depths, np.ndarray) else depths
    solve = dask.delayed(_solve_chunk, pure=False)
    if client is not None and not is_dask:
        # hash=False: fresh keys, so that a release of the same data scattered by an
        # earlier call cannot race with this one ("lost dependencies")
        blocks = client.scatter(blocks, hash=False)
        problem_ref = client.scatter(problem, broadcast=True, hash=False)
    else:
        problem_ref = problem
    tasks = [solve(problem_ref, blk, depths_arr, solve_kwargs) for blk in blocks]

    if as_dask:
        if client is not None:
            outs = client.compute(tasks)
            status = client.gather([client.submit(_status, o) for o in outs])
        else:
            outs = list(dask.persist(*tasks))
            status = list(dask.compute(*[dask.delayed(_status)(o) for o in outs]))
    else:
        results = client.gather(client.compute(tasks)) if client is not None else \
            list(dask.compute(*tasks))
        status = [_status(o) for o in results]

    shapes = next((s["shapes"] for s in status if s["shapes"] is not None), None)
    if shapes is None:  # every chunk raised: an invalid argument, most likely
        first = status[0]["error"]
        try:
            first.add_note(f"(raised by invimbed.dask.solve_batch for rows "
                           f"{bounds[0][0]}:{bounds[0][1]}; every one of the {len(bounds)} "
                           f"chunks raised)")
        except AttributeError:  # pragma: no cover - Python < 3.11
            pass
        raise first

    def chunk_shape(key: str, a: int, b: int) -> tuple[int, ...]:
        s = list(shapes[key])
        s[1] = b - a
        return tuple(s)

    keys = [k for k in shapes]
    arrays: dict[str, Any] = {}
    for key in keys:
        if as_dask:
            parts = [da.from_delayed(dask.delayed(_field)(o, key, chunk_shape(key, a, b)),
                                     shape=chunk_shape(key, a, b), dtype=float)
                     for o, (a, b) in zip(outs, bounds)]
            arrays[key] = da.concatenate(parts, axis=1)
        else:
            arrays[key] = np.concatenate(
                [_field(o, key, chunk_shape(key, a, b)) for o, (a, b) in zip(results, bounds)],
                axis=1)

    chunk_status = [{"start": a, "stop": b, "success": s["success"], "status": s["status"],
                     "message": s["message"], "nfev": s["nfev"]}
                    for (a, b), s in zip(bounds, status)]
    failed = [c for c in chunk_status if not c["success"]]
    if failed:
        listed = "; ".join(f"rows {c['start']}:{c['stop']}: {c['message']}" for c in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        message = (f"{len(failed)} of {len(bounds)} chunks failed ({listed}{more}). The other "
                   f"chunks' rows are valid; see `chunk_status`.")
    else:
        message = f"All {len(bounds)} chunks succeeded. {status[0]['message']}"
    ok = next(s for s in status if s["shapes"] is not None)
    error = ({k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("error_estimate.")}
             or None)
    return ImbeddingResult(
        depths=np.asarray(depths, dtype=float).copy(),
        **{k: arrays[k] for k in _FIELDS},
        success=not failed,
        status=0 if not failed else -1,
        message=message,
        nfev=int(sum(c["nfev"] for c in chunk_status)),
        closure=ok.get("closure"),
        method=ok.get("method"),
        error_estimate=None if error is None else ImbeddingResult(error),
        chunk_status=chunk_status,
    )


__all__ = ["solve_batch"]
