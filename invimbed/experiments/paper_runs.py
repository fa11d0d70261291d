"""``python -m invimbed.experiments paper-runs --budget-s 840 --out DIR``: the paper's
runs that remain, in a fixed order, within a time budget (one GPU session).

The runs (:data:`PLAN`), each in its own folder ``DIR/LABEL/`` with its
``results.json`` and its last ``checkpoint.pt``:

1. ``mnist-notebook-s0``: rotating MNIST, p_min = -4, n = 2, 500 epochs, under the
   published notebook's mask (``--mask notebook``, every frame in the loss), seed 0:
   the paper's effective protocol, beside its 0.0125 +- 0.0004 (Table 1).
2. ``mnist-heldout-s1``, 3. ``mnist-heldout-s2``: the same under our held-out mask,
   seeds 1 and 2 (seed 0 ran on an H100, ``docs/results/``).
4. ``mnist-ode-heldout``: the latent-ODE baseline (``odeint_adjoint``, dopri5) under
   the held-out mask, seed 0, to 500 epochs or to the InImNet's wall time (the mean of
   the summed training seconds of runs 2 and 3).
5. ``balls-p3``: bouncing balls, p_min = -3, n = 3, the full protocol (10,000 training
   sequences, batch 25, 100 epochs = 40,000 steps), seed 0, beside 0.0192 (Figure 4).
6. ``balls-ode``: the latent-ODE baseline on the balls for the wall time of run 5.

Each run gets what is left of ``--budget-s`` (less :data:`RESERVE_S` for its final
evaluation; none starts with less than :data:`MIN_RUN_S` left, a balls run with less
than :data:`MIN_BALLS_S`) and, for runs 4 and 6, the summed training seconds of the
runs it is compared with (``--train-s``); it stops at an epoch boundary
(:func:`invimbed.experiments._runner.train`): its ``results.json`` then holds the
epochs it reached. With ``--resume`` (what the driver always passes), a run
continues from the ``checkpoint.pt`` in its folder, so a folder returned by one session,
copied back into ``DIR``, continues in the next; a run whose ``results.json`` says it
finished is skipped. ``DIR/paper-runs.json`` says what each run reached.

``--quick`` runs the same plan at the smoke sizes (seconds on a CPU; the tests).
Other options given on the command line (``--device``, ``--threads``, ``--cache-dir``,
``--epochs``, ``--no-figures``, ...) apply to every run.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ._options import Options, make_folder
from ._runner import save_json

__all__ = ["MIN_BALLS_S", "MIN_RUN_S", "NAME", "PLAN", "RESERVE_S", "run", "summary_lines"]

NAME = "paper-runs"

#: Seconds kept back from a run's budget for its final evaluation and results (the
#: balls' test set at every depth).
RESERVE_S = 30.0
#: A run is not started with fewer seconds than this left.
MIN_RUN_S = 20.0
#: ... and a bouncing-balls run not with fewer than this: it first generates (or reads)
#: the 10,000 training sequences, about a minute on one core, inside its budget.
MIN_BALLS_S = 180.0

#: ``(label, experiment, options, cap)``; ``cap`` names the runs whose mean summed
#: training seconds bound this run's (the same wall time), or is ``None``.
PLAN = [
    ("mnist-notebook-s0", "rotating-mnist",
     dict(mask="notebook", p_min=[-4], layers=[2], seeds=[0], eval_every=10), None),
    ("mnist-heldout-s1", "rotating-mnist",
     dict(mask="held-out", p_min=[-4], layers=[2], seeds=[1], eval_every=10), None),
    ("mnist-heldout-s2", "rotating-mnist",
     dict(mask="held-out", p_min=[-4], layers=[2], seeds=[2], eval_every=10), None),
    ("mnist-ode-heldout", "latent-ode-baseline",
     dict(dataset=["mnist"], mask="held-out", layers=[2], seeds=[0], eval_every=10),
     ("mnist-heldout-s1", "mnist-heldout-s2")),
    ("balls-p3", "bouncing-balls", dict(p_min=[-3], layers=[3], seeds=[0], eval_every=5),
     None),
    ("balls-ode", "latent-ode-baseline",
     dict(dataset=["balls"], layers=[3], seeds=[0], eval_every=5), ("balls-p3",)),
]


def _results_path(root: Path, label: str, experiment: str, options: dict) -> Path:
    """Where the run ``label`` writes its ``results.json``."""
    if experiment == "latent-ode-baseline":
        return root / label / experiment / options["dataset"][0] / "results.json"
    return root / label / experiment / "results.json"


def _state(path: Path) -> dict | None:
    """What a run's ``results.json`` says: ``epochs``, ``epochs_done``,
    ``train_seconds``, ``mse`` (of its one variant and seed), or ``None``."""
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    hist = [r["history"] for r in doc["runs"]]
    return {"epochs": doc["summary"][0]["epochs"],
            "epochs_done": min(len(h["loss"]) for h in hist),
            "train_seconds": float(sum(sum(h["epoch_time"]) for h in hist) / len(hist)),
            "mse": doc["summary"][0]["mse_mean"], "results": str(path)}


def run(opts: Options) -> dict:
    """Run :data:`PLAN` in order within ``opts.budget_s`` seconds (default: no limit).

    Parameters
    ----------
    opts : Options
        ``out`` (default ``runs``), ``budget_s``, ``quick`` and the options applied to
        every run. ``seeds``, ``p_min``, ``layers``, ``dataset`` and ``mask`` are the
        plan's and may not be given.

    Returns
    -------
    dict
        What ``DIR/paper-runs.json`` holds: per run its ``progress`` (``"done"``,
        ``"cut"`` at ``epochs_done`` of ``epochs``, ``"not started"``), its MSE and
        summed training seconds, and the path of its ``results.json``.

    Raises
    ------
    ValueError
        If an option the plan sets is given.
    """
    from . import run as run_experiment

    fixed = [f for f in ("seeds", "p_min", "layers", "dataset", "mask")
             if getattr(opts, f) is not None]
    if fixed:
        raise ValueError(f"paper-runs sets {', '.join(fixed)} itself (see its PLAN); "
                         f"do not pass {', '.join('`' + f + '`' for f in fixed)}.")
    root = make_folder(Path(opts.out) if opts.out else Path("runs"))
    budget = opts.budget_s
    report: dict = {"budget_s": budget, "runs": []}
    states: dict = {}
    common = {k: v for k, v in asdict(opts).items()
              if v is not None and k not in ("out", "budget_s", "train_s", "resume", "started")}
    for label, experiment, options, cap_from in PLAN:
        path = _results_path(root, label, experiment, options)
        state = _state(path)
        entry = {"label": label, "experiment": experiment, "options": options}
        if state is not None and state["epochs_done"] >= state["epochs"]:
            states[label] = state
            report["runs"].append(dict(entry, progress="done", **state))
            continue
        left = None if budget is None else budget - (time.monotonic() - opts.started) - RESERVE_S
        cap = None
        if cap_from:
            spent = [states[c]["train_seconds"] for c in cap_from if states.get(c)]
            if spent:
                cap = sum(spent) / len(spent)
                entry["wall_time_of"] = list(cap_from)
        least = MIN_BALLS_S if "balls" in label else MIN_RUN_S
        why = ("budget spent" if left is not None and left < least else
               "wall time of " + ", ".join(cap_from) + " reached"
               if cap is not None and state is not None and state["train_seconds"] >= cap
               else None)
        if why:
            states[label] = state
            report["runs"].append(dict(entry, progress="not started" if state is None else "cut",
                                       why=why, **(state or {})))
            continue
        kwargs = dict(common, **options, out=str(root / label), resume=True)
        if left is not None:
            kwargs["budget_s"] = left
        if cap is not None:
            kwargs["train_s"] = cap
        run_experiment(experiment, **kwargs)
        state = _state(path)
        states[label] = state
        report["runs"].append(dict(entry, progress="done" if state["epochs_done"] >= state["epochs"]
                                   else "cut", **state))
        save_json(root / "paper-runs.json", report)
    save_json(root / "paper-runs.json", report)
    return report


def summary_lines(report: dict) -> list[str]:
    """One line per run of :func:`run`'s report, for the command line."""
    lines = []
    for r in report["runs"]:
        if r["progress"] == "not started":
            lines.append(f"  {r['label']:<20} not started ({r['why']})")
            continue
        lines.append(f"  {r['label']:<20} {r['progress']:<5} {r['epochs_done']}/{r['epochs']} "
                     f"epochs, MSE {r['mse']:.5f}, {r['train_seconds']:.1f} s of training")
    return lines

