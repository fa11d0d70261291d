"""Bouncing balls: our own generator for Sutskever et al.'s data, as used by ODE2VAE.

Protocol (Sutskever, Hinton & Taylor 2009; Yildiz et al. 2019; Vialard et al. 2020):
``n_balls`` = 3 balls of radius 1.2 in a square box of side 10, elastic collisions with
the walls and between balls (equal masses), rendered as ``size`` x ``size`` = 32 x 32
frames with intensity ``exp(-(d^2 / r^2)^4)`` summed over balls and clipped to 1,
20 frames per sequence, 10,000 training and 500 test sequences.

Every sequence ``i`` of split ``s`` (0 train, 1 test) draws its initial state from
``numpy.random.default_rng([seed, s, i])``: the first ``k`` sequences do not depend on
how many are generated, and the test set does not depend on the training-set size.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ._cache import cache_dir as _cache_dir
from ._cache import cached_arrays
from ._sequences import SequenceData, unit_times

__all__ = ["bouncing_balls", "render_balls", "simulate_balls"]


def _initial_state(rng: np.random.Generator, n_balls: int, radius: float, box: float,
                   speed: float) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping positions inside the box (rejection sampling) and a velocity
    matrix scaled to Frobenius norm ``speed`` (Sutskever's ``v / norm(v) * .5``)."""
    for _ in range(10_000):
        x = radius + rng.random((n_balls, 2)) * (box - 2 * radius)
        d = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)
        if np.all(d[np.triu_indices(n_balls, 1)] >= 2 * radius):
            break
    else:  # pragma: no cover - only for boxes too small for the balls
        raise ValueError("could not place the balls without overlap: the box is too small.")
    v = rng.standard_normal((n_balls, 2))
    v *= speed / np.linalg.norm(v)
    return x, v


def simulate_balls(x0: np.ndarray, v0: np.ndarray, n_frames: int, *, radius: float = 1.2,
                   box: float = 10.0, substeps: int = 2) -> np.ndarray:
    """Positions of the balls at each frame, all sequences at once.

    Parameters
    ----------
    x0, v0 : ndarray, shape (N, n_balls, 2)
        Initial positions and velocities (distance per frame).
    n_frames : int
    radius, box : float
    substeps : int
        Euler substeps per frame, each of length ``1 / substeps`` (Sutskever: 2), with
        the wall and ball collisions resolved after each.

    Returns
    -------
    ndarray, shape (N, n_frames, n_balls, 2)

    Notes
    -----
    Walls reflect the normal velocity component; two balls closer than ``2 radius`` that
    approach each other exchange the velocity components along the line between their
    centres (an elastic collision of equal masses). Sutskever's original exchanges them
    whether or not the balls approach, which can trap two balls together; we do not.
    """
    x = np.array(x0, dtype=np.float64)
    v = np.array(v0, dtype=np.float64)
    N, n, _ = x.shape
    out = np.empty((N, n_frames, n, 2))
    eps = 1.0 / substeps
    pairs = [(i, j) for i in range(n) for j in range(i)]
    for t in range(n_frames):
        out[:, t] = x
        for _ in range(substeps):
            x += eps * v
            v = np.where(x - radius < 0, np.abs(v), v)
            v = np.where(x + radius > box, -np.abs(v), v)
            for i, j in pairs:
                w = x[:, i] - x[:, j]
                dist = np.linalg.norm(w, axis=-1, keepdims=True)
                w = w / np.maximum(dist, 1e-12)
                vi = np.sum(w * v[:, i], axis=-1, keepdims=True)
                vj = np.sum(w * v[:, j], axis=-1, keepdims=True)
                hit = (dist < 2 * radius) & (vi - vj < 0)
                dv = np.where(hit, (vj - vi) * w, 0.0)
                v[:, i] += dv
                v[:, j] -= dv
    return out


