"""Training, evaluation, checkpoints and results shared by every experiment.

Layout of a run's output folder ``OUT/NAME/``::

    results.json                 every run: configuration, loss history, time per
                                 epoch, test MSE (per frame, per depth), and a summary
    VARIANT/seed-S/checkpoint.pt torch.save'd state (model, optimiser, scheduler, epoch,
                                 history, RNG), loaded with weights_only=True
    VARIANT/seed-S/result.json   that run's entry of results.json
    *.png                        the figures

``--resume`` continues every run from its checkpoint (a finished run is only
re-evaluated); without it runs start afresh.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ._options import Options, make_folder
from ._tasks import Task

__all__ = ["Options", "evaluate", "resolve", "run_one", "save_json", "train"]


def resolve(paper: dict, quick: dict, opts: Options) -> dict:
    """The configuration: the paper's values, then the quick ones if ``--quick``, then
    every option given explicitly."""
    cfg = dict(paper)
    if opts.quick:
        cfg.update(quick)
    for k, v in asdict(opts).items():
        if v is not None and k in cfg:
            cfg[k] = v
    cfg["quick"] = opts.quick
    cfg["seeds"] = [int(s) for s in cfg["seeds"]]
    return cfg


def device_of(opts: Options) -> torch.device:
    if opts.device:
        return torch.device(opts.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def hardware() -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def save_json(path: Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, path)


def _jsonable(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.detach().cpu().tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean squared error per pixel over the frames in ``mask`` ((B, T) bool)."""
    err = (pred - target).pow(2).flatten(2).mean(-1)          # (B, T)
    if mask is None:
        return err.mean()
    m = mask.to(err.dtype)
    return (err * m).sum() / m.sum().clamp_min(1.0)


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=generator)
    return [perm[i:i + batch_size] for i in range(0, n, batch_size)]


def _frames_for_step(T: int, k: int | None, generator: torch.Generator) -> torch.Tensor:
    if k is None or k >= T:
        return torch.arange(T)
    return torch.sort(torch.randperm(T, generator=generator)[:k]).values


@torch.no_grad()
def objective(model: nn.Module, task: Task, idx: torch.Tensor, device: torch.device,
              batch_size: int, seed: int = 12345) -> float:
    """The training objective on the sequences ``idx``, in training mode (batch
    statistics, dropout with a fixed seed), without updating anything: compared before
    and after training to check that training reduced it."""
    was = model.training
    model.train()
    saved = {n: b.clone() for n, b in model.named_buffers()}
    total, count = 0.0, 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for i in range(0, len(idx), batch_size):
            j = idx[i:i + batch_size]
            mask = task.mask_train[j].to(device) if task.mask_train is not None else None
            pred = model(task.x0_train[j].to(device), task.times.to(device))
            total += float(masked_mse(pred, task.y_train[j].to(device), mask)) * len(j)
            count += len(j)
    for n, b in model.named_buffers():
        b.copy_(saved[n])
    model.train(was)
    return total / max(count, 1)


