"""``python -m invimbed.experiments bouncing-balls-conv``: the paper's Figure 8.

Every InImNet layer is the fully convolutional autoencoder of the appendix
(BBConvHypSubsection, final sigmoid omitted) acting in pixel space on 4 channels (the
first 3 frames and a channel filled with the time), the Jacobians on the flattened
4096-vector, matrix-free; the prediction is the output's first channel at ``p_min``.
Table Table 4: Adam 1e-3 constant, batch 2, 20 epochs; ``p_min`` in -1..-3.
``--frames-per-step K`` trains each step on K random frames of each sequence instead of
all 20 (a reduction for CPUs; the paper uses all).
"""

from __future__ import annotations

from ._latent import run_variants
from ._models import ConvInImNet
from ._runner import Options, resolve
from ._tasks import balls_task

NAME = "bouncing-balls-conv"

PAPER = dict(n_train=10_000, n_test=500, epochs=20, batch_size=2, lr=1e-3, decay_every=None,
             p_min=[-1, -2, -3], seeds=[0], jacobian="crop", frames_per_step=None,
             max_batches=None, n_filt=16, eval_batch_size=4)
#: A smoke run: a narrower autoencoder and 3 random frames per step (not the paper's).
QUICK = dict(n_train=4, n_test=2, epochs=2, batch_size=2, p_min=[-1], seeds=[0],
             frames_per_step=2, eval_batch_size=2, n_filt=4)

#: Figure 8 of the paper: p_min -> MSE (Google Colab GPU, 20 epochs).
PAPER_TABLE = {
    "conv-inimnet-p-1": [0.0140, None, None], "conv-inimnet-p-2": [0.0123, None, None],
    "conv-inimnet-p-3": [0.0122, None, None], "vialard-shooting": [0.0146, None, None],
}


def run(opts: Options) -> dict:
    cfg = resolve(PAPER, QUICK, opts)
    task = balls_task(cfg["n_train"], cfg["n_test"], cache_dir=opts.cache_dir)
    variants = []
    for p in cfg["p_min"]:
        def build(p=p):
            return ConvInImNet(p_min=p, n_filt=cfg["n_filt"], closure=cfg["jacobian"])
        variants.append((f"conv-inimnet-p{p:g}", {"p_min": p}, build))
    return run_variants(NAME, task, cfg, opts, variants, paper=PAPER_TABLE)
