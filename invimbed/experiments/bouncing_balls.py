"""``python -m invimbed.experiments bouncing-balls``: the paper's Figure 4.

An autoencoder of the appendix's family (the first 3 frames as 3 channels, 32 x 32,
latent 50) with an InImNet on the latent state with the time appended, 3-layer MLPs,
``p_min`` in -1..-3 (Table Table 3: Adam 1e-3, batch 25, halved every 30 epochs, 100
epochs, dropout 0.3, inflation 2), trained on all 20 frames at ``p_min`` and scored by
the test MSE over all frames; eq. (21) for the nested Jacobians.
"""

from __future__ import annotations

from ._latent import inimnet_variants, run_variants, task_for
from ._runner import Options, resolve

NAME = "bouncing-balls"

PAPER = dict(n_train=10_000, n_test=500, epochs=100, batch_size=25, lr=1e-3, decay_every=30,
             decay=0.5, dropout=0.3, inflation=2, latent=50, p_min=[-1, -2, -3], layers=[3],
             seeds=[0], jacobian="crop", frames_per_step=None, max_batches=None,
             eval_batch_size=50, n_filt=16, eval_every=None)
#: A smoke run: a narrower autoencoder and 4 random frames per step (not the paper's).
QUICK = dict(n_train=8, n_test=4, epochs=2, batch_size=4, p_min=[-1], layers=[3], seeds=[0],
             eval_batch_size=4, n_filt=4, frames_per_step=4)

#: Figure 4 of the paper: p_min -> (MSE, seconds per epoch), Google Colab GPU.
PAPER_TABLE = {
    "inimnet-p-1-n3": [0.0234, None, 91], "inimnet-p-2-n3": [0.0204, None, 121],
    "inimnet-p-3-n3": [0.0192, None, 153], "vialard-shooting": [0.0146, None, 516],
}


def run(opts: Options) -> dict:
    cfg = resolve(PAPER, QUICK, opts)
    task, enc, dec = task_for("balls", cfg, opts)
    return run_variants(NAME, task, cfg, opts, inimnet_variants(cfg, enc, dec),
                        paper=PAPER_TABLE)
