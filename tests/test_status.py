"""One status vocabulary: `invimbed.Status`, its messages, and every solver's statuses."""

from __future__ import annotations

import ast
import pathlib
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import pytest

import invimbed
from invimbed import (Constant, Status, simulate, solve_adjoint, solve_imbedding,
                      solve_optimal)
from invimbed._core.reference.row_chunks import row_outcome
from invimbed._core.results.status import RowCode, as_status, row_status, status_table

STATUS = status_table()    # {code: message}, the value of the deprecated invimbed.STATUS

ROOT = pathlib.Path(invimbed.__file__).parent


def test_status_table_is_the_enum():
    assert STATUS == {int(s): s.message for s in Status}
    assert sorted(STATUS) == [-5, -4, -3, -2, -1, 0, 1]
    assert (Status.SUCCESS, Status.UNCHECKED, Status.FAILED, Status.NOT_CONVERGED,
            Status.RAISED, Status.STOPPED, Status.IMPRECISE) == (0, 1, -1, -2, -3, -4, -5)
    assert STATUS[-2].startswith("not converged") and STATUS[-3].startswith("raised")
    assert [s.success for s in Status] == [s >= 0 for s in Status]
    assert invimbed._core.results.results.RAISED is Status.RAISED


def test_as_status_names_the_argument():
    assert as_status(-2) is Status.NOT_CONVERGED
    with pytest.raises(ValueError,
                       match=r"`status` must be one of \[-5, -4, -3, -2, -1, 0, 1\].*got 7"):
        as_status(7)


def test_row_codes_map_at_one_boundary():
    assert row_status(np.full((3, 2), RowCode.DONE)) is Status.SUCCESS
    for code in RowCode:
        if code is not RowCode.DONE:
            assert row_status([RowCode.DONE, int(code)]) is Status.FAILED
    # the integrators' and the compiled kernels' plain integers are the table's
    from invimbed._core.results import failures
    assert (failures.DONE, failures.UNDERFLOW, failures.NONFINITE, failures.MAX_STEPS,
            failures.RUNNING) == (0, 1, 2, 3, 4)
    assert len(set(map(int, RowCode))) == len(RowCode)


def _lq():
    return invimbed.BolzaProblem(
        lambda t, z, th: -z + th,
        lambda t, z, th: 0.5 * (np.sum(z**2, axis=-1) + np.sum(th**2, axis=-1)),
        lambda z: 0.5 * np.sum(z**2, axis=-1), vectorized=True)


@pytest.mark.parametrize("make", [
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), tol=1e-6),
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]),
                                 closure="stencil"),
    lambda P, x: solve_imbedding(P, x, [0.0, -3.0], control=Constant([0.1]), max_order=1,
                                 tol=1e-12),
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), tol=1e-9,
                                 max_order=1, fallback="adjoint"),
    lambda P, x: solve_adjoint(P, x, [0.0, -0.5], control=Constant([0.1])),
    lambda P, x: simulate(P, x, lambda t, z: -z, 0.5),
    lambda P, x: solve_optimal(P, x, [0.0, -0.5], n_controls=2, tol=1e-6),
])
def test_every_solver_returns_a_member_of_the_enum(make):
    res = make(_lq(), np.array([[0.3, -0.2], [0.1, 0.4]]))
    assert isinstance(res.status, Status)
    assert res.success == res.status.success


def _float32_lq():
    # the dynamics of `_lq`, rounded to float32 (relative precision 1.2e-7)
    return invimbed.BolzaProblem(
        lambda t, z, th: (-z + th).astype(np.float32),
        lambda t, z, th: 0.5 * (np.sum(z**2, axis=-1) + np.sum(th**2, axis=-1)),
        lambda z: 0.5 * np.sum(z**2, axis=-1), vectorized=True)


@pytest.mark.parametrize("make", [
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-6),
    lambda P, x: solve_imbedding(P, x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-6,
                                 estimate_error=False),
    lambda P, x: solve_adjoint(P, x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-6),
    lambda P, x: solve_adjoint(P, x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-6,
                               strategy="per_depth"),
    lambda P, x: solve_optimal(P, x, [0.0, -0.5], n_controls=1, method="rk4", step=0.05,
                               rtol=1e-6),
])
def test_a_finer_rtol_than_a_float32_function_allows_is_imprecise(make):
    # rtol 1e-6, not finer: the adaptive steps of solve_adjoint chase float32's rounding
    # noise for seconds at 1e-10
    res = make(_float32_lq(), np.array([[0.3, -0.2], [0.1, 0.4]]))
    assert res.status is Status.IMPRECISE and not res.success
    assert res.success == res.status.success
    assert "rtol = 1e-06 is below 1.2e-06" in res.message
    assert "low_precision" in [w.code for w in res.warnings]