def train(model: nn.Module, task: Task, cfg: dict, run_dir: Path, *, seed: int,
          resume: bool, device: torch.device, desc: str = "",
          progress: bool | None = None, deadline: float | None = None,
          train_s: float | None = None) -> dict:
    """Adam (``cfg["lr"]``), halving the rate every ``cfg["decay_every"]`` epochs if set,
    minibatches of ``cfg["batch_size"]`` sequences, ``cfg["epochs"]`` epochs; a
    checkpoint after every epoch. Returns the history: ``loss`` (mean training loss per
    epoch), ``epoch_time`` (seconds of training per epoch, evaluation excluded),
    ``objective_before`` / ``objective_after`` (:func:`objective` on a fixed subset).
    With ``cfg["eval_every"] = k``, also the test set's score every ``k`` epochs and at
    the last (:func:`evaluate` at the trained depth, in eval mode, which draws no random
    numbers and so leaves the training unchanged): ``test_epoch`` (1-based epochs),
    ``test_mse`` (the reported number, :meth:`Task.score`) and ``test_mse_all_frames``
    (the mean over every frame). A checkpoint written without them resumes; the epochs
    before it have no test score. With ``deadline`` (a ``time.monotonic()`` value), no
    epoch starts that would end after it at the pace of the last epoch (``--budget-s``);
    with ``train_s``, no epoch starts once the
    summed training seconds of ``history["epoch_time"]``, resumed epochs included, reach
    it (``--train-s``: the same wall time as another run). The run then stops at an epoch
    boundary, with its checkpoint, and ``history["stopped"]`` says why; ``--resume``
    continues it."""
    from tqdm.auto import tqdm

    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / "checkpoint.pt"
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    decay = cfg.get("decay_every")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=decay, gamma=cfg.get("decay", 0.5)) \
        if decay else None
    gen = torch.Generator().manual_seed(seed)
    probe = torch.arange(min(len(task.x0_train), cfg.get("probe", 64)))
    history: dict = {"loss": [], "epoch_time": [], "batches_per_epoch": None}
    start = 0
    if resume and ckpt.exists():
        # on the CPU: the random states must be CPU byte tensors (a checkpoint loaded onto
        # CUDA could not resume); the model's and the optimiser's load_state_dict copy
        # their tensors to the parameters' device
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if sched is not None and state.get("scheduler") is not None:
            sched.load_state_dict(state["scheduler"])
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        history = state["history"]
        start = int(state["epoch"])
    else:
        history["objective_before"] = objective(model, task, probe, device, cfg["batch_size"])
    n = len(task.x0_train)
    times = task.times.to(device)
    history.pop("stopped", None)
    for epoch in range(start, cfg["epochs"]):
        last = history["epoch_time"][-1] if history["epoch_time"] else 0.0
        why = ("the time budget (--budget-s) would be spent before another epoch ended"
               if deadline is not None and time.monotonic() + last >= deadline else
               f"the training seconds reached {train_s:g} (--train-s)"
               if train_s is not None and sum(history["epoch_time"]) >= train_s else None)
        if why:
            history["stopped"] = why
            tqdm.write(f"{desc}: {why}; stopped after epoch {epoch} of {cfg['epochs']} "
                       f"(resume with --resume)")
            break
        model.train()
        batches = _batches(n, cfg["batch_size"], gen)
        if cfg.get("max_batches"):
            batches = batches[:cfg["max_batches"]]
        total, count = 0.0, 0
        t0 = time.perf_counter()
        bar = tqdm(batches, desc=f"{desc} epoch {epoch + 1}/{cfg['epochs']}", leave=False,
                   disable=None if progress is None else not progress)
        for j in bar:
            frames = _frames_for_step(len(times), cfg.get("frames_per_step"), gen)
            x0 = task.x0_train[j].to(device)
            y = task.y_train[j][:, frames].to(device)
            mask = task.mask_train[j][:, frames].to(device) if task.mask_train is not None else None
            opt.zero_grad(set_to_none=True)
            loss = masked_mse(model(x0, times[frames]), y, mask)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{desc}: the training loss is {float(loss)} at epoch "
                                         f"{epoch + 1}; lower `--lr`.")
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(j)
            count += len(j)
            bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
        if sched is not None:
            sched.step()
        history["epoch_time"].append(time.perf_counter() - t0)
        history["loss"].append(total / max(count, 1))
        history["batches_per_epoch"] = len(batches)
        scored = _evaluate_epoch(model, task, cfg, history, epoch + 1, device)
        tqdm.write(f"{desc} epoch {epoch + 1}/{cfg['epochs']}: loss {history['loss'][-1]:.5f}, "
                   f"{history['epoch_time'][-1]:.1f} s"
                   + (f", test MSE {history['test_mse'][-1]:.5f}" if scored else ""))
        _save_checkpoint(ckpt, {
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict() if sched is not None else None,
            "epoch": epoch + 1, "history": history, "generator": gen.get_state(),
            "task": task.name, "config": json.loads(json.dumps(cfg, default=_jsonable)),
            "torch_rng": torch.get_rng_state()})
    if "objective_after" not in history or start < len(history["loss"]):
        history["objective_after"] = objective(model, task, probe, device, cfg["batch_size"])
    return history


def _evaluate_epoch(model: nn.Module, task: Task, cfg: dict, history: dict, epoch: int,
                    device: torch.device) -> bool:
    """Append the test score after ``epoch`` (1-based) to ``history`` every
    ``cfg["eval_every"]`` epochs and at the last; whether it did."""
    every = cfg.get("eval_every")
    if not every or (epoch % every and epoch != cfg["epochs"]):
        return False
    per_frame = evaluate(model, task, device, cfg.get("eval_batch_size", cfg["batch_size"]),
                         all_depths=False)["per_frame"]
    history.setdefault("test_epoch", []).append(epoch)
    history.setdefault("test_mse", []).append(task.score(per_frame))
    history.setdefault("test_mse_all_frames", []).append(float(np.mean(per_frame)))
    return True


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, device: torch.device, batch_size: int,
             all_depths: bool = True) -> dict:
    """Test MSE per frame at the trained depth (``per_frame``, ``(T,)``), and at every
    depth for InImNet models (``per_depth_frame``, ``(n_depths, T)``), in eval mode."""
    model.eval()
    times = task.times.to(device)
    deep = all_depths and hasattr(model, "all_depths")
    sums = None
    n = len(task.x0_test)
    for i in range(0, n, batch_size):
        x0 = task.x0_test[i:i + batch_size].to(device)
        y = task.y_test[i:i + batch_size].to(device)
        pred = model.all_depths(x0, times) if deep else model(x0, times)[None]
        err = (pred - y[None]).pow(2).flatten(3).mean(-1).sum(1)   # (n_depths, T)
        sums = err if sums is None else sums + err
    per = (sums / n).cpu().numpy()
    out = {"per_frame": per[-1]}
    if deep:
        out["per_depth_frame"] = per
        out["depths"] = model.depths.cpu().numpy()
    return out


