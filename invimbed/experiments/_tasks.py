"""The two prediction tasks, as tensors: conditioning frames, target sequences, masks and
how a test run is scored."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .. import data as _data

__all__ = ["Task", "balls_task", "mnist_task"]


@dataclass
class Task:
    """One data set prepared for training.

    Attributes
    ----------
    name : {"rotating-mnist", "bouncing-balls"}
    x0_train, x0_test : Tensor, shape (n, C, H, W)
        Conditioning frames (the first frame; the first 3 frames as channels for balls).
    y_train, y_test : Tensor, shape (n, T, H, W)
        Whole sequences, the targets.
    mask_train : Tensor of bool, shape (n_train, T), or None
        Frames in the training loss (rotating MNIST: :func:`invimbed.data.training_mask`).
    times : Tensor, shape (T,)
    score_frames : list of int
        The frames whose test MSE is *the* reported number (rotating MNIST: [4], the 5th
        frame; bouncing balls: every frame).
    info : dict
    """

    name: str
    x0_train: torch.Tensor
    y_train: torch.Tensor
    mask_train: torch.Tensor | None
    x0_test: torch.Tensor
    y_test: torch.Tensor
    times: torch.Tensor
    score_frames: list
    info: dict = field(default_factory=dict)

    def score(self, per_frame: np.ndarray) -> float:
        """The reported MSE from the test MSE of each frame (``(T,)``)."""
        return float(np.mean(np.asarray(per_frame)[self.score_frames]))


def mnist_task(n_train: int = 400, n_test: int | None = None, *, mat: str | None = None,
               mask_seed: int = 0, cache_dir=None, mask: str = "held-out") -> Task:
    """Rotating MNIST: predict 16 rotations from the first; the 5th frame and 3 random
    frames per sequence out of the training loss (``mask="held-out"``, ours) or every
    frame in it (``mask="notebook"``, the paper's published notebook's effective
    protocol, :func:`invimbed.data.training_mask`); scored by the test MSE at the 5th.

    Raises
    ------
    invimbed.data.DataError
        If the data cannot be read or holds a NaN or an infinity (any frame, held out
        or not), naming the file or data set.
    """
    if mat is not None:
        d = _data.load_rot_mnist_mat(mat)
        d = d.subset(n_train, n_test)
    else:
        d = _data.rotating_mnist(n_train=n_train, cache_dir=cache_dir)
        d = d.subset(None, n_test)
    d.check_finite()     # a NaN would reach the loss even in a held-out frame
    y_tr, y_te = torch.from_numpy(d.train), torch.from_numpy(d.test)
    in_loss = torch.from_numpy(_data.training_mask(len(y_tr), d.n_frames, seed=mask_seed,
                                                   protocol=mask))
    what = {"held-out": "5th frame (index 4) + 3 random frames per sequence held out",
            "notebook": "none held out: every frame in the loss (the paper's published "
                        "notebook's effective mask)"}[mask]
    info = dict(d.info, mask=what, mask_protocol=mask, mask_seed=mask_seed,
                n_train=len(y_tr), n_test=len(y_te))
    return Task("rotating-mnist", y_tr[:, :1].clone(), y_tr, in_loss, y_te[:, :1].clone(), y_te,
                torch.from_numpy(d.times), [_data.HELD_OUT_FRAME], info)


def balls_task(n_train: int = 10_000, n_test: int = 500, *, n_frames: int = 20,
               seed: int = 0, cache_dir=None) -> Task:
    """Bouncing balls: predict the 20 frames from the first 3 (as 3 channels); scored
    by the test MSE averaged over all frames.

    Raises
    ------
    invimbed.data.DataError
        If the data holds a NaN or an infinity.
    """
    d = _data.bouncing_balls(n_train, n_test, n_frames=n_frames, seed=seed, cache_dir=cache_dir)
    d.check_finite()
    y_tr, y_te = torch.from_numpy(d.train), torch.from_numpy(d.test)
    info = dict(d.info, scored="mean test MSE over all frames")
    return Task("bouncing-balls", y_tr[:, :3].clone(), y_tr, None, y_te[:, :3].clone(), y_te,
                torch.from_numpy(d.times), list(range(d.n_frames)), info)
