"""Input validation shared by the problem, the controls and the solvers.

Every check raises `ValueError` or `TypeError` with a message that
names the argument, says what was expected and shows what was received.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np


def describe(value: Any) -> str:
    """Short description of ``value`` for error messages."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of length {len(value)}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} (type {type(value).__name__})"


def as_float_array(value: Any, name: str) -> np.ndarray:
    """Convert ``value`` to a float64 array or raise a TypeError naming ``name``."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"`{name}` must be array_like of real numbers, but got {describe(value)}"
        ) from exc
    return arr


def require_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))
        raise ValueError(
            f"`{name}` must be finite, but it has {len(bad)} non-finite entries "
            f"(first at index {tuple(int(i) for i in bad[0])}: {arr[tuple(bad[0])]})"
        )


def check_callable(fn: Any, name: str, allow_none: bool = False) -> None:
    if fn is None and allow_none:
        return
    if not callable(fn):
        raise TypeError(f"`{name}` must be callable, but got {describe(fn)}")


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"`{name}` must be one of {', '.join(repr(c) for c in choices)}, "
            f"but got {value!r}"
        )
    return value


def as_state(x: Any, n_state: int | None, name: str = "x") -> tuple[np.ndarray, bool]:
    """Validate an input state of shape (N,) or (B, N); return (B, N) array and whether batched."""
    arr = as_float_array(x, name)
    if arr.ndim not in (1, 2):
        raise ValueError(
            f"`{name}` must have shape (N,) or (B, N), but got an array of shape {arr.shape}"
        )
    if n_state is not None and arr.shape[-1] != n_state:
        raise ValueError(
            f"`{name}` must have last dimension N = {n_state} (the state size of the "
            f"problem), but got shape {arr.shape}"
        )
    if arr.shape[-1] == 0 or (arr.ndim == 2 and arr.shape[0] == 0):
        raise ValueError(f"`{name}` must not be empty, but got shape {arr.shape}")
    require_finite(arr, name)
    batched = arr.ndim == 2
    return np.atleast_2d(arr).copy(), batched


def as_depths(depths: Any, q: float, name: str = "depths") -> np.ndarray:
    """Validate requested depths: 1-D, finite, strictly monotone, every depth <= q."""
    arr = as_float_array(depths, name)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"`{name}` must be a non-empty 1-D array of depths, but got shape {arr.shape}"
        )
    require_finite(arr, name)
    if arr.size > 1:
        d = np.diff(arr)
        if not (np.all(d > 0) or np.all(d < 0)):
            raise ValueError(
                f"`{name}` must be strictly monotone (all increasing or all decreasing), "
                f"but got {np.array2string(arr, threshold=8)}"
            )
    if np.any(arr > q):
        raise ValueError(
            f"every depth in `{name}` must be <= q = {q} (the output end of the "
            f"interval [p, q]), but got max(depths) = {arr.max()}"
        )
    return arr


def check_positive(value: Any, name: str, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`{name}` must be a positive number, but got {describe(value)}") from exc
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"`{name}` must be a positive finite number, but got {value!r}")
    return v
