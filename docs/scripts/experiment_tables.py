"""Markdown tables of finished experiment runs, for docs/experiments.md.

    python docs/scripts/experiment_tables.py RUNS_DIR

reads every ``RUNS_DIR/EXPERIMENT/VARIANT/seed-S/result.json`` written by
``python -m invimbed.experiments`` and prints, per experiment and variant: the seeds, the
epochs and Adam steps, the scored test MSE (rotating MNIST: the held-out 5th frame;
bouncing balls: all frames) as mean +- std over the seeds (``ddof=0``), the test MSE over
all frames, and the median wall time per epoch (the median is robust to an epoch that
was slowed or paused by other work on the machine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def rows(root: Path) -> list[dict]:
    out = []
    for exp_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for res in sorted(exp_dir.glob("**/seed-*/result.json")):
            r = json.loads(res.read_text())
            out.append({"experiment": exp_dir.name, "variant": str(res.parent.parent.relative_to(exp_dir)),
                        "seed": r["seed"], "mse": r["mse"],
                        "mse_all": float(np.mean(r["test"]["per_frame"])),
                        "epochs": len(r["history"]["loss"]),
                        "steps": len(r["history"]["loss"]) * r["history"]["batches_per_epoch"],
                        "median_epoch_s": float(np.median(r["history"]["epoch_time"])),
                        "loss_first": r["history"]["loss"][0], "loss_last": r["history"]["loss"][-1],
                        "config": r["config"], "extra": r.get("extra") or {}})
    return out


def table(runs: list[dict]) -> str:
    lines = ["| experiment | variant | seeds | epochs (Adam steps) | scored MSE, mean +- std "
             "| MSE, all frames | training loss first -> last epoch | median s/epoch |",
             "|---|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r["experiment"], r["variant"]) for r in runs))
    for exp, var in keys:
        rs = [r for r in runs if (r["experiment"], r["variant"]) == (exp, var)]
        mse = np.array([r["mse"] for r in rs])
        every = np.array([r["mse_all"] for r in rs])
        lines.append(
            f"| {exp} | {var} | {', '.join(str(r['seed']) for r in rs)} "
            f"| {rs[0]['epochs']} ({rs[0]['steps']}) | {mse.mean():.4f} +- {mse.std():.4f} "
            f"| {every.mean():.4f} | {np.mean([r['loss_first'] for r in rs]):.4f} -> "
            f"{np.mean([r['loss_last'] for r in rs]):.4f} "
            f"| {np.median([r['median_epoch_s'] for r in rs]):.1f} |")
    return "\n".join(lines)


def extrapolation(runs: list[dict]) -> str:
    lines = []
    for r in runs:
        if "per_depth_frame" not in r["extra"]:
            continue
        depths = r["extra"]["depths"]
        per = np.array(r["extra"]["per_depth_frame"])     # (depths, frames)
        lines.append(f"{r['variant']} seed {r['seed']}: " + ", ".join(
            f"p={d:g}: {m:.4f}" for d, m in zip(depths, per.mean(axis=1))))
    return "\n".join(lines)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs")
    runs = rows(root)
    print(table(runs))
    ext = extrapolation(runs)
    if ext:
        print("\nMSE over all frames against depth:\n" + ext)


if __name__ == "__main__":
    main()
