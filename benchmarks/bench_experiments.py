"""Time per epoch: InImNet against the torchdiffeq latent-ODE baseline, same data, batch
and autoencoder (the paper's claim: 153 s vs 516 s per epoch on bouncing balls, 3.4x,
against the shooting model of Vialard et al.).

For each data set, the two models of ``python -m invimbed.experiments`` are built with
the paper's hyperparameters (rotating MNIST: latent 20, InImNet p_min=-4, n=2; bouncing
balls: latent 50, p_min=-3, n=3; the baseline: the same encoder/decoder, an ODE whose
field is one Phi-sized MLP, ``odeint_adjoint`` dopri5, rtol 1e-3, atol 1e-4), and timed
on the same minibatches: one optimiser step (forward, backward, Adam) per batch,
``--batches`` batches per repeat, the two models interleaved so that load from other
processes falls on both alike, the median over ``--repeats`` kept. The time per epoch
is the time per batch times the batches of a full epoch (rotating MNIST: our 400
training sequences, 16 batches of 25; the original file's 500: 20; bouncing balls:
10,000, 400 batches), so the epoch itself never has to run.

    python benchmarks/bench_experiments.py            # both data sets, ~2-4 min on 2 cores
    python benchmarks/bench_experiments.py --quick    # 2 batches, 1 repeat, ~1 min
    python benchmarks/bench_experiments.py --jacobian exact --dataset balls

Prints a table and writes ``--json`` (default ``bench_experiments.json``).
"""

from __future__ import annotations

import statistics
import time

import torch

from _machine import arguments, header, repeats_of, write_json

from invimbed.experiments._models import (LatentInImNet, LatentODE, balls_decoder,
                                          balls_encoder, mnist_decoder, mnist_encoder)
from invimbed.experiments._runner import masked_mse
from invimbed.experiments._tasks import balls_task, mnist_task

SETUPS = {
    "mnist": dict(latent=20, p_min=-4, layers=2, batches_per_epoch=16, paper_batches=20,
                  make=lambda n, cache: mnist_task(n, 4, cache_dir=cache),
                  enc=mnist_encoder, dec=mnist_decoder),
    "balls": dict(latent=50, p_min=-3, layers=3, batches_per_epoch=400, paper_batches=400,
                  make=lambda n, cache: balls_task(n, 4, cache_dir=cache),
                  enc=balls_encoder, dec=balls_decoder),
}


def step_timer(model, task, batches, lr=1e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    times = task.times

    def run():
        model.train()
        nfe0 = getattr(getattr(model, "func", None), "nfe", 0)
        t0 = time.perf_counter()
        for j in batches:
            mask = task.mask_train[j] if task.mask_train is not None else None
            opt.zero_grad(set_to_none=True)
            loss = masked_mse(model(task.x0_train[j], times), task.y_train[j], mask)
            loss.backward()
            opt.step()
        dt = (time.perf_counter() - t0) / len(batches)
        nfe = (getattr(getattr(model, "func", None), "nfe", 0) - nfe0) / len(batches)
        return dt, nfe
    return run


def bench(name, args):
    s = SETUPS[name]
    B = args.batch_size
    task = s["make"](B * args.batches, args.cache_dir)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(task.x0_train), generator=g)
    batches = [perm[i * B:(i + 1) * B] for i in range(args.batches)]
    torch.manual_seed(0)
    inim = LatentInImNet(s["enc"](s["latent"]), s["dec"](s["latent"]), s["latent"],
                         p_min=s["p_min"], hidden_layers=s["layers"], dropout=0.3,
                         closure=args.jacobian)
    torch.manual_seed(0)
    ode = LatentODE(s["enc"](s["latent"]), s["dec"](s["latent"]), s["latent"],
                    hidden_layers=s["layers"], rtol=1e-3, atol=1e-4)
    runs = {"inimnet": step_timer(inim, task, batches),
            "latent-ode": step_timer(ode, task, batches)}
    step_timer(inim, task, batches[:1])()  # warm-up, one batch each
    step_timer(ode, task, batches[:1])()
    times = {k: [] for k in runs}
    nfes = []
    for _ in range(args.repeats):
        for k, r in runs.items():
            dt, nfe = r()
            times[k].append(dt)
            if k == "latent-ode":
                nfes.append(nfe)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "dataset": name, "batch_size": B, "batches_timed": args.batches, "repeats": args.repeats,
        "inimnet": f"p_min={s['p_min']}, n={s['layers']}, jacobian={args.jacobian}",
        "baseline": "odeint_adjoint dopri5 rtol 1e-3 atol 1e-4",
        "s_per_batch": med, "all_s_per_batch": times,
        "s_per_epoch": {k: v * s["batches_per_epoch"] for k, v in med.items()},
        "batches_per_epoch": s["batches_per_epoch"],
        "ratio_baseline_over_inimnet": med["latent-ode"] / med["inimnet"],
        "baseline_nfe_per_batch": statistics.median(nfes) if nfes else None,
    }


def main(argv=None):
    ap = arguments(__doc__, quick="2 batches, 1 repeat", repeats_help="timed repeats, the "
                   "median kept (default 3, 1 with --quick)", json_out=True)
    ap.set_defaults(json="bench_experiments.json")
    ap.add_argument("--dataset", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    ap.add_argument("--batch-size", type=int, default=25)
    ap.add_argument("--batches", type=int, default=None, help="default 3, 2 with --quick")
    ap.add_argument("--jacobian", choices=["crop", "jet", "exact"], default="crop")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--cache-dir")
    args = ap.parse_args(argv)
    args.repeats = repeats_of(args, full=3)
    args.batches = args.batches or (2 if args.quick else 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [bench(d, args) for d in args.dataset]
    print(header("torch", argv=argv, extra=(f"torch    : {torch.get_num_threads()} threads",)))
    print(f"{'data':<6} {'batch':>5} {'InImNet s/batch':>16} {'ODE s/batch':>12} "
          f"{'InImNet s/epoch':>16} {'ODE s/epoch':>12} {'ODE/InImNet':>12} {'ODE NFE':>8}")
    for r in rows:
        sb, se = r["s_per_batch"], r["s_per_epoch"]
        print(f"{r['dataset']:<6} {r['batch_size']:>5} {sb['inimnet']:>16.3f} "
              f"{sb['latent-ode']:>12.3f} {se['inimnet']:>16.1f} {se['latent-ode']:>12.1f} "
              f"{r['ratio_baseline_over_inimnet']:>12.2f} {r['baseline_nfe_per_batch']:>8.0f}")
    write_json(args.json, {"torch_threads": torch.get_num_threads(), "rows": rows}, "torch")
    return rows


if __name__ == "__main__":
    main()