def render_balls(positions: np.ndarray, *, size: int = 32, radius: float = 1.2,
                 box: float = 10.0, chunk: int = 64) -> np.ndarray:
    """Frames of intensity ``min(1, sum_balls exp(-(d^2 / r^2)^4))`` at pixel centres.

    Parameters
    ----------
    positions : ndarray, shape (N, T, n_balls, 2)
        ``[..., 0]`` is the horizontal coordinate (image column), ``[..., 1]`` the
        vertical one (image row), both in ``[0, box]``.
    chunk : int
        Sequences rendered at a time (bounds the temporaries: ``chunk * T * n_balls *
        size**2`` doubles).

    Returns
    -------
    ndarray, shape (N, T, size, size), float32 in [0, 1]
    """
    positions = np.asarray(positions, dtype=np.float64)
    N, T = positions.shape[:2]
    centres = (np.arange(size) + 0.5) / size * box
    out = np.empty((N, T, size, size), dtype=np.float32)
    for s in range(0, N, chunk):
        p = positions[s:s + chunk]
        dx2 = (centres - p[..., 0][..., None]) ** 2 / radius ** 2  # (n, T, balls, size)
        dy2 = (centres - p[..., 1][..., None]) ** 2 / radius ** 2
        q = dy2[..., :, None] + dx2[..., None, :]  # (n, T, balls, rows, cols)
        q *= q
        q *= q
        np.negative(q, out=q)
        np.exp(q, out=q)
        out[s:s + chunk] = np.minimum(q.sum(axis=2), 1.0)
    return out


def _generate(split: int, n: int, params: dict) -> tuple[np.ndarray, np.ndarray]:
    x0 = np.empty((n, params["n_balls"], 2))
    v0 = np.empty_like(x0)
    for i in range(n):
        rng = np.random.default_rng([params["seed"], split, i])
        x0[i], v0[i] = _initial_state(rng, params["n_balls"], params["radius"], params["box"],
                                      params["speed"])
    pos = simulate_balls(x0, v0, params["n_frames"], radius=params["radius"],
                         box=params["box"], substeps=params["substeps"])
    frames = render_balls(pos, size=params["size"], radius=params["radius"], box=params["box"])
    return frames, pos.astype(np.float32)


def bouncing_balls(n_train: int = 10_000, n_test: int = 500, *, n_frames: int = 20,
                   size: int = 32, n_balls: int = 3, radius: float = 1.2, box: float = 10.0,
                   speed: float = 0.5, substeps: int = 2, seed: int = 0, cache: bool = True,
                   cache_dir: str | os.PathLike | None = None) -> SequenceData:
    """Bouncing-balls sequences, generated (seeded) and cached as npz.

    Parameters
    ----------
    n_train, n_test : int
        Sequences per split (the protocol: 10,000 and 500; smaller for quick runs, the
        first ``k`` sequences are the same whatever the size).
    n_frames, size, n_balls, radius, box : see the module docstring.
    speed : float
        Frobenius norm of each sequence's initial velocity matrix, in box units per frame
        (Sutskever: 0.5).
    substeps : int
        Collision-resolution substeps per frame.
    seed : int
    cache : bool
        Read/write ``bballs-{train,test}-n{n}-{hash}.npz`` (``allow_pickle=False``) in
        ``cache_dir`` (default ``$INVIMBED_DATA`` or ``~/.cache/invimbed/data``); the
        hash covers every generation parameter. The full training set is about 820 MB
        in memory (float32).

    Returns
    -------
    SequenceData
        ``train`` (n_train, n_frames, size, size), ``test`` (n_test, ...), float32 in
        [0, 1]; ``info["positions_train"]`` is not stored (positions are in the cache).
    """
    for name, val in (("n_train", n_train), ("n_test", n_test)):
        if val < 1:
            raise ValueError(f"`{name}` must be at least 1, got {val}.")
    if n_balls < 1 or radius <= 0 or box <= 2 * radius:
        raise ValueError(f"need n_balls >= 1 and box > 2 radius, got n_balls={n_balls}, "
                         f"radius={radius}, box={box}.")
    params = {"n_frames": n_frames, "size": size, "n_balls": n_balls, "radius": radius,
              "box": box, "speed": speed, "substeps": substeps, "seed": seed,
              "generator": 1}
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    splits = []
    for split, n in ((0, n_train), (1, n_test)):
        path = (_cache_dir(cache_dir) / f"bballs-{('train', 'test')[split]}-n{n}-{key}.npz"
                if cache else None)
        arrays = cached_arrays(path, lambda split=split, n=n: dict(
            zip(("frames", "positions"), _generate(split, n, params))),
            keys=["frames", "positions"])
        splits.append(arrays["frames"])
    info = dict(params, n_train=int(n_train), n_test=int(n_test),
                source="invimbed.data.bouncing_balls (Sutskever et al. protocol)")
    return SequenceData(splits[0], splits[1], unit_times(n_frames), "bouncing-balls", info)
