"""The container every data set of :mod:`invimbed.data` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SequenceData"]


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
