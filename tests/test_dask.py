"""invimbed.dask.solve_batch on a local Dask cluster (two workers, threads).

The rows of a batch are independent, so the chunked solve must return exactly the
numbers of one `solve_imbedding` call on the whole batch, in input order; a chunk that
fails is reported with its rows, and the other chunks' rows are kept.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

import numpy as np
import pytest

import invimbed
import invimbed.dask as idask
from invimbed._core.results.status import status_table
from invimbed import BolzaProblem, Constant, solve_imbedding

# dask and distributed are imported by the fixtures below, where a test needs them, not
# as this module is collected: every xdist worker collects it, and the import (about
# 1.6 s of CPU) is then paid only by the worker that runs these tests.
pytestmark = pytest.mark.skipif(find_spec("dask") is None or find_spec("distributed") is None,
                                reason="needs dask and distributed: pip install invimbed[dask]")


@pytest.fixture(scope="module")
def distributed():
    return pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def da():
    return pytest.importorskip("dask.array")


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
# depths where jet 1 is within its 10% accuracy rule for every input (deeper, some rows
# of this pendulum are not, and the sweep honestly says so with status -2)
# (to -0.3: at -0.6 three of the 23 inputs are refused by the default rule's ratio test,
# whose series there grows from order to order, and the batch is not a success)
DEPTHS = np.array([0.0, -0.1, -0.2, -0.3])
KW = dict(control=Constant([0.2]), method="rk4", step=0.1)


@pytest.fixture(scope="module")
def client(distributed):
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


def test_dask_arrays_out_and_in(client, da):
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
    assert status == [-3, 0, 0] and not res.success
    assert res.status == -3 and -3 in status_table()     # its own status, not -2
    assert "ArithmeticError" in res.chunk_status[0]["message"]
    assert np.all(np.isnan(res.value[:, :10])) and np.all(np.isfinite(res.value[:, 10:]))


def test_unchecked_chunks_make_an_unchecked_batch(client):
    # closure="stencil" has no error estimate: every chunk, and so the batch, is status 1
    kw = dict(KW, closure="stencil")
    ref = solve_imbedding(PROBLEM, X, DEPTHS, **kw)
    res = idask.solve_batch(PROBLEM, X, DEPTHS, client=client, chunk_size=10, **kw)
    assert ref.status == 1
    assert [c["status"] for c in res.chunk_status] == [1, 1, 1]
    assert (res.success, res.status) == (True, 1)
    np.testing.assert_array_equal(res.z, ref.z)


def test_every_status_has_a_severity():
    assert sorted(idask._SEVERITY) == sorted(invimbed.Status)
    assert idask._SEVERITY[0] is invimbed.Status.RAISED
    assert idask._SEVERITY[-1] is invimbed.Status.SUCCESS


def test_imprecise_chunks_make_an_imprecise_batch(client):
    # float32 dynamics and rtol below their precision: every chunk is status -5
    problem = BolzaProblem(lambda t, z, th: (-z).astype(np.float32),
                           terminal_loss=lambda z: 0.5 * z @ z)
    x = np.linspace(-1.0, 1.0, 6)[:, None]
    res = idask.solve_batch(problem, x, [-0.2], client=client, chunk_size=3, rtol=1e-10,
                            atol=1e-12)
    assert [c["status"] for c in res.chunk_status] == [-5, -5]
    assert (res.success, res.status) == (False, invimbed.Status.IMPRECISE)
    assert "not as rtol" in res.message


def test_tol_results_keep_converged_and_orders(client):
    # chunk 0:5 is near rest and converges at order 1; chunk 5:10 does not converge by
    # max_order=3 from depth -0.5 on: the batch is status -2, as the unchunked call
    x = X[:10].copy()
    x[:5] *= 0.01
    depths = np.array([0.0, -0.5, -1.0])
    kw = dict(KW, tol=1e-3, max_order=3)
    ref = solve_imbedding(PROBLEM, x, depths, **kw)
    res = idask.solve_batch(PROBLEM, x, depths, client=client, chunk_size=5, **kw)
    assert [c["status"] for c in res.chunk_status] == [0, -2]
    assert (res.success, res.status) == (ref.success, ref.status) == (False, -2)
    for k in ("converged", "depth_order", "series_ratio"):
        np.testing.assert_array_equal(res[k], ref[k])
    assert not res.converged[1:, 5:].all() and res.converged[:, :5].all()
    assert res.order == ref.order == 3 and res.orders_run == ref.orders_run == [1, 2, 3]
    assert res.derivatives == ref.derivatives
    assert {w.code for w in res.warnings} == {w.code for w in ref.warnings}
    assert len(res.warnings) == len(set(res.warnings))


def test_batch_of_not_converged_chunks_is_not_converged(client):
    # every chunk honestly misses the tolerance somewhere: the batch is not converged
    # (Status.NOT_CONVERGED, not a failure), and keeps converged, order and the warnings
    x = X[:10]
    depths = np.array([0.0, -0.5, -1.0])
    kw = dict(KW, tol=1e-3, max_order=3)
    ref = solve_imbedding(PROBLEM, x, depths, **kw)
    parts = [solve_imbedding(PROBLEM, x[a:a + 5], depths, **kw) for a in (0, 5)]
    res = idask.solve_batch(PROBLEM, x, depths, client=client, chunk_size=5, **kw)
    assert [c["status"] for c in res.chunk_status] == [p.status for p in parts] == [-2, -2]
    assert res.status is invimbed.Status.NOT_CONVERGED and not res.success
    assert res.status == ref.status
    assert "2 of 2 chunks did not converge" in res.message
    np.testing.assert_array_equal(res.converged, ref.converged)
    np.testing.assert_array_equal(res.depth_order, ref.depth_order)
    assert res.order == ref.order and res.orders_run == ref.orders_run
    assert {w.code for w in res.warnings} == {w.code for p in parts for w in p.warnings}
    assert all(isinstance(c["status"], invimbed.Status) for c in res.chunk_status)


def test_raised_chunk_has_no_order_and_is_not_converged(client):
    def T_picky(z):
        if np.any(z[:, 1] > 3.0):
            raise ArithmeticError("terminal loss undefined above 3")
        return T(z)

    x = X[:10].copy()
    x[7, 1] = 4.0
    problem = BolzaProblem(f, R, T_picky, vectorized=True)
    kw = dict(KW, tol=1e-3)
    ref = solve_imbedding(problem, x[:5], DEPTHS, **kw)     # the chunk that returns
    res = idask.solve_batch(problem, x, DEPTHS, client=client, chunk_size=5, **kw)
    assert [c["status"] for c in res.chunk_status] == [ref.status, -3]
    assert res.status == -3 and not res.success              # the most severe
    np.testing.assert_array_equal(res.converged[:, :5], ref.converged)
    np.testing.assert_array_equal(res.depth_order[:, :5], ref.depth_order)
    assert not res.converged[:, 5:].any() and np.all(res.depth_order[:, 5:] == 0)
    assert res.order == ref.order


def test_invalid_arguments_raise(client):
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, N\)"):
        idask.solve_batch(PROBLEM, X[0], DEPTHS, client=client, **KW)
    with pytest.raises(ValueError, match="`chunk_size` must be a positive integer"):
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, chunk_size=0, **KW)
    with pytest.raises(ValueError, match="`method` must be one of"):   # every chunk raised
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, control=Constant([0.2]),
                          method="nope")


def test_local_scheduler_without_a_client(monkeypatch, distributed):
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


# -- solver="adjoint": the exact fields, rows = (depth, input) pairs -------------------
ADJ_FIELDS = FIELDS + ("nsteps",)
CONTROL = invimbed.PiecewiseConstant([-1.0, -0.6, -0.3, 0.0], [0.2, -0.1, 0.3])
ADJ_KW = dict(control=CONTROL, rtol=1e-7, atol=1e-9)


def assert_same_fields(res, ref):
    """Rows are independent: the chunked solve agrees with the whole one to rounding."""
    for k in ADJ_FIELDS:
        np.testing.assert_allclose(res[k], ref[k], rtol=1e-12, atol=0, err_msg=k)


def test_adjoint_chunks_of_inputs_match_one_solve(client):
    x, depths = X[:8], np.array([0.0, -0.3, -0.7, -1.0])
    ref = invimbed.solve_adjoint(PROBLEM, x, depths, **ADJ_KW)
    # chunk_size counts (depth, input) rows: 8 rows >= 4 depths -> 2 whole inputs a chunk
    res = idask.solve_batch(PROBLEM, x, depths, client=client, solver="adjoint",
                            chunk_size=8, **ADJ_KW)
    assert res.success and res.status == 0 and res.closure == "adjoint"
    assert [(c["start"], c["stop"], c["depth_start"], c["depth_stop"])
            for c in res.chunk_status] == [(0, 2, 0, 4), (2, 4, 0, 4), (4, 6, 0, 4), (6, 8, 0, 4)]
    assert_same_fields(res, ref)
    assert res.error_estimate is None and res.strategy == "ensemble" and res.warnings == []
    assert res.nfev == sum(c["nfev"] for c in res.chunk_status)
    np.testing.assert_array_equal(res.depths, depths)


def test_adjoint_single_input_is_cut_along_its_depths(client, da):
    depths = np.linspace(-1.0, 0.0, 7)          # ascending: the user's order is kept
    x = X[3:4]
    ref = invimbed.solve_adjoint(PROBLEM, x, depths, **ADJ_KW)
    res = idask.solve_batch(PROBLEM, x, depths, client=client, solver="adjoint",
                            chunk_size=2, **ADJ_KW)
    assert res.success
    assert [(c["start"], c["stop"], c["depth_start"], c["depth_stop"])
            for c in res.chunk_status] == [(0, 1, 0, 2), (0, 1, 2, 4), (0, 1, 4, 6), (0, 1, 6, 7)]
    assert_same_fields(res, ref)
    lazy = idask.solve_batch(PROBLEM, x, depths, client=client, solver="adjoint",
                             chunk_size=3, as_dask=True, **ADJ_KW)
    assert isinstance(lazy.value, da.Array) and lazy.value.chunks == ((3, 3, 1), (1,))
    np.testing.assert_allclose(lazy.adjoint.compute(), ref.adjoint, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(lazy.nsteps.compute(), ref.nsteps)


def test_adjoint_default_chunks_follow_the_rule(client):
    one = idask.solve_batch(PROBLEM, X[:1], np.linspace(0.0, -1.0, 8), client=client,
                            solver="adjoint", **ADJ_KW)
    # 8 rows, two threads: chunk_size 1 < 8 depths -> one depth a chunk
    assert [(c["depth_start"], c["depth_stop"]) for c in one.chunk_status] == [
        (i, i + 1) for i in range(8)]
    many = idask.solve_batch(PROBLEM, X[:16], [0.0, -0.5], client=client, solver="adjoint",
                             **ADJ_KW)
    # 32 rows: chunk_size 4 >= 2 depths -> 2 whole inputs a chunk
    assert [(c["start"], c["stop"]) for c in many.chunk_status] == [
        (a, a + 2) for a in range(0, 16, 2)]
    assert all(c["depth_start"] == 0 and c["depth_stop"] == 2 for c in many.chunk_status)


def test_adjoint_failing_rows_are_reported_with_their_chunk(client):
    x, depths = X[:8].copy(), np.array([-0.25, -0.5, -1.0])
    x[5, 0] = 8.0                               # its rows are NaN: rows 4:6 fail
    problem = BolzaProblem(f_guarded, R, T, vectorized=True)
    res = idask.solve_batch(problem, x, depths, client=client, solver="adjoint",
                            chunk_size=6, **ADJ_KW)
    assert not res.success and res.status == -1
    bad = [c for c in res.chunk_status if not c["success"]]
    assert [(c["start"], c["stop"]) for c in bad] == [(4, 6)]
    assert "input x[5]" in bad[0]["message"]    # numbered as in the whole batch
    assert "rows 4:6, depths 0:3" in res.message and "input x[5]" in res.message
    assert np.all(np.isnan(res.value[:, 5])) and np.all(np.isnan(res.z[:, 5]))
    keep = np.r_[0:5, 6:8]                      # x[4] too: rows are independent
    ref = invimbed.solve_adjoint(problem, x[keep], depths, **ADJ_KW)
    assert ref.success
    for k in ADJ_FIELDS:
        np.testing.assert_allclose(res[k][:, keep], ref[k], rtol=1e-12, atol=0, err_msg=k)


def test_adjoint_failing_depths_are_reported_with_their_chunk(client):
    def f_shallow(t, z, th):
        """NaN below t = -0.8: the deeper depths fail."""
        out = f(t, z, th)
        out[np.broadcast_to(np.asarray(t) < -0.8, out.shape[:1])] = np.nan
        return out

    problem = BolzaProblem(f_shallow, R, T, vectorized=True)
    depths = np.array([0.0, -0.2, -0.4, -0.6, -0.9, -1.0])
    res = idask.solve_batch(problem, X[2:3], depths, client=client, solver="adjoint",
                            chunk_size=2, **ADJ_KW)
    assert [c["success"] for c in res.chunk_status] == [True, True, False]
    assert "rows 0:1, depths 4:6" in res.message and "depth p = -0.9" in res.message
    assert np.all(np.isnan(res.value[4:])) and np.all(np.isfinite(res.value[:4]))
    ref = invimbed.solve_adjoint(problem, X[2:3], depths[:4], **ADJ_KW)
    np.testing.assert_allclose(res.depth_grad[:4], ref.depth_grad, rtol=1e-12, atol=0)


def test_solver_and_its_keywords_are_checked_before_any_work(client):
    with pytest.raises(ValueError, match="`solver` must be one of 'imbedding', 'adjoint', "
                                         "but got 'exact'"):
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, solver="exact", **KW)
    with pytest.raises(TypeError, match="'step'.* solve_adjoint does not take"):
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, solver="adjoint", **KW)
    with pytest.raises(TypeError, match="'strategy'.* solve_imbedding does not"):
        idask.solve_batch(PROBLEM, X, DEPTHS, client=client, strategy="ensemble",
                          max_steps=10, **KW)
    # a chunk of depths would be monotone on its own: the depths are checked as a whole
    with pytest.raises(ValueError, match="`depths` must be strictly monotone"):
        idask.solve_batch(PROBLEM, X[:1], [0.0, -1.0, -0.5], client=client,
                          solver="adjoint", chunk_size=1, **ADJ_KW)
