"""``python -m invimbed.experiments extrapolation``: the paper's Appendix F.3.

One ``Phi`` shared by every layer (``InImNet(shared=True)``), trained on the output at
``p_min`` = -4 (rotating MNIST) and -3 (bouncing balls) with the hyperparameters of the
original experiments, then evaluated at every depth ``p = 0, -1, ..., -8`` from one pass
of a deeper network with the same weights: the loss-against-depth curve. The paper's
observation: the loss is lowest at the trained depth and degrades more slowly going
deeper (``p = -5``) than shallower (``p = -3``). ``--dataset mnist balls`` picks the
tasks (default both); ``--p-min`` overrides the trained depth of every task.
"""

from __future__ import annotations

import numpy as np

from . import _figures as fig
from . import bouncing_balls as _bb
from . import rotating_mnist as _rm
from ._latent import mask_suffix, task_for
from ._models import LatentInImNet
from ._runner import Options, device_of, evaluate, out_dir, predict_samples, resolve, run_one, \
    write_results

NAME = "extrapolation"
DATASETS = ("mnist", "balls")
PAPER = {"mnist": dict(_rm.PAPER, p_min=[-4], layers=[2], seeds=[0], eval_depth=-8),
         "balls": dict(_bb.PAPER, p_min=[-3], layers=[3], seeds=[0], eval_depth=-8)}
QUICK = {"mnist": dict(_rm.QUICK, p_min=[-2], eval_depth=-4),
         "balls": dict(_bb.QUICK, p_min=[-2], eval_depth=-4)}


def run(opts: Options) -> dict:
    names = opts.dataset or list(DATASETS)
    bad = [d for d in names if d not in DATASETS]
    if bad:
        raise ValueError(f"`dataset` must be among {DATASETS}, got {bad}")
    root = out_dir(opts, NAME)
    device = device_of(opts)
    docs = {}
    for ds in names:
        cfg = resolve(PAPER[ds], QUICK[ds], opts)
        task, enc, dec = task_for(ds, cfg, opts)
        latent, n = cfg["latent"], cfg["layers"][0]
        p_train = cfg["p_min"][0]
        deepest = min(cfg["eval_depth"], p_train)
        out = root / ds

        def build(depths=None, p=p_train):
            return LatentInImNet(enc(latent, cfg["n_filt"]), dec(latent, cfg["n_filt"]), latent,
                                 p_min=p, depths=depths,
                                 hidden_layers=n, inflation=cfg["inflation"],
                                 dropout=cfg["dropout"], closure=cfg["jacobian"], shared=True)

        variant = f"shared-p{p_train:g}-n{n}{mask_suffix(cfg)}"
        results, curves = [], []
        deep_model = None
        for seed in cfg["seeds"]:
            res, model = run_one(f"{NAME}/{ds}", variant, seed, build, task,
                                 dict(cfg, p_min=p_train, layers=n), out, opts)
            # the same weights in a deeper network: outputs at p = 0, -1, ..., deepest
            deep_model = build(depths=[float(-k) for k in range(0, -int(deepest) + 1)]).to(device)
            state = {k: v for k, v in model.state_dict().items() if k != "inimnet.depths"}
            missing = deep_model.load_state_dict(state, strict=False)
            assert set(missing.missing_keys) <= {"inimnet.depths"}, missing
            ev = evaluate(deep_model, task, device, cfg.get("eval_batch_size", cfg["batch_size"]))
            res.extra = {"depths": ev["depths"], "per_depth_frame": ev["per_depth_frame"]}
            curves.append(ev["per_depth_frame"])
            results.append(res)
        per = np.mean(curves, axis=0)
        depths = [float(p) for p in results[0].extra["depths"]]
        scored = per[:, task.score_frames].mean(axis=1)
        total = per.mean(axis=1)
        i_tr = depths.index(float(p_train))
        summary = {
            "trained_depth": p_train, "depths": depths,
            "mse_scored_frames": scored.tolist(), "mse_all_frames": total.tolist(),
            "argmin_depth_all_frames": depths[int(np.argmin(total[1:])) + 1],
            "shallower_minus_deeper": (float(total[i_tr - 1] - total[i_tr + 1])
                                       if 0 < i_tr < len(depths) - 1 else None),
        }
        figures = []
        if opts.figures:
            figures.append(fig.extrapolation_curve(
                out / "extrapolation.png", per, depths, p_train,
                title=f"{ds}: shared Phi trained at p={p_train:g}, evaluated at every depth"))
            s = predict_samples(deep_model, task, device)
            figures.append(fig.sample_grid(out / "samples-extrapolated.png", s["truth"],
                                           s["pred"], s["depths"],
                                           title=f"{ds}: trained at p={p_train:g}"))
        docs[ds] = write_results(out, f"{NAME}/{ds}", cfg, task.info, results,
                                 {"extrapolation": summary,
                                  "figures": [str(p) for p in figures]})
    return docs