def test_dense_output_judges_the_requested_rtol_against_the_precision():
    # rtol 1e-5 is within float32's reach; dense output runs its steps 10x tighter
    # (RK45), below that reach, but the user's rtol is what the precision check judges
    x = np.array([[0.3, -0.2], [0.1, 0.4]])
    res = solve_imbedding(_float32_lq(), x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-5,
                          dense_output=True)
    assert res.status is not Status.IMPRECISE and res.success
    assert "low_precision" in [w.code for w in res.warnings]


def test_the_fallback_repairs_a_float32_problem_at_its_precision():
    # the jet of order 1 does not reach tol=1e-9 at p = -0.5; the exact solve runs at
    # the finest rtol float32 allows (1.2e-6, not 1e-11: finer, its steps chase the
    # rounding noise into max_steps), and the whole result is imprecise, not failed
    x = np.array([[0.3, -0.2], [0.1, 0.4]])
    res = solve_imbedding(_float32_lq(), x, [0.0, -0.5], control=Constant([0.1]), tol=1e-9,
                          max_order=1, fallback="adjoint")
    assert res.status is Status.IMPRECISE and not res.success
    assert res.exact_fallback[1].all()
    ref = solve_adjoint(_lq(), x, [0.0, -0.5], control=Constant([0.1]), rtol=1e-10,
                        atol=1e-12)
    assert ref.success
    np.testing.assert_allclose(res.z, ref.z, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(res.value, ref.value, rtol=1e-5, atol=1e-7)


@lru_cache(maxsize=None)
def _package_nodes() -> tuple:
    """``(path, every node of its syntax tree)`` of each module of the package, parsed
    once for the two tests that read the whole package."""
    return tuple((path, tuple(ast.walk(ast.parse(path.read_text()))))
                 for path in ROOT.rglob("*.py"))


def test_no_decision_on_message_text():
    # a status or a structured field decides, never the wording of a message
    bad = []
    for path, nodes in _package_nodes():
        for node in nodes:
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("startswith", "endswith")
                    and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr == "message"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if (isinstance(node, ast.Compare)
                    and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                    and any(isinstance(c, ast.Attribute) and c.attr == "message"
                            or isinstance(c, ast.Subscript)
                            and getattr(c.slice, "value", None) == "message"
                            for c in node.comparators)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


def test_the_ensemble_status_is_row_status_of_each_rows_last_code():
    # rows (depth, input) of 2 depths x 2 inputs: the forward code, then the backward
    # code where the forward pass reached q; `row_status` alone gives the status
    setup = SimpleNamespace(x=np.zeros((2, 1)), batched=True,
                            depths_desc=np.array([0.0, -1.0]))
    D, U, N, M = (int(c) for c in (RowCode.DONE, RowCode.UNDERFLOW, RowCode.NONFINITE,
                                   RowCode.MAX_STEPS))
    t, hl = np.array([0.1, 0.2, 0.3, 0.4]), np.zeros(4)
    for fwd, bwd in [([D, D, D, D], [D, D, D, D]), ([D, N, D, D], [D, D, D, D]),
                     ([D, D, D, D], [D, D, M, D]), ([U, D, D, D], [D, D, D, U])]:
        fwd, bwd = np.array(fwd), np.array(bwd)
        status, message = row_outcome(setup, (fwd, bwd, t, hl), max_steps=7)
        assert status is row_status(np.where(fwd == D, bwd, fwd))
        assert (message is None) == (status is Status.SUCCESS)
    # the first failed row is named, with the pass and the reason of its own code
    status, message = row_outcome(setup, (np.array([D, D, D, M]), np.array([D, U, D, D]),
                                          t, hl), max_steps=7)
    assert status is Status.FAILED
    assert message.startswith("The backward adjoint solve failed for depth p = 0 and "
                              "input x[1] at t = 0.2: the step size fell below")
    assert "2 of 4 (depth, input) rows failed" in message


def _ocp_lq():
    return invimbed.BolzaProblem(
        lambda t, z, u: u, lambda t, z, u: 0.5 * (u[:, 0]**2 + z[:, 0]**2), q=1.0,
        vectorized=True, autonomous=True)


@pytest.mark.parametrize("make", [
    lambda: invimbed.solve_ocp(_ocp_lq(), [1.0], p=0.0, intervals=6, n_controls=1,
                               solver="slsqp"),
    lambda: invimbed.solve_ocp(_ocp_lq(), [1.0], p=0.0, intervals=6, n_controls=1,
                               solver="slsqp", max_iter=1),
    lambda: invimbed.solve_ocp(_ocp_lq(), [1.0], p=0.0, intervals=6, n_controls=1,
                               solver="slsqp", callback=lambda *a: True),
    lambda: invimbed.optimize_control(_ocp_lq(), [1.0], Constant([0.0]), p=0.0),
    lambda: invimbed.optimize_control(_ocp_lq(), [1.0], Constant([0.0]), p=0.0,
                                      options={"maxiter": 1}),
    lambda: invimbed.optimize_control(_ocp_lq(), [1.0], Constant([0.0]), p=0.0,
                                      callback=lambda info: True),
    lambda: _fit(optimizer="adam", epochs=3),
    lambda: _fit(optimizer="L-BFGS-B", epochs=1),
    lambda: _fit(optimizer="adam", epochs=3, callback=lambda info: True),
], ids=["ocp", "ocp_max_iter", "ocp_callback", "optimize", "optimize_maxiter",
        "optimize_callback", "fit", "fit_lbfgsb_epochs", "fit_callback"])
def test_every_optimiser_returns_a_member_with_success_its_sign(make):
    res = make()
    assert isinstance(res.status, Status)
    assert res.success == (res.status >= 0) == res.status.success
    # the optimiser's own code, where one ran (scipy, IPOPT; None for adam)
    assert res.solver_status is None or isinstance(res.solver_status, (int, np.integer))


def _fit(**kw):
    depths = np.array([-1.0, -0.5])
    return invimbed.fit_endpoint_dynamics(lambda t, z, w: w[0] * z, [0.0], [1.0], depths,
                                          np.exp(0.5 * -depths)[:, None], learning_rate=0.1,
                                          **kw)


def test_fit_statuses_are_the_enums():
    assert _fit(optimizer="adam", epochs=3).status is Status.SUCCESS
    stop = _fit(optimizer="adam", epochs=3, callback=lambda info: True)
    assert stop.status is Status.STOPPED and stop.nit == 1
    short = _fit(optimizer="L-BFGS-B", epochs=1)
    assert short.status is Status.NOT_CONVERGED and short.solver_status == 1   # scipy's


def test_optimiser_statuses_are_the_enums():
    # a callback stop and an iteration limit, each with the enum's code and sign
    stop = invimbed.solve_ocp(_ocp_lq(), [1.0], p=0.0, intervals=6, n_controls=1,
                              solver="slsqp", callback=lambda *a: True)
    assert stop.status is Status.STOPPED and "`callback` stopped" in stop.message
    short = invimbed.solve_ocp(_ocp_lq(), [1.0], p=0.0, intervals=6, n_controls=1,
                               solver="slsqp", max_iter=1)
    assert short.status is Status.NOT_CONVERGED and not short.success
    limit = invimbed.optimize_control(_ocp_lq(), [1.0], Constant([0.0]), p=0.0,
                                      options={"maxiter": 1})
    assert limit.status is Status.NOT_CONVERGED and limit.solver_status != 0
    # solve_ocp's codes are the subset of the one enum that it returns
    assert set(invimbed.OCPResult.STATUS_CODES) == {0, -1, -2, -4} <= set(STATUS)
    for code in invimbed.OCPResult.STATUS_CODES:
        assert Status(code).success == (code >= 0)


def test_no_solver_writes_a_status_outside_the_enum():
    # every `status=` keyword and `.status = ` assignment in the package is a Status
    # member, a variable, or a row code of an integrator (RowCode)
    bad = []
    for path, nodes in _package_nodes():
        for node in nodes:
            values = []
            if isinstance(node, ast.keyword) and node.arg == "status":
                values.append(node.value)
            if isinstance(node, ast.Assign):
                values += [node.value for tgt in node.targets
                           if isinstance(tgt, ast.Attribute) and tgt.attr == "status"]
            for v in values:
                if isinstance(v, ast.Constant) or (
                        isinstance(v, ast.UnaryOp) and isinstance(v.operand, ast.Constant)):
                    bad.append(f"{path.relative_to(ROOT)}:{v.lineno}")
    assert not bad, bad
