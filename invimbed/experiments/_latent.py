"""The driver shared by the latent-space experiments (rotating MNIST, bouncing balls, the
latent-ODE baseline): variants x seeds, results, figures."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from . import _figures as fig
from ._runner import Options, RunResult, device_of, out_dir, predict_samples, run_one, \
    write_results
from ._tasks import Task

__all__ = ["run_variants"]


def run_variants(name: str, task: Task, cfg: dict, opts: Options,
                 variants: list[tuple[str, dict, Callable]], paper: dict | None = None,
                 out: Path | None = None, figure_prefix: str = "") -> dict:
    """Train and evaluate every ``(variant, overrides, build)`` for every seed, write
    ``results.json`` and the figures (sample grid of each variant's first seed, test MSE
    per frame of every variant)."""
    out = out or out_dir(opts, name)
    results: list[RunResult] = []
    samples = {}
    for variant, overrides, build in variants:
        vcfg = dict(cfg, **overrides)
        for i, seed in enumerate(cfg["seeds"]):
            res, model = run_one(name, variant, seed, build, task, vcfg, out, opts)
            results.append(res)
            if i == 0:
                samples[variant] = predict_samples(model, task, device_of(opts))
    figures = []
    if opts.figures:
        held = task.score_frames[0] if len(task.score_frames) == 1 else None
        for variant, s in samples.items():
            figures.append(fig.sample_grid(out / f"{figure_prefix}samples-{variant}.png",
                                           s["truth"], s["pred"], s["depths"],
                                           title=f"{name}, {variant}, test sequence 0"))
        curves = {}
        for variant in samples:
            rs = [r for r in results if r.variant == variant]
            curves[variant] = np.mean([r.test["per_frame"] for r in rs], axis=0)
        figures.append(fig.mse_per_frame(out / f"{figure_prefix}mse-per-frame.png", curves,
                                         title=f"{name}: test MSE per frame", held_out=held))
    extra = {"paper": paper or {}, "figures": [str(p) for p in figures]}
    return write_results(out, name, cfg, task.info, results, extra)
