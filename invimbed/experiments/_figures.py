"""The figures of the paper's kind (matplotlib, Agg): sample grids, MSE per frame, the
extrapolation curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["extrapolation_curve", "mse_per_frame", "sample_grid"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path, dpi: int = 100, tight: bool = False) -> Path:
    """Write ``fig`` to ``path`` and close it."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return Path(path)


def _depth_label(p: float) -> str:
    return f"p={p:g}"


def sample_grid(path: Path, truth: np.ndarray, pred: np.ndarray, depths, title: str = "",
                sample: int = 0, max_frames: int = 20) -> Path:
    """Rows: the ground truth, then the prediction at each depth (p = 0, -1, ...);
    columns: frames. ``truth`` (n, T, H, W), ``pred`` (n_depths, n, T, H, W).

    The frames are tiled into one image (blank gaps between them) drawn on one axes:
    one ``imshow`` instead of one axes per frame."""
    plt = _plt()
    T = min(truth.shape[1], max_frames)
    labels = ["GT"] + ([_depth_label(p) for p in depths] if depths is not None else ["model"])
    rows = [truth[sample]] + [pred[d, sample] for d in range(pred.shape[0])]
    H, W = np.shape(truth)[2:4]
    gap = max(1, round(0.06 * max(H, W)))
    mosaic = np.full((len(rows) * (H + gap) - gap, T * (W + gap) - gap), np.nan)
    for r, frames in enumerate(rows):
        for k in range(T):
            mosaic[r * (H + gap):r * (H + gap) + H, k * (W + gap):k * (W + gap) + W] = \
                np.clip(frames[k], 0, 1)
    fig, ax = plt.subplots(figsize=(0.6 * T + 0.8, 0.62 * len(rows) + 0.4))
    ax.imshow(mosaic, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([r * (H + gap) + (H - 1) / 2 for r in range(len(rows))], labels, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.92, bottom=0.01)
    return _save(plt, fig, path, dpi=80)


def mse_per_frame(path: Path, curves: dict, title: str = "", held_out: int | None = None) -> Path:
    """Test MSE against the frame index, one line per label in ``curves``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for label, y in curves.items():
        ax.plot(np.arange(1, len(y) + 1), y, marker="o", ms=3, label=label)
    if held_out is not None:
        ax.axvline(held_out + 1, color="0.6", ls=":", lw=1, label="held-out frame")
    ax.set_xlabel("frame")
    ax.set_ylabel("test MSE")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return _save(plt, fig, path, tight=True)


def extrapolation_curve(path: Path, per_depth_frame: np.ndarray, depths, trained: float,
                        title: str = "") -> Path:
    """Left: test MSE per frame, a line per depth; right: the MSE over all frames
    against the depth, the trained depth marked."""
    plt = _plt()
    depths = np.asarray(depths)
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(depths):
        if p == 0:
            continue
        a.plot(np.arange(1, per_depth_frame.shape[1] + 1), per_depth_frame[i],
               color=cmap(i / max(len(depths) - 1, 1)), lw=2.2 if p == trained else 1,
               label=_depth_label(p) + (" (trained)" if p == trained else ""))
    a.set_xlabel("frame")
    a.set_ylabel("test MSE")
    a.grid(alpha=0.3)
    a.legend(fontsize=6, ncol=2)
    total = per_depth_frame.mean(axis=1)
    b.plot(depths, total, marker="o")
    b.axvline(trained, color="C3", ls=":", label="trained depth")
    b.set_xlabel("depth p")
    b.set_ylabel("test MSE, all frames")
    b.grid(alpha=0.3)
    b.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(plt, fig, path, tight=True)
