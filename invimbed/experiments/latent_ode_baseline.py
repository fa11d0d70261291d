"""``python -m invimbed.experiments latent-ode-baseline``: the adjoint-method baseline.

The same autoencoders, data, protocol, batch and optimiser as ``rotating-mnist`` and
``bouncing-balls``, with the InImNet replaced by a neural ODE in the latent space,
``dz/dt = f(z)`` (an MLP of the same size as one InImNet layer's Phi, no dropout),
integrated from ``z(0) = enc(x0)`` through the frame times by torchdiffeq's
``odeint_adjoint`` with dopri5 (rtol 1e-3, atol 1e-4): the family (continuous depth,
gradients by the adjoint method) the paper compares against. Its time per epoch, next to
InImNet's on the same machine, is the comparison of the paper's claim.
``--dataset mnist balls`` picks the tasks (default both).
"""

from __future__ import annotations

from ._latent import mask_suffix, run_variants, task_for
from ._models import LatentODE
from ._runner import Options, out_dir, resolve
from . import bouncing_balls as _bb
from . import rotating_mnist as _rm

NAME = "latent-ode-baseline"

PAPER = {"mnist": dict(_rm.PAPER, layers=[2], seeds=[0], rtol=1e-3, atol=1e-4),
         "balls": dict(_bb.PAPER, layers=[3], rtol=1e-3, atol=1e-4)}
#: Smoke runs: also looser tolerances (1e-2, 1e-3), for seconds-long CI runs.
QUICK = {"mnist": dict(_rm.QUICK, layers=[2], rtol=1e-2, atol=1e-3),
         "balls": dict(_bb.QUICK, layers=[3], rtol=1e-2, atol=1e-3)}
DATASETS = ("mnist", "balls")


def run(opts: Options) -> dict:
    names = opts.dataset or list(DATASETS)
    bad = [d for d in names if d not in DATASETS]
    if bad:
        raise ValueError(f"`dataset` must be among {DATASETS}, got {bad}")
    root = out_dir(opts, NAME)
    docs = {}
    for ds in names:
        cfg = resolve(PAPER[ds], QUICK[ds], opts)
        task, enc, dec = task_for(ds, cfg, opts)
        latent = cfg["latent"]
        variants = []
        for n in cfg["layers"]:
            def build(n=n):
                return LatentODE(enc(latent, cfg["n_filt"]), dec(latent, cfg["n_filt"]), latent,
                                 hidden_layers=n,
                                 inflation=cfg["inflation"], rtol=cfg["rtol"], atol=cfg["atol"])
            variants.append((f"latent-ode-n{n}{mask_suffix(cfg)}", {"layers": n}, build))
        docs[ds] = run_variants(f"{NAME}/{ds}", task, cfg, opts, variants, out=root / ds)
    return docs
