"""Where generated data sets are cached, and how (npz, ``allow_pickle=False``)."""

from __future__ import annotations

import os
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ._sequences import DataError, nonfinite_summary

__all__ = ["cache_dir", "cached_arrays", "load_npz", "save_npz"]

#: What reading a damaged npz can raise: empty (EOFError), truncated or not a zip
#: (BadZipFile, a "pickled data" ValueError under allow_pickle=False), a damaged member
#: (BadZipFile "Bad CRC-32", zlib.error, a ValueError from the array header), I/O.
_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder for cached data sets.

    Parameters
    ----------
    path : path, optional
        The folder; default ``$INVIMBED_DATA`` if set, else ``~/.cache/invimbed/data``.
        It is created if missing.

    Returns
    -------
    Path

    Raises
    ------
    DataError
        If ``path`` exists and is not a folder, or cannot be created.
    """
    if path is None:
        path = os.environ.get("INVIMBED_DATA") or Path.home() / ".cache" / "invimbed" / "data"
    path = Path(path).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise DataError(f"the data cache `cache_dir` must be a folder, but got {str(path)!r}, "
                        f"which is a file ({exc}).") from exc
    except OSError as exc:
        raise DataError(f"cannot create the data cache folder {str(path)!r} ({exc}); pass "
                        f"another `cache_dir` or set $INVIMBED_DATA.") from exc
    return path


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` to ``path`` atomically (a temporary file, then a rename), so that
    two processes generating the same data never leave a half-written cache.

    Parameters
    ----------
    path : Path
    **arrays : ndarray
        Plain (non-object) arrays, by name.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _read_npz(path: Path, keys: Iterable[str] | None
              ) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """``(arrays, None)``, or ``(None, what is wrong with the file)``."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except PermissionError:
        raise
    except _READ_ERRORS as exc:
        return None, (f"the cached data set {path} cannot be read "
                      f"({type(exc).__name__}: {exc})")
    missing = sorted(set(keys or ()) - set(arrays))
    if missing:
        return None, (f"the cached data set {path} lacks the array(s) {missing} (it has "
                      f"{sorted(arrays)})")
    return arrays, None


def load_npz(path: Path, keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read every array of an npz file written by :func:`save_npz` (no pickles).

    Parameters
    ----------
    path : Path
    keys : iterable of str, optional
        Arrays the file must hold.

    Returns
    -------
    dict of str to ndarray

    Raises
    ------
    DataError
        If the file is empty, truncated, damaged, not an npz file, holds pickled objects
        or lacks one of ``keys``; the message names the file and how to rebuild it.
    PermissionError
        If the file cannot be read (not a question of its contents).
    """
    arrays, problem = _read_npz(Path(path), keys)
    if problem is not None:
        raise DataError(f"{problem}; delete it and it is rebuilt on the next run.")
    return arrays


def cached_arrays(path: Path | None, make: Callable[[], dict[str, np.ndarray]],
                  keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays cached at ``path`` if it exists and is sound, else ``make()``, written
    there first (:func:`save_npz`).

    Parameters
    ----------
    path : Path or None
        The cache file; ``None`` means no cache.
    make : callable
        Returns the arrays, by name.
    keys : iterable of str, optional
        Arrays the cache must hold.

    Returns
    -------
    dict of str to ndarray

    Warns
    -----
    RuntimeWarning
        When the cache file is unreadable (empty, truncated, damaged, see
        :func:`load_npz`), lacks one of ``keys`` or holds non-finite values: it is named,
        made again and overwritten.
    """
    if path is not None and Path(path).exists():
        arrays, problem = _read_npz(Path(path), keys)
        if problem is None:
            bad = [(k, nonfinite_summary(a)) for k, a in arrays.items()]
            bad = [(k, v) for k, v in bad if v is not None]
            if not bad:
                return arrays
            problem = (f"the cached data set {path} holds non-finite values "
                       f"(`{bad[0][0]}`: {bad[0][1]})")
        warnings.warn(f"{problem}; rebuilding it.", RuntimeWarning, stacklevel=2)
    arrays = make()
    if path is not None:
        save_npz(path, **arrays)
    return arrays
