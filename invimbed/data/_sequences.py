"""The container every data set of :mod:`invimbed.data` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DataError", "SequenceData", "nonfinite_summary"]


class DataError(ValueError):
    """A data set cannot be read, made or used as asked: an unreadable file, a cache that
    cannot be rebuilt, non-finite values, sizes the data does not have. The message says
    which file or data set, and what to do."""


def nonfinite_summary(array: np.ndarray, chunk: int = 256) -> str | None:
    """Describe the non-finite values of ``array``, or return ``None`` if it has none.

    Parameters
    ----------
    array : ndarray
        Any shape; integer and boolean arrays are always finite.
    chunk : int
        Rows (along the first axis) checked at a time, which bounds the temporaries.

    Returns
    -------
    str or None
        For example ``"2 NaN and 1 infinite value(s), the first at index (0, 4, 3, 5)"``.
    """
    array = np.asarray(array)
    if not np.issubdtype(array.dtype, np.inexact):
        return None
    if array.ndim == 0:
        array = array.reshape(1)
    n_nan = n_inf = 0
    first = None
    for s in range(0, len(array), chunk):
        block = array[s:s + chunk]
        bad = ~np.isfinite(block)
        if not bad.any():
            continue
        nan = np.isnan(block)
        n_nan += int(nan.sum())
        n_inf += int(bad.sum()) - int(nan.sum())
        if first is None:
            idx = np.unravel_index(int(np.argmax(bad)), block.shape)
            first = (idx[0] + s,) + tuple(int(i) for i in idx[1:])
    if first is None:
        return None
    return (f"{n_nan} NaN and {n_inf} infinite value(s), the first at index "
            f"{tuple(int(i) for i in first)}")


@dataclass(frozen=True)
class SequenceData:
    """Image sequences split into a training and a test set.

    Attributes
    ----------
    train : ndarray, shape (n_train, T, H, W), float32 in [0, 1]
    test : ndarray, shape (n_test, T, H, W), float32 in [0, 1]
    times : ndarray, shape (T,), float32
        The time of each frame, scaled to ``[0, 1]`` (``k / (T - 1)``): the value the
        experiments append to the latent state.
    name : str
    info : dict
        How the data was made (source, seeds, split), JSON-serialisable.
    """

    train: np.ndarray
    test: np.ndarray
    times: np.ndarray
    name: str
    info: dict = field(default_factory=dict)

    @property
    def n_frames(self) -> int:
        return int(self.train.shape[1])

    @property
    def frame_shape(self) -> tuple[int, int]:
        return (int(self.train.shape[2]), int(self.train.shape[3]))

    def check_finite(self) -> "SequenceData":
        """Raise :class:`DataError` if ``train``, ``test`` or ``times`` hold a NaN or an
        infinity; return ``self`` otherwise.

        A non-finite frame, even one held out of the training loss, would turn the loss
        (masked by multiplying with zero) or the test MSE into NaN.

        Returns
        -------
        SequenceData
            ``self``.

        Raises
        ------
        DataError
            Naming the array, the data set, its source and the first bad index
            ``(sequence, frame, row, column)``.
        """
        source = self.info.get("source")
        where = f" (from {source})" if source else ""
        for label in ("train", "test", "times"):
            bad = nonfinite_summary(getattr(self, label))
            if bad is not None:
                raise DataError(f"`{label}` of the {self.name} data set{where} must be finite, "
                                f"but got {bad}.")
        return self

    def subset(self, n_train: int | None = None, n_test: int | None = None) -> "SequenceData":
        """The first ``n_train`` training and ``n_test`` test sequences (``None``: all)."""
        info = dict(self.info)
        info["subset"] = {"n_train": n_train, "n_test": n_test}
        return SequenceData(self.train[:n_train], self.test[:n_test], self.times,
                            self.name, info)


def unit_times(n_frames: int) -> np.ndarray:
    """``k / (n_frames - 1)`` for ``k = 0 .. n_frames - 1`` (float32)."""
    if n_frames < 2:
        raise ValueError(f"`n_frames` must be at least 2, got {n_frames}.")
    return (np.arange(n_frames) / (n_frames - 1)).astype(np.float32)
