"""Where generated data sets are cached, and how (npz, ``allow_pickle=False``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["cache_dir", "cached_arrays", "load_npz", "save_npz"]


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder for cached data sets.

    ``path`` if given, else ``$INVIMBED_DATA`` if set, else ``~/.cache/invimbed/data``.
    The folder is created if missing.
    """
    if path is None:
        path = os.environ.get("INVIMBED_DATA") or Path.home() / ".cache" / "invimbed" / "data"
    path = Path(path).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` to ``path`` atomically (a temporary file, then a rename), so that
    two processes generating the same data never leave a half-written cache."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Read every array of an npz file written by :func:`save_npz` (no pickles)."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def cached_arrays(path: Path | None, make: Callable[[], dict[str, np.ndarray]]
                  ) -> dict[str, np.ndarray]:
    """The arrays cached at ``path`` if it exists, else ``make()``, written there first
    (:func:`save_npz`); ``path=None`` means no cache."""
    if path is not None and Path(path).exists():
        return load_npz(path)
    arrays = make()
    if path is not None:
        save_npz(path, **arrays)
    return arrays