@torch.no_grad()
def predict_samples(model: nn.Module, task: Task, device: torch.device, n: int = 2) -> dict:
    """Ground truth and predictions (every depth if available) of the first ``n`` test
    sequences, as numpy arrays for the figures."""
    model.eval()
    x0, y = task.x0_test[:n].to(device), task.y_test[:n]
    times = task.times.to(device)
    if hasattr(model, "all_depths"):
        pred = model.all_depths(x0, times).cpu().numpy()
        depths = model.depths.cpu().numpy()
    else:
        pred = model(x0, times)[None].cpu().numpy()
        depths = None
    return {"truth": y.numpy(), "pred": pred, "depths": depths}


@dataclass
class RunResult:
    experiment: str
    variant: str
    seed: int
    config: dict
    history: dict
    test: dict
    mse: float
    time_per_epoch: float
    params: int
    extra: dict = field(default_factory=dict)


def run_one(experiment: str, variant: str, seed: int, build: Callable[[], nn.Module],
            task: Task, cfg: dict, out: Path, opts: Options) -> tuple[RunResult, nn.Module]:
    """Seed, build, train (or resume), evaluate, and write ``result.json`` for one run."""
    device = device_of(opts)
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = build().to(device)
    run_dir = out / variant / f"seed-{seed}"
    history = train(model, task, cfg, run_dir, seed=seed, resume=opts.resume, device=device,
                    desc=f"{experiment} {variant} seed {seed}", progress=opts.progress,
                    deadline=opts.deadline, train_s=opts.train_s)
    test = evaluate(model, task, device, cfg.get("eval_batch_size", cfg["batch_size"]))
    times = history["epoch_time"]
    res = RunResult(experiment, variant, seed, {k: v for k, v in cfg.items() if k != "seeds"},
                    history, test, task.score(test["per_frame"]),
                    float(np.mean(times)) if times else math.nan,
                    sum(p.numel() for p in model.parameters()))
    save_json(run_dir / "result.json", asdict(res))
    return res, model


def summarise(results: list[RunResult]) -> list[dict]:
    """Mean and standard deviation over seeds of the MSE and the time per epoch, per
    variant (``std`` is over the seeds, ``ddof=0``; 0 for one seed); ``epochs_done``,
    the epochs each seed trained (fewer than ``epochs`` where ``--budget-s`` cut it),
    and ``train_seconds``, each seed's summed seconds of training."""
    rows = []
    for variant in dict.fromkeys(r.variant for r in results):
        rs = [r for r in results if r.variant == variant]
        mse = np.array([r.mse for r in rs])
        tpe = np.array([r.time_per_epoch for r in rs])
        rows.append({"variant": variant, "seeds": [r.seed for r in rs],
                     "mse_mean": float(mse.mean()), "mse_std": float(mse.std()),
                     "time_per_epoch_mean": float(tpe.mean()),
                     "epochs": rs[0].config["epochs"], "n_train": rs[0].config.get("n_train"),
                     "epochs_done": [len(r.history["loss"]) for r in rs],
                     "train_seconds": [float(np.sum(r.history["epoch_time"])) for r in rs],
                     "params": rs[0].params})
    return rows


def write_results(out: Path, experiment: str, cfg: dict, task_info: dict,
                  results: list[RunResult], extra: dict | None = None) -> dict:
    doc = {"experiment": experiment, "config": cfg, "data": task_info, "hardware": hardware(),
           "summary": summarise(results), "runs": [asdict(r) for r in results]}
    if extra:
        doc.update(extra)
    doc = json.loads(json.dumps(doc, default=_jsonable))     # what results.json holds
    save_json(out / "results.json", doc)
    return doc


def out_dir(opts: Options, name: str) -> Path:
    root = Path(opts.out) if opts.out else Path("runs")
    return make_folder(root / name)
