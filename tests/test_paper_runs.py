"""The paper's protocol as run by ``invimbed.experiments``: the published notebook's
training mask against ours, the time budgets that cut a run at an epoch boundary (and
its resumption, which must continue the uncut run exactly), the ``paper-runs`` driver
at the smoke sizes, and the samples-at-each-depth figure from a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("torchdiffeq")
pytest.importorskip("matplotlib")

from invimbed import data  # noqa: E402
from invimbed.experiments import _models as m  # noqa: E402
from invimbed.experiments import _runner  # noqa: E402
from invimbed.experiments.__main__ import main  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("data-cache"))


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# -- the two masks -------------------------------------------------------------------------
def test_notebook_mask_keeps_every_frame_the_held_out_one_does_not():
    held = data.training_mask(50, 16, seed=1)
    nb = data.training_mask(50, 16, seed=1, protocol="notebook")
    assert nb.dtype == bool and nb.shape == held.shape and nb.all()
    assert not held[:, data.HELD_OUT_FRAME].any()
    assert (held.sum(axis=1) == 12).all()
    with pytest.raises(ValueError, match="`protocol` must be one of 'held-out', 'notebook'"):
        data.training_mask(5, 16, protocol="paper")


def test_the_two_losses_differ_exactly_by_the_fifth_frame():
    """On a tiny model and batch: with no random frames removed, the notebook's loss
    times B T minus ours times B (T - 1) is the sum over the batch of the 5th frame's
    per-pixel squared error, computed independently of `masked_mse`."""
    torch.manual_seed(0)
    B, T = 3, 7
    net = m.LatentInImNet(m.mnist_encoder(6, 2), m.mnist_decoder(6, 2), 6, p_min=-2).eval()
    x0, y = torch.rand(B, 1, 28, 28), torch.rand(B, T, 28, 28)
    with torch.no_grad():
        pred = net(x0, torch.linspace(0, 1, T)).double()
    y = y.double()
    held = torch.from_numpy(data.training_mask(B, T, n_random=0))
    nb = torch.from_numpy(data.training_mask(B, T, n_random=0, protocol="notebook"))
    l_held = float(_runner.masked_mse(pred, y, held))
    l_nb = float(_runner.masked_mse(pred, y, nb))
    fifth = float(((pred[:, 4] - y[:, 4]) ** 2).mean(dim=(1, 2)).sum())
    assert l_nb * B * T - l_held * B * (T - 1) == pytest.approx(fifth, rel=1e-12)
    assert fifth > 0 and l_nb != l_held
    # the notebook's loss is the plain mean over every frame
    assert l_nb == pytest.approx(float(((pred - y) ** 2).mean()), rel=1e-12)


def test_mnist_task_and_cli_carry_the_mask(tmp_path, cache):
    from invimbed.experiments._tasks import mnist_task

    task = mnist_task(8, 4, cache_dir=cache, mask="notebook")
    assert bool(task.mask_train.all()) and task.info["mask_protocol"] == "notebook"
    assert task.score_frames == [data.HELD_OUT_FRAME]        # still scored at the 5th frame
    held = mnist_task(8, 4, cache_dir=cache)
    assert not bool(held.mask_train[:, data.HELD_OUT_FRAME].any())
    assert main(["rotating-mnist", "--quick", "--epochs", "1", "--mask", "notebook",
                 "--no-figures", "--out", str(tmp_path), "--cache-dir", cache]) == 0
    doc = json.loads((tmp_path / "rotating-mnist" / "results.json").read_text())
    assert doc["config"]["mask"] == "notebook" and "every frame" in doc["data"]["mask"]
    # the notebook's runs have their own variants: a --resume never crosses protocols
    assert doc["summary"][0]["variant"] == "inimnet-p-2-n2-notebook"
    assert doc["summary"][0]["epochs_done"] == [1]


@pytest.mark.parametrize("args, message", [
    (["--mask", "paper"], "invalid choice: 'paper'"),
    (["--budget-s", "0"], "`--budget-s` must be a finite number of seconds > 0, but got 0.0"),
    (["--train-s", "nan"], "`--train-s` must be a finite number of seconds > 0, but got nan"),
])
def test_bad_budget_and_mask_are_argparse_errors(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["rotating-mnist", "--quick", "--out", str(tmp_path)] + args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# -- budgets: cut at an epoch boundary, resumed exactly -------------------------------------
class _Clock:
    """``time`` for the runner with a ``monotonic`` that advances 1 s per call."""

    def __init__(self):
        import time

        self.perf_counter, self.t = time.perf_counter, -1.0

    def monotonic(self):
        self.t += 1.0
        return self.t


def _tiny(cache):
    from invimbed.experiments import rotating_mnist
    from invimbed.experiments._latent import inimnet_variants, task_for

    opts = _runner.Options(quick=True, cache_dir=cache, epochs=3, eval_every=1)
    cfg = _runner.resolve(rotating_mnist.PAPER, rotating_mnist.QUICK, opts)
    task, enc, dec = task_for("mnist", cfg, opts)
    build = inimnet_variants(cfg, enc, dec)[0][2]

    def fresh():
        torch.manual_seed(0)
        return build()
    return task, cfg, fresh


def test_a_cut_run_resumes_to_the_uncut_run(tmp_path, cache, monkeypatch):
    task, cfg, fresh = _tiny(cache)
    cpu = torch.device("cpu")
    whole = _runner.train(fresh(), task, cfg, tmp_path / "whole", seed=0, resume=False,
                          device=cpu, progress=False)
    monkeypatch.setattr(_runner, "time", _Clock())     # the deadline passes after 2 epochs
    cut = _runner.train(fresh(), task, cfg, tmp_path / "cut", seed=0, resume=False,
                        device=cpu, progress=False, deadline=1.5)
    assert len(cut["loss"]) == 2 and "--budget-s" in cut["stopped"]
    assert torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)["epoch"] == 2
    monkeypatch.undo()
    resumed = _runner.train(fresh(), task, cfg, tmp_path / "cut", seed=0, resume=True,
                            device=cpu, progress=False)
    assert "stopped" not in resumed
    assert resumed["loss"] == whole["loss"] and resumed["test_mse"] == whole["test_mse"]
    # --train-s: no epoch starts once the summed training seconds reach it
    capped = _runner.train(fresh(), task, cfg, tmp_path / "capped", seed=0, resume=False,
                           device=cpu, progress=False, train_s=1e-9)
    assert len(capped["loss"]) == 1 and "--train-s" in capped["stopped"]


# -- the paper-runs driver at the smoke sizes -----------------------------------------------
def test_paper_runs_runs_the_plan_in_order_and_skips_what_is_done(tmp_path, cache, capsys):
    from invimbed.experiments import paper_runs, run

    args = ["paper-runs", "--quick", "--epochs", "1", "--no-figures", "--out", str(tmp_path),
            "--cache-dir", cache, "--budget-s", "3600"]
    assert main(args) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "paper-runs.json").read_text())
    labels = [r["label"] for r in report["runs"]]
    assert labels == [p[0] for p in paper_runs.PLAN]
    for r, (label, *_rest) in zip(report["runs"], paper_runs.PLAN):
        assert r["status"] == "done" and r["epochs_done"] == 1, r
        assert label in out
        results = Path(r["results"])
        assert results.is_file() and results.parent.parent.name == label or \
            results.parent.parent.parent.name == label
        assert list((tmp_path / label).rglob("checkpoint.pt"))
    docs = {r["label"]: json.loads(Path(r["results"]).read_text()) for r in report["runs"]}
    assert docs["mnist-notebook-s0"]["config"]["mask"] == "notebook"
    assert docs["mnist-heldout-s2"]["summary"][0]["seeds"] == [2]
    assert docs["balls-p3"]["config"]["p_min"] == [-3]
    # the baselines ran for the InImNets' summed training seconds
    assert report["runs"][3]["wall_time_of"] == ["mnist-heldout-s1", "mnist-heldout-s2"]
    # a second call finds every run finished and trains nothing
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("checkpoint.pt")}
    again = run("paper-runs", quick=True, epochs=1, figures=False, out=str(tmp_path),
                cache_dir=cache)
    assert [r["status"] for r in again["runs"]] == ["done"] * len(paper_runs.PLAN)
    assert before == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("checkpoint.pt")}
    # a budget too short for any run starts none, and says so
    short = run("paper-runs", quick=True, figures=False, out=str(tmp_path / "short"),
                cache_dir=cache, budget_s=1.0)
    assert [r["status"] for r in short["runs"]] == ["not started"] * len(paper_runs.PLAN)
    with pytest.raises(ValueError, match="paper-runs sets seeds itself"):
        run("paper-runs", quick=True, seeds=[3], out=str(tmp_path))

    # the samples at every depth (Figure 4) from the balls' checkpoint
    ckpt = next((tmp_path / "balls-p3").rglob("checkpoint.pt"))
    assert main(["bouncing-balls", "--samples-from", str(ckpt), "--out", str(tmp_path / "fig"),
                 "--cache-dir", cache]) == 0
    png = Path(capsys.readouterr().out.strip())
    assert png.parent == tmp_path / "fig" and png.name == \
        "samples-inimnet-p-3-n3-seed-0-epoch-1.png"
    from matplotlib.image import imread

    img = imread(png)
    assert img.ndim == 3 and img.shape[0] > 200 and np.ptp(img) > 0


def test_samples_figure_needs_a_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bouncing-balls", "--samples-from", str(tmp_path / "nothing.pt")])
    assert exc.value.code == 2
    assert "`checkpoint` must be a run's checkpoint.pt or its folder" in capsys.readouterr().err
