"""The validation layer: every public entry point checks its arguments here.

Every check raises `ValueError` (right type, wrong value) or `TypeError` (wrong type,
unknown keyword) with a message of the form "`name` must be ..., but got ...": it
names the argument, says what was expected and shows what was received.
"""

from __future__ import annotations

import difflib
import numbers
from typing import Any, Iterable, Mapping

import numpy as np

#: The options of scipy's `solve_ivp` that the solvers pass on (the others are set by
#: the solver itself: the right-hand side, its Jacobian, dense output, events).
SOLVE_IVP_OPTIONS = ("first_step", "max_step", "min_step")
#: The step budget every adaptive solver takes besides them (attempted steps per solve).
STEP_BUDGET = "max_steps"


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
    """Convert ``value`` to a float64 array or raise a TypeError naming ``name``.

    Complex values, strings and other non-numbers are refused (numpy would cast a complex
    array to real with only a warning, dropping the imaginary part)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"`{name}` must be array_like of real numbers, but got {describe(value)}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"`{name}` must be array_like of real numbers, but got {describe(value)}"
        ) from exc
    if np.iscomplexobj(raw):
        raise TypeError(f"`{name}` must be real, but got complex values ({describe(raw)}); "
                        f"pass the real and imaginary parts as separate states")
    if raw.dtype.kind not in "biufO":
        raise TypeError(f"`{name}` must be array_like of real numbers, but got {describe(value)}")
    if raw.dtype.kind == "O":
        try:
            return raw.astype(float)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"`{name}` must be array_like of real numbers, but got {describe(value)}"
            ) from exc
    return raw.astype(float, copy=False)


def returned_reals(raw: Any, who: str, shape_hint: str = "") -> np.ndarray:
    """What a user's function returned, as a float array; a TypeError naming ``who``
    (e.g. "`dynamics`") when it is complex, a bool (a comparison, such as ``z[0] ==
    1.0``, where a residual ``z[0] - 1.0`` was meant: read as 0 and 1 it would be
    silently wrong) or not numbers at all."""
    if np.iscomplexobj(raw):
        raise TypeError(f"{who} must return real numbers, but returned complex values "
                        f"({describe(raw)})")
    if isinstance(raw, (bool, np.bool_)) or getattr(raw, "dtype", None) == bool or (
            isinstance(raw, (list, tuple)) and raw
            and all(isinstance(r, (bool, np.bool_)) for r in raw)):
        raise TypeError(f"{who} must return real numbers, but returned a bool "
                        f"({describe(raw)}): a comparison such as `z[0] == 1.0`? Return "
                        f"the residual, such as `z[0] - 1.0`")
    try:
        return np.asarray(raw, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{who} must return real numbers{shape_hint}, but returned "
                        f"{describe(raw)}") from exc


def as_real(value: Any, name: str, *, positive: bool = False, nonnegative: bool = False,
            allow_none: bool = False, allow_inf: bool = False) -> float | None:
    """A real number (not a bool, string or complex), optionally > 0 or >= 0, finite
    unless ``allow_inf``; ``None`` passes through when ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        if not (isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf"):
            raise TypeError(f"`{name}` must be a real number, but got {describe(value)}")
    v = float(value)
    if np.isnan(v) or (np.isinf(v) and not allow_inf):
        raise ValueError(f"`{name}` must be a finite number, but got {value!r}")
    if positive and v <= 0:
        raise ValueError(f"`{name}` must be a positive finite number, but got {value!r}")
    if nonnegative and v < 0:
        raise ValueError(f"`{name}` must be a non-negative number, but got {value!r}")
    return v


def as_bool(value: Any, name: str) -> bool:
    """``True`` or ``False`` (numpy's bools too); anything else -- "no", 0, None -- is a
    TypeError, since its truth value is rarely what was meant."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"`{name}` must be True or False, but got {describe(value)}")


def as_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """An integer (not a bool or float), at least ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer, but got {describe(value)}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, but got {v}")
    return v


def as_positive_int(value: Any, name: str) -> int:
    """A positive integer (a step budget, a count): TypeError for a bool, float or string,
    ValueError below 1, both saying "`name` must be a positive integer"."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be a positive integer, but got {describe(value)}")
    if value < 1:
        raise ValueError(f"`{name}` must be a positive integer, but got {describe(value)}")
    return int(value)


#: The units `as_memory_budget` reads: decimal (kB, MB, GB, TB) and binary (KiB ... TiB).
BYTE_UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def as_memory_budget(value: Any, name: str = "memory_budget") -> int | None:
    """A memory budget in bytes: a positive integer (bytes) or a string of a number and a
    unit of `BYTE_UNITS` ("512MB", "1.5 GiB"); ``None`` passes through (the default)."""
    if value is None:
        return None
    expected = (f"`{name}` must be a positive number of bytes (an int) or a string with "
                f"a unit, such as '512MB' or '2GiB'")
    if isinstance(value, str):
        text = value.strip()
        number = text.rstrip("".join(sorted({c for u in BYTE_UNITS for c in u})) + " ")
        unit = text[len(number):].strip()
        try:
            amount = float(number)
        except ValueError:
            amount = float("nan")
        if unit not in BYTE_UNITS or not np.isfinite(amount):
            raise ValueError(f"{expected} (units: {', '.join(BYTE_UNITS)}), but got "
                             f"{value!r}")
        nbytes = int(amount * BYTE_UNITS[unit])
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{expected}, but got {describe(value)}")
    else:
        nbytes = int(value)
    if nbytes < 1:
        raise ValueError(f"{expected}, at least 1 byte, but got {value!r}")
    return nbytes


def check_options(options: Mapping[str, Any], allowed: Iterable[str], where: str, *,
                  suggest: Iterable[str] = ()) -> None:
    """Refuse keyword arguments not in ``allowed``: a TypeError naming each, with the
    closest allowed name, instead of letting a misspelt option vanish.

    ``suggest`` adds names to look for the closest among (the entry point's named
    arguments: ``rtoll=`` is most likely ``rtol``)."""
    allowed = list(allowed)
    unknown = [k for k in options if k not in allowed]
    if not unknown:
        return
    candidates = allowed + [n for n in suggest if n not in allowed]
    parts = []
    for k in unknown:
        close = difflib.get_close_matches(k, candidates, n=1)
        parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    valid = ", ".join(repr(a) for a in allowed) or "none"
    raise TypeError(f"{where}() got unexpected keyword argument(s) {', '.join(parts)}; "
                    f"the options it accepts are: {valid}")


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


def as_state(x: Any, n_state: int | None, name: str = "x", *,
             batch: bool = True) -> tuple[np.ndarray, bool]:
    """Validate an input state of shape (N,) or (B, N) (with ``batch=False``: one state,
    (N,), only); return (B, N) array and whether batched."""
    arr = as_float_array(x, name)
    if not batch and arr.ndim != 1:
        raise ValueError(f"`{name}` must be one initial state, shape (N,), but got an array "
                         f"of shape {arr.shape}")
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
    """A positive finite real number (`as_real` with ``positive=True``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not (
            isinstance(value, numbers.Real)
            or (isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf")):
        raise TypeError(f"`{name}` must be a positive number, but got {describe(value)}")
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"`{name}` must be a positive finite number, but got {value!r}")
    return v


def as_ivp_options(options: Mapping[str, Any], where: str,
                   allowed: Iterable[str] = SOLVE_IVP_OPTIONS + (STEP_BUDGET,), *,
                   suggest: Iterable[str] = ()) -> dict:
    """Check the keyword options an adaptive solver passes to its integrator.

    Unknown names raise a TypeError naming them (`check_options`); ``first_step`` must
    be a positive number, ``max_step`` a positive number or ``inf``, ``min_step`` a
    non-negative number and ``max_steps`` a positive integer.

    Parameters
    ----------
    options : mapping
        The ``**options`` of the entry point.
    where : str
        The entry point's name, for the message (``"solve_imbedding"``).
    allowed : iterable of str
        The option names it takes.
    suggest : iterable of str
        Its named arguments, for the closest-name hint of an unknown keyword.

    Returns
    -------
    dict
        The options as floats (``max_steps`` as an int).

    Raises
    ------
    TypeError
        For an unknown option or a value of the wrong type.
    ValueError
        For a value out of range.
    """
    check_options(options, allowed, where, suggest=suggest)
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key == STEP_BUDGET:
            out[key] = as_positive_int(value, key)
            continue
        if isinstance(value, (bool, np.bool_)) or not (
                isinstance(value, numbers.Real)
                or (isinstance(value, np.ndarray) and value.ndim == 0
                    and value.dtype.kind in "iuf")):
            raise TypeError(f"`{key}` must be a positive number, but got {describe(value)}")
        v = float(value)
        if key == "min_step":
            ok = np.isfinite(v) and v >= 0
        elif key == "max_step":
            ok = v > 0          # inf: no limit, scipy's default
        else:
            ok = np.isfinite(v) and v > 0
        if not ok:
            what = "a non-negative number" if key == "min_step" else "a positive number"
            raise ValueError(f"`{key}` must be {what}, but got {value!r}")
        out[key] = v
    return out


def as_spacing(delta: Any, shape: tuple[int, int], name: str = "delta") -> np.ndarray | None:
    """A difference spacing: None, or positive finite numbers that broadcast to
    ``shape`` = (B, N) (a float, one per state component (N,), or one per input and
    component (B, N))."""
    if delta is None:
        return None
    arr = as_float_array(delta, name)
    B, N = shape
    try:
        out = np.broadcast_to(arr, (B, N))
    except ValueError:
        raise ValueError(f"`{name}` must be a float or an array of shape (N,) or (B, N) with "
                         f"N = {N}, B = {B}, but got shape {arr.shape}") from None
    if not np.all(np.isfinite(out)) or np.any(out <= 0):
        raise ValueError(f"`{name}` must be positive and finite, but got "
                         f"{np.array2string(arr, threshold=8)}")
    return out.copy()
