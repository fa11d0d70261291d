"""The full-protocol rotating-MNIST run against the latent-ODE baseline, from their
committed ``results.json`` summaries: the figure and the numbers of docs/experiments.md.

    python docs/scripts/rotating_mnist_curve.py \\
        docs/results/rotating-mnist-p-4-n2.json docs/results/latent-ode-mnist-n2.json \\
        docs/img/rotmnist-full-curve.png

Draws the training loss and the test MSE at the held-out 5th frame against the epoch for
both runs, the paper's number (Table 1) as a line, and, for the InImNet, the fit
``MSE(e) = a + b e^-c`` to its test MSEs carried on to epoch 500 (dashed: an
extrapolation, not a measurement). Prints, per run, the epochs reached, the last test
MSE, the median seconds per epoch; the test MSE both runs reached (the larger of their
best), and the epoch and the summed seconds of training at which each first reached it;
and the fitted curve's value at epochs 100, 200 and 500.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _history(path: Path) -> tuple[dict, dict]:
    doc = json.loads(Path(path).read_text())
    run = doc["runs"][0]
    return run, run["history"]


def reach(history: dict, level: float) -> tuple[int, float, bool] | None:
    """The first evaluated epoch whose test MSE is at most ``level``, the seconds of
    training up to its end, and whether that is only a bound (the first evaluation,
    after epoch 1, already reached it)."""
    for i, (e, m) in enumerate(zip(history["test_epoch"], history["test_mse"])):
        if m <= level:
            return e, float(np.sum(history["epoch_time"][:e])), i == 0 and e > 1
    return None


def fit(epochs: np.ndarray, mse: np.ndarray):
    """Least-squares ``a + b e^-c`` (``a, b >= 0``, ``0 < c <= 3``); None if it fails."""
    from scipy.optimize import curve_fit

    def f(e, a, b, c):
        return a + b * np.power(e, -c)

    try:
        p, _ = curve_fit(f, epochs, mse, p0=(mse.min() / 2, mse.max() * epochs[0], 1.0),
                         bounds=([0, 0, 1e-3], [np.inf, np.inf, 3.0]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    return lambda e: f(np.asarray(e, float), *p), p


def main(argv: list[str]) -> None:
    inim_path, ode_path, png = argv
    runs = {"InImNet p_min = -4, n = 2": _history(Path(inim_path)),
            "latent ODE (odeint_adjoint, dopri5), n = 2": _history(Path(ode_path))}
    paper = json.loads(Path(inim_path).read_text())["paper"]["inimnet-p-4-n2"][0]
    for name, (run, h) in runs.items():
        print(f"{name}: {len(h['loss'])} epochs, test MSE {h['test_mse'][-1]:.4f} at epoch "
              f"{h['test_epoch'][-1]}, best {min(h['test_mse']):.4f}, median "
              f"{np.median(h['epoch_time']):.1f} s/epoch, final evaluation {run['mse']:.4f}")
    level = max(min(h["test_mse"]) for _, h in runs.values())
    print(f"common test MSE (the larger of the two best): {level:.4f}")
    for name, (_, h) in runs.items():
        r = reach(h, level)
        print(f"  {name}: " + ("not reached" if r is None else
                                 f"{'by ' if r[2] else ''}epoch {r[0]}, {r[1]:.0f} s of training"))
    _, hi = runs["InImNet p_min = -4, n = 2"]
    curve = fit(np.asarray(hi["test_epoch"], float), np.asarray(hi["test_mse"], float))
    if curve is not None:
        f, p = curve
        print(f"InImNet fit a + b e^-c: a={p[0]:.4f} b={p[1]:.3f} c={p[2]:.2f}; "
              + ", ".join(f"epoch {e}: {float(f(e)):.4f}" for e in (100, 200, 500)))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (name, (_, h)), color in zip(runs.items(), ("C0", "C1")):
        ax1.plot(np.arange(1, len(h["loss"]) + 1), h["loss"], color=color, label=name)
        ax2.plot(h["test_epoch"], h["test_mse"], "o-", ms=3, color=color, label=name)
    if curve is not None:
        e = np.arange(hi["test_epoch"][0], 501)
        ax2.plot(e, curve[0](e), "--", color="C0", lw=1, label="InImNet fit, extrapolated")
    ax2.axhline(paper, color="k", lw=1, ls=":", label=f"paper, Table 1 ({paper})")
    ax1.set(xlabel="epoch", ylabel="training loss (masked MSE)", yscale="log",
            title="training loss")
    ax2.set(xlabel="epoch", ylabel="test MSE, 5th frame", yscale="log",
            title="test MSE at the held-out 5th frame")
    ax2.set_xscale("log")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main(sys.argv[1:])
