"""invimbed.dask.solve_batch on a local Dask cluster (two workers, threads).

The rows of a batch are independent, so the chunked solve must return exactly the
numbers of one `solve_imbedding` call on the whole batch, in input order; a chunk that
fails is reported with its rows, and the other chunks' rows are kept.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import invimbed
from invimbed import BolzaProblem, Constant, solve_imbedding

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import invimbed.dask as idask  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def f(t, z, th):
    return np.stack([z[:, 1], -np.sin(z[:, 0]) - 0.1 * z[:, 1] + th[:, 0]], axis=1)


def R(t, z, th):
    return 0.5 * z[:, 0] ** 2 + 0.05 * th[:, 0] ** 2


def T(z):
    return 0.5 * (z[:, 0] - 1.0) ** 2 + 0.5 * z[:, 1] ** 2


def f_guarded(t, z, th):
    """NaN where |phi| > 5: the rows given such an input make their chunk fail."""
    out = f(t, z, th)
    out[np.abs(z[:, 0]) > 5.0] = np.nan
    return out


PROBLEM = BolzaProblem(f, R, T, vectorized=True)
X = np.random.default_rng(7).normal(size=(23, 2))
DEPTHS = np.array([0.0, -0.25, -0.5, -1.0])
KW = dict(control=Constant([0.2]), method="rk4", step=0.1)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    cl = distributed.Client(cluster)
    yield cl
    cl.close()
    cluster.close()


def test_chunks_reassemble_in_input_order(client):
    ref = solve_imbedding(PROBLEM, X, DEPTHS, **KW)
    res = idask.solve_batch(PROBLEM, X, DEPTHS, client=client, chunk_size=5, **KW)
    assert res.success and res.status == 0
    assert [(c["start"], c["stop"]) for c in res.chunk_status] == [
        (0, 5), (5, 10), (10, 15), (15, 20), (20, 23)]
    for k in FIELDS:
        np.testing.assert_array_equal(res[k], ref[k])
    for k in ref.error_estimate:
        np.testing.assert_array_equal(res.error_estimate[k], ref.error_estimate[k])
    assert res.nfev == 5 * ref.nfev           # each chunk takes the same steps
    np.testing.assert_array_equal(res.depths, DEPTHS)


def test_default_chunking_uses_the_workers(client):
    res = idask.solve_batch(PROBLEM, X, DEPTHS, client=client, **KW)
    assert len(res.chunk_status) == 8          # four per worker thread
    np.testing.assert_array_equal(res.z, solve_imbedding(PROBLEM, X, DEPTHS, **KW).z)


def test_dask_arrays_out_and_in(client):
    ref = solve_imbedding(PROBLEM, X, DEPTHS, **KW)
    res = idask.solve_batch(PROBLEM, X, DEPTHS, client=client, chunk_size=6, as_dask=True, **KW)
    assert isinstance(res.z, da.Array) and res.z.shape == ref.z.shape
    assert res.z.chunks[1] == (6, 6, 6, 5)
    np.testing.assert_array_equal(res.adjoint.compute(), ref.adjoint)
    xd = da.from_array(X, chunks=(4, 2))       # a dask array input is used block by block
    res2 = idask.solve_batch(PROBLEM, xd, DEPTHS, client=client, chunk_size=10, **KW)
    np.testing.assert_array_equal(res2.value, ref.value)


def test_failing_chunk_is_reported_with_its_rows(client):
    x = X.copy()
    x[12, 0] = 8.0                              # rows 10:15 form the failing chunk
    problem = BolzaProblem(f_guarded, R, T, vectorized=True)
    res = idask.solve_batch(problem, x, DEPTHS, client=client, chunk_size=5, **KW)
    assert not res.success and res.status == -1
    bad = [c for c in res.chunk_status if not c["success"]]
    assert [(c["start"], c["stop"]) for c in bad] == [(10, 15)]
    assert "non-finite" in bad[0]["message"]
    assert "rows 10:15" in res.message
    # nothing dropped: the failing chunk's rows are NaN, every other row is the reference
    assert np.all(np.isnan(res.z[1:, 10:15]))
    keep = np.r_[0:10, 15:23]
    ref = solve_imbedding(problem, x[keep], DEPTHS, **KW)
    np.testing.assert_array_equal(res.z[:, keep], ref.z)


def test_exception_in_one_chunk_is_reported(client):
    def T_picky(z):
        if np.any(z[:, 1] > 3.0):
            raise ArithmeticError("terminal loss undefined above 3")
        return T(z)

    x = X.copy()
    x[3, 1] = 4.0
    problem = BolzaProblem(f, R, T_picky, vectorized=True)
    res = idask.solve_batch(problem, x, DEPTHS, client=client, chunk_size=10, **KW)
    status = [c["status"] for c in res.chunk_status]
    assert status == [-2, 0, 0] and not res.success
    assert "ArithmeticError" in res.chunk_status[0]["message"]
    assert np.all(np.isnan(res.value[:, :10])) and np.all(np.isfinite(res.value[:, 10:]))


def test_invalid_arguments_raise(client):
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, N\)"):
        idask.solve_batch(PROBLEM, X[0], DEPTHS, client=client, **KW)
    with pytest.raises(ValueError, match="`chunk_size` must be a positive integer"):
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, chunk_size=0, **KW)
    with pytest.raises(ValueError, match="`method` must be one of"):   # every chunk raised
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, control=Constant([0.2]),
                          method="nope")


def test_local_scheduler_without_a_client(monkeypatch):
    def no_client():
        raise ValueError("No global client found")

    monkeypatch.setattr(distributed, "get_client", no_client)
    res = idask.solve_batch(PROBLEM, X, DEPTHS, client=None, chunk_size=8, **KW)
    np.testing.assert_array_equal(res.z, solve_imbedding(PROBLEM, X, DEPTHS, **KW).z)


def test_missing_dask_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.array", None)
    with pytest.raises(ImportError, match=r"pip install invimbed\[dask\]"):
        idask.solve_batch(PROBLEM, X, DEPTHS, **KW)


def test_module_imports_without_touching_dask():
    import importlib

    assert hasattr(importlib.import_module("invimbed.dask"), "solve_batch")
    assert invimbed.__version__
