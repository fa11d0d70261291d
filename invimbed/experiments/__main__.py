"""``python -m invimbed.experiments NAME [options]``: see :mod:`invimbed.experiments`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..data import DataError
from . import EXPERIMENTS, run
from ._options import (FolderError, Options, check_device, check_options, check_requirements,
                       make_folder)


def parser() -> argparse.ArgumentParser:
    """The command line's parser (:func:`main` checks the values it parses)."""
    ap = argparse.ArgumentParser(
        prog="python -m invimbed.experiments",
        description="Reproduce the learning experiments of 'Imbedding Deep Neural Networks'. "
                    "Defaults are the paper's hyperparameters; --quick is a seconds-long "
                    "smoke run on a small subset.")
    ap.add_argument("name", choices=list(EXPERIMENTS))
    ap.add_argument("--quick", action="store_true", help="small subset, 2 epochs, 1 seed")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--seeds", type=int, nargs="+", help="the seeds, e.g. --seeds 0 1 2")
    ap.add_argument("--out", help="output folder (default ./runs)")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoints")
    ap.add_argument("--n-train", type=int, help="training sequences")
    ap.add_argument("--n-test", type=int, help="test sequences")
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--p-min", type=float, nargs="+", help="depths to train at, e.g. -1 -4")
    ap.add_argument("--layers", type=int, nargs="+", help="MLP layers n of Phi, e.g. 2 3")
    ap.add_argument("--jacobian", choices=["crop", "jet", "exact"],
                    help="nested Jacobians, InImNet(closure=) (default crop, as the paper)")
    ap.add_argument("--dataset", nargs="+", choices=["mnist", "balls"],
                    help="extrapolation / latent-ode-baseline: which tasks")
    ap.add_argument("--frames-per-step", type=int,
                    help="train each step on K random frames per sequence (default all)")
    ap.add_argument("--max-batches", type=int, help="at most this many batches per epoch")
    ap.add_argument("--eval-every", type=int,
                    help="the test MSE every K epochs into the history (rotating MNIST and "
                         "its baseline: default 5; bouncing balls and its baseline: only at "
                         "the end by default)")
    ap.add_argument("--mat", help="path to the original rot-mnist-3s.mat (rotating MNIST)")
    ap.add_argument("--cache-dir", help="data cache (default $INVIMBED_DATA or "
                                        "~/.cache/invimbed/data)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads")
    ap.add_argument("--no-figures", dest="figures", action="store_false",
                    help="draw no figures (and need no matplotlib)")
    ap.add_argument("--mask", choices=["held-out", "notebook"],
                    help="rotating MNIST: the training mask; held-out (default: the 5th frame "
                         "and 3 random frames per sequence out of the loss) or notebook (the "
                         "paper's published notebook's effective protocol: every frame in "
                         "the loss)")
    ap.add_argument("--budget-s", type=float,
                    help="start no epoch that would end (at the pace of the last one) "
                         "more than this many seconds after the command began; each run is "
                         "then evaluated at the epoch it reached and results.json written "
                         "(--resume continues it)")
    ap.add_argument("--train-s", type=float,
                    help="stop training after the epoch in which a run's summed training "
                         "seconds (resumed epochs included) reach this: the same wall time "
                         "as another run")
    ap.add_argument("--samples-from", metavar="CHECKPOINT",
                    help="train nothing: draw the samples at every depth (the paper's "
                         "Figure 4) of this run's checkpoint.pt (or its folder) to "
                         "--out (default: beside the checkpoint)")
    ap.add_argument("--progress", dest="progress", action="store_true", default=None,
                    help="always show progress bars (default: only on a terminal)")
    return ap


def _int_depths(values):
    return None if values is None else [int(v) if float(v).is_integer() else v for v in values]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m invimbed.experiments NAME [options]`` and print its summary.

    Before anything runs, an unusable option (``--epochs 0``, ``--lr -1``, a missing
    ``--mat`` file, a ``--device`` this machine lacks) ends it with argparse's one-line
    error and exit status 2, and a missing dependency (PyTorch, tqdm, torchdiffeq,
    matplotlib unless ``--no-figures``, mlxtend) with its message and exit status 1. A
    data file that cannot be read, or data with a NaN or an infinity, ends it with exit
    status 1 and a message naming the file.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every run finished.
    """
    ap = parser()
    args = ap.parse_args(argv)
    kw = vars(args)
    name = kw.pop("name")
    kw["p_min"] = _int_depths(kw["p_min"])
    samples_from = kw.pop("samples_from")
    if samples_from is not None:
        from ._latent import depth_samples_figure

        out = None
        if kw["out"]:
            out = make_folder(Path(kw["out"]))
        try:
            png = depth_samples_figure(samples_from, out, cache_dir=kw["cache_dir"],
                                       device=kw["device"] or "cpu")
        except ValueError as exc:
            ap.error(str(exc))
        print(png)
        return 0
    opts = Options.from_kwargs(**kw)
    try:
        check_options(opts, cli=True)
    except ValueError as exc:
        ap.error(str(exc))
    try:
        check_requirements(name, opts, cli=True)
    except ImportError as exc:
        ap.exit(1, f"{ap.prog}: error: {exc}\n")
    try:
        check_device(opts.device, cli=True)
    except ValueError as exc:
        ap.error(str(exc))
    try:
        doc = run(name, **kw)
    except DataError as exc:
        ap.exit(1, f"{ap.prog}: error: {exc}\n")
    except FolderError as exc:
        ap.error(str(exc))
    if name == "paper-runs":
        from .paper_runs import summary_lines

        print(f"== {name}")
        print("\n".join(summary_lines(doc)))
        return 0
    docs = doc if "summary" not in doc else {name: doc}
    for key, d in docs.items():
        print(f"== {d['experiment']}")
        for row in d["summary"]:
            print(f"  {row['variant']:<22} MSE {row['mse_mean']:.5f} +- {row['mse_std']:.5f} "
                  f"({len(row['seeds'])} seed(s)), {row['time_per_epoch_mean']:.2f} s/epoch")
        if "extrapolation" in d:
            e = d["extrapolation"]
            print("  MSE (all frames) by depth: " + json.dumps(
                {f"{p:g}": round(v, 5) for p, v in zip(e["depths"], e["mse_all_frames"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
