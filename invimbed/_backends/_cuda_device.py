"""The numba CPU kernels' per-row loop and step arithmetic as CUDA device functions: one
source, two targets.

`device` compiles a ``numba.njit`` function of `invimbed._backends._ensemble_parts` (or
`invimbed._backends._ensemble_kernels`, whose ``_integrate`` is the per-row loop) for
the GPU with ``numba.cuda.jit(device=True)``: its own Python source (``py_func``), run
with the functions it calls replaced by their device versions, recursively. What CUDA
lacks is replaced in that copy of the globals only, never in the source:

* ``np`` is a module that is numpy but for ``isfinite``, ``sqrt`` and ``nextafter``,
  which are `math.isfinite`, `math.sqrt` and `math.nextafter` (numba-cuda has no scalar
  numpy ufuncs; on floats they are the same operations);
* numpy's pairwise summation ``_pairwise`` (an explicit stack of ``np.empty`` arrays,
  which device code cannot allocate) is its first block, ``_block``: the same sum, bit
  for bit, for rows of at most `MAX_STATE` entries, which `check_state_size` enforces.

`import_cuda` imports numba-cuda, or raises an `ImportError` naming the extra
``invimbed[cuda]``; `simulated` says whether numba-cuda runs its simulator
(``NUMBA_ENABLE_CUDASIM=1``, set before numba.cuda is first imported), where the kernels
are run as Python, one thread at a time, on the CPU (what the tests use).
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

#: The most entries of a state (``N + 1`` forward, ``N + n_w`` backward) the device
#: kernels run: one block of numpy's pairwise summation (`_ensemble_parts._block`).
MAX_STATE = 128

_DEVICE: dict[int, Any] = {}
_NP: list[types.ModuleType] = []


def import_cuda() -> Any:
    """``numba.cuda``, or an `ImportError` naming the extra to install."""
    try:
        import numba.cuda as cuda
    except ImportError as exc:  # pragma: no cover - exercised only without numba-cuda
        raise ImportError(
            "backend='cuda' needs numba-cuda, which is not installed: pip install "
            "invimbed[cuda] (or pip install \"numba-cuda[cu12]\"), or use backend='numba' "
            "(CPU) or backend='numpy'") from exc
    return cuda


def simulated() -> bool:
    """Whether numba-cuda runs its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", False))


def check_device() -> Any:
    """``numba.cuda`` if it can run a kernel (a GPU and its driver, or the simulator),
    else a `RuntimeError` saying what is missing."""
    cuda = import_cuda()
    if simulated():
        return cuda
    if not cuda.is_available():
        raise RuntimeError(
            "backend='cuda' needs an NVIDIA GPU and its driver, and numba-cuda finds none "
            "(numba.cuda.is_available() is False); use backend='numba' (CPU) or "
            "backend='numpy', or set NUMBA_ENABLE_CUDASIM=1 before numba is imported to run "
            "the kernels in numba-cuda's simulator (slow: for tests)")
    return cuda


def check_state_size(size: int, what: str) -> None:
    """A `ValueError` if a row's state of ``size`` entries exceeds `MAX_STATE`."""
    if size > MAX_STATE:
        raise ValueError(
            f"backend='cuda' runs states of at most {MAX_STATE} entries, but {what} has "
            f"{size}; use backend='numba'")


def _numpy() -> types.ModuleType:
    """numpy as the device code sees it (the module docstring)."""
    if not _NP:
        mod = types.ModuleType("invimbed_cuda_numpy")
        mod.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
        mod.isfinite, mod.sqrt, mod.nextafter = math.isfinite, math.sqrt, math.nextafter
        _NP.append(mod)
    return _NP[0]


def device(fn: Any, **replace: Any) -> Any:
    """The CUDA device function of the numba function ``fn`` (the module docstring);
    one per ``fn`` per process. ``replace`` maps names of ``fn``'s globals to the device
    functions that stand for them in this copy (a generated right-hand side): each call
    with it compiles a new one."""
    if replace:
        return _retarget(fn, replace)
    key = id(fn)
    if key not in _DEVICE:
        _DEVICE[key] = (_retarget(fn), fn)   # fn kept alive: its id stays its own
    return _DEVICE[key][0]


def _retarget(fn: Any, replace: dict[str, Any] | None = None) -> Any:
    from numba.core.registry import CPUDispatcher

    from . import _ensemble_parts as parts

    cuda = import_cuda()
    py = fn.py_func
    glb = dict(py.__globals__)
    for name in py.__code__.co_names:
        obj = glb.get(name)
        if replace and name in replace:
            glb[name] = replace[name]
        elif obj is np:
            glb[name] = _numpy()
        elif obj is parts._pairwise:
            glb[name] = device(parts._block)
        elif isinstance(obj, CPUDispatcher):
            glb[name] = device(obj)
    new = types.FunctionType(py.__code__, glb, py.__name__, py.__defaults__, py.__closure__)
    new.__doc__ = py.__doc__
    return cuda.jit(device=True)(new)
