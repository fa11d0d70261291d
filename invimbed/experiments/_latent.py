"""The driver shared by the latent-space experiments (rotating MNIST, bouncing balls, the
latent-ODE baseline): variants x seeds, results, figures."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import _figures as fig
from ._models import (LatentInImNet, balls_decoder, balls_encoder, mnist_decoder,
                      mnist_encoder)
from ._runner import Options, RunResult, device_of, out_dir, predict_samples, run_one, \
    write_results
from ._tasks import Task, balls_task, mnist_task

__all__ = ["depth_samples_figure", "inimnet_variants", "mask_suffix", "run_variants",
           "task_for", "variant_name"]


def task_for(dataset: str, cfg: dict, opts: Options) -> tuple[Task, Callable, Callable]:
    """The task of ``dataset`` (``"mnist"`` or ``"balls"``) for the resolved ``cfg``, whose
    sizes it updates to the data's, and the builders of its encoder and decoder. With the
    original ``rot-mnist-3s.mat`` (``--mat``), the first 500 sequences train unless
    ``--n-train`` says otherwise."""
    if dataset == "mnist":
        if opts.mat and opts.n_train is None:
            cfg["n_train"] = 500
        task = mnist_task(cfg["n_train"], cfg["n_test"], mat=opts.mat, cache_dir=opts.cache_dir,
                          mask=cfg.get("mask", "held-out"))
        cfg["n_train"], cfg["n_test"] = len(task.x0_train), len(task.x0_test)
        return task, mnist_encoder, mnist_decoder
    task = balls_task(cfg["n_train"], cfg["n_test"], cache_dir=opts.cache_dir)
    return task, balls_encoder, balls_decoder


def mask_suffix(cfg: dict) -> str:
    """``"-notebook"`` for runs under the published notebook's mask (``--mask notebook``),
    ``""`` for ours: the two protocols' runs get their own variants and folders, so a
    ``--resume`` never continues one protocol's checkpoint under the other."""
    return "-notebook" if cfg.get("mask", "held-out") == "notebook" else ""


def variant_name(p_min: float, layers: int) -> str:
    return f"inimnet-p{p_min:g}-n{layers}"


def inimnet_variants(cfg: dict, encoder: Callable, decoder: Callable) -> list:
    """``(variant, overrides, build)`` of a latent InImNet for every ``p_min`` x ``layers``
    of ``cfg`` (the paper's tables), for `run_variants`."""
    latent = cfg["latent"]
    variants = []
    for p in cfg["p_min"]:
        for n in cfg["layers"]:
            def build(p=p, n=n):
                return LatentInImNet(encoder(latent, cfg["n_filt"]),
                                     decoder(latent, cfg["n_filt"]), latent,
                                     p_min=p, hidden_layers=n, inflation=cfg["inflation"],
                                     dropout=cfg["dropout"], closure=cfg["jacobian"])
            variants.append((variant_name(p, n) + mask_suffix(cfg), {"p_min": p, "layers": n},
                             build))
    return variants


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


def depth_samples_figure(checkpoint: str | os.PathLike, path: str | os.PathLike | None = None,
                         *, sample: int = 0, cache_dir: str | None = None,
                         device: str = "cpu") -> Path:
    """The paper's Figure 4 from a checkpoint: a test sequence's ground truth, then the
    decoded frames at every depth p = 0, -1, ..., p_min of one pass of the trained
    latent InImNet (eq. (14)'s outputs at the depths of ``docs/theory.md``).

    Parameters
    ----------
    checkpoint : path
        A run's ``checkpoint.pt`` (or its folder ``VARIANT/seed-S``) of
        ``bouncing-balls``, ``rotating-mnist`` or ``paper-runs``. The run's configuration
        is read from the checkpoint or, for checkpoints written before it held one, from
        ``result.json`` beside it.
    path : path, optional
        The PNG to write, or a folder to write ``samples-VARIANT-seed-S-epoch-E.png``
        in; default: that file beside the checkpoint.
    sample : int
        Which test sequence (the test sets' first sequences do not depend on their sizes).
    cache_dir : str, optional
        The data cache (default ``$INVIMBED_DATA`` or ``~/.cache/invimbed/data``).
    device : str

    Returns
    -------
    Path
        The PNG written.

    Raises
    ------
    ValueError
        If ``checkpoint`` does not exist, holds no configuration and has no
        ``result.json`` beside it, or is not a latent InImNet's.
    """
    ckpt = Path(checkpoint)
    if ckpt.is_dir():
        ckpt = ckpt / "checkpoint.pt"
    if not ckpt.is_file():
        raise ValueError(f"`checkpoint` must be a run's checkpoint.pt or its folder, but got "
                         f"{str(checkpoint)!r} (no such file).")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    cfg, task_name = state.get("config"), state.get("task")
    if cfg is None:
        beside = ckpt.parent / "result.json"
        if not beside.is_file():
            raise ValueError(f"`checkpoint` {str(ckpt)!r} holds no configuration and has no "
                             f"result.json beside it to read one from.")
        saved = json.loads(beside.read_text())
        cfg, task_name = saved["config"], saved["experiment"]
    if not (any(k.startswith("inimnet.") for k in state["model"])
            and isinstance(cfg.get("p_min"), (int, float))):     # one depth: not shared
        raise ValueError(f"`checkpoint` must be a latent InImNet's (rotating-mnist, "
                         f"bouncing-balls), but {str(ckpt)!r} is not.")
    if "balls" in task_name:
        task = balls_task(1, sample + 1, cache_dir=cache_dir)
        enc, dec = balls_encoder, balls_decoder
    else:
        task = mnist_task(cfg["n_train"], sample + 1, mat=cfg.get("mat"), cache_dir=cache_dir)
        enc, dec = mnist_encoder, mnist_decoder
    one = dict(cfg, p_min=[cfg["p_min"]], layers=[cfg["layers"]])
    model = inimnet_variants(one, enc, dec)[0][2]().to(device)
    model.load_state_dict(state["model"])
    s = predict_samples(model, task, torch.device(device), n=sample + 1)
    run_dir = ckpt.parent
    if path is None or Path(path).is_dir():
        path = Path(path or run_dir) / (f"samples-{run_dir.parent.name}-{run_dir.name}-epoch-"
                                        f"{state['epoch']}.png")
    title = (f"{task.name}, p_min = {cfg['p_min']:g}, n = {cfg['layers']}, epoch "
             f"{state['epoch']}, test sequence {sample}: ground truth, then p = 0, -1, ...")
    return fig.sample_grid(Path(path), s["truth"], s["pred"], s["depths"], title=title,
                           sample=sample)
