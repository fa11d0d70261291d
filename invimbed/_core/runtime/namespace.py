"""The array namespace of the functions invimbed calls: numpy, or cupy on a GPU.

``backend="cupy"`` calls a problem's (vectorised) functions with cupy arrays, the other
backends with numpy arrays. A function written against the namespace of its argument,

    def f(t, z, theta):
        xp = invimbed.array_namespace(z)
        return xp.stack([z[:, 1], -xp.sin(z[:, 0]) + theta[:, 0]], axis=1)

runs on both. cupy is never imported here: an array is recognised by its type's module.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def is_cupy_array(x: Any) -> bool:
    """Whether ``x`` is a cupy array (without importing cupy)."""
    return type(x).__module__.split(".")[0] == "cupy"


def array_namespace(*arrays: Any) -> Any:
    """The module to compute with for ``arrays``: ``cupy`` if any of them is a cupy array,
    else ``numpy``.

    Parameters
    ----------
    *arrays : array_like
        Arguments a problem's function received (``z``, ``theta``); Python scalars and
        ``None`` are ignored.

    Returns
    -------
    module
        ``cupy`` or ``numpy``, used as ``xp.sin``, ``xp.stack``, ``xp.einsum``, ...

    Examples
    --------
    >>> import numpy as np, invimbed
    >>> invimbed.array_namespace(np.zeros(3)) is np
    True
    """
    for a in arrays:
        if type(a) is np.ndarray and a.dtype.kind != "O":
            continue           # the common case first: a numpy array of numbers
        if is_cupy_array(a):
            return sys.modules["cupy"]
        if isinstance(a, np.ndarray) and a.dtype == object and a.size:
            # traced values (invimbed._core.derivatives.tracing): its numpy for traces
            traced = getattr(a.flat[0], "__invimbed_namespace__", None)
            if traced is not None:
                return traced
    return np


_ON_DEVICE: dict[tuple[int, int], tuple[np.ndarray, Any]] = {}


def on_device(table: np.ndarray, xp: Any) -> Any:
    """A numpy ``table`` (an index or coefficient table of the jet algebra) as an array of
    ``xp``: the table itself for numpy, a device copy made once for cupy. Meant for
    tables that live as long as the process (cached by identity; the cache keeps the
    table alive so that its identity is never reused)."""
    if xp is np:
        return table
    key = (id(xp), id(table))
    hit = _ON_DEVICE.get(key)
    if hit is None or hit[0] is not table:
        hit = _ON_DEVICE[key] = (table, xp.asarray(table))
    return hit[1]


def to_numpy(x: Any) -> np.ndarray:
    """A numpy array with the values of ``x`` (copied from the GPU for a cupy array)."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


#: The array fields of a sweep's result.
RESULT_FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def fields_on(res: Any, xp: Any) -> Any:
    """The draft ``res`` (`invimbed._core.results.results.Draft`) with its array fields
    and their error estimates moved to arrays of ``xp`` (cupy arrays for cupy inputs to
    ``backend="cupy"``). Meant for the last step of a solve: everything before it works
    on numpy arrays."""
    est = res.get("error_estimate")
    if est is not None:
        est = {k: xp.asarray(v) for k, v in est.items()}
    return res.but(error_estimate=est, **{k: xp.asarray(res[k]) for k in RESULT_FIELDS})


__all__ = ["RESULT_FIELDS", "array_namespace", "fields_on", "is_cupy_array", "on_device",
           "to_numpy"]
