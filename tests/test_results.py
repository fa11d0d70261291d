"""The result family: one base (status, message, warnings, success), a subclass per
solver family, each built once; the deprecated aliases of `Status`; warnings in
``warnings``, not in the message (docs/results-and-status.md)."""

from __future__ import annotations

import ast
import functools
import pathlib
import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeResult

import invimbed
from invimbed import (Constant, ControlResult, FeedbackResult, FitResult, ImbeddingResult,
                      OCPResult, Result, Status, SolverWarning)
from invimbed._core.results.status import status_table

ROOT = pathlib.Path(invimbed.__file__).parent


def _lq():
    return invimbed.BolzaProblem(
        lambda t, z, u: u, lambda t, z, u: 0.5 * (u[:, 0] ** 2 + z[:, 0] ** 2), q=1.0,
        vectorized=True, autonomous=True)


def _fit():
    depths = np.array([-1.0, -0.5])
    return invimbed.fit_endpoint_dynamics(lambda t, z, w: w[0] * z, [0.0], [1.0], depths,
                                          np.exp(0.5 * -depths)[:, None],
                                          optimizer="L-BFGS-B", epochs=50)


#: Every public solver: its result class, and the fields users read (the names of the
#: scipy OptimizeResult the optimisers returned before, all kept).
SOLVERS = {
    "solve_imbedding": (lambda: invimbed.solve_imbedding(_lq(), [1.0], [0.0, 0.5],
                                                        control=Constant([0.0])),
                        ImbeddingResult, ("z", "value", "adjoint", "param_grad", "depth_grad",
                                          "nfev", "error_estimate", "converged", "order")),
    "solve_adjoint": (lambda: invimbed.solve_adjoint(_lq(), [1.0], [0.0, 0.5],
                                                    control=Constant([0.0])),
                      ImbeddingResult, ("z", "value", "adjoint", "nsteps", "strategy")),
    "solve_optimal": (lambda: invimbed.solve_optimal(_lq(), [1.0], [0.0, 0.5], n_controls=1),
                      FeedbackResult, ("z", "value", "feedback", "feedback_jacobian", "policy",
                                       "linear_quadratic", "optimality_error")),
    "solve_ocp": (lambda: invimbed.solve_ocp(_lq(), [1.0], p=0.0, intervals=4, n_controls=1,
                                             solver="slsqp"),
                  OCPResult, ("x", "fun", "nit", "nfev", "nsolve", "times", "states",
                              "controls", "control", "horizon", "p", "defects", "trajectory",
                              "kkt", "constraint_violation", "violations", "solver",
                              "solver_status", "solver_message")),
    "optimize_control": (lambda: invimbed.optimize_control(_lq(), [1.0], Constant([0.0]),
                                                           p=0.0, trajectory_points=5),
                         ControlResult, ("x", "fun", "jac", "nit", "nfev", "solver_status",
                                         "control", "p", "gradient", "jac_exact",
                                         "gradient_exact", "gradient_error", "nsolve",
                                         "nfev_solver", "trajectory")),
    "fit_endpoint_dynamics": (_fit, FitResult, ("x", "fun", "jac", "history", "nit",
                                                "n_sweeps", "nfev", "solver_status",
                                                "problem", "control")),
}


@pytest.fixture(scope="module")
def results():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)    # no field set after building
        return {name: make() for name, (make, _, _) in SOLVERS.items()}


@pytest.mark.parametrize("name", list(SOLVERS))
def test_every_solver_returns_its_family_with_the_base_fields(results, name):
    _, cls, fields = SOLVERS[name]
    res = results[name]
    assert type(res) is cls and isinstance(res, Result) and isinstance(res, OptimizeResult)
    assert isinstance(res.status, Status) and res.status in cls.STATUS_CODES
    assert res.success is True and res.success == res.status.success
    assert isinstance(res.message, str) and res.message
    assert isinstance(res.warnings, list)
    for key in fields + ("status", "message", "warnings", "success"):    # old names kept
        assert key in res, key
        assert res[key] is getattr(res, key)                    # key and attribute access
    text = repr(res)
    assert text.splitlines()[0].strip().startswith("message:") and "success: True" in text


def test_old_access_of_the_optimisers_results_is_kept(results):
    ocp, ctrl, fit = results["solve_ocp"], results["optimize_control"], results["fit_endpoint_dynamics"]
    assert ocp["fun"] == ocp.fun and ocp.x.ndim == 1 and ocp.states.shape == (5, 1)
    assert set(ocp.kkt) == {"stationarity", "complementarity"} and ocp.trajectory.t.ndim == 1
    np.testing.assert_allclose(ctrl.x, ctrl.control.w)
    assert ctrl["jac"].shape == ctrl.x.shape and ctrl.trajectory.z.shape[0] == 5
    assert round(float(fit.x[0]), 4) == 0.5 and fit.history.ndim == 1
    assert dict(ocp).keys() == ocp.keys() and OptimizeResult(ocp).fun == ocp.fun


def test_a_family_refuses_an_undeclared_field_and_setting_one_is_deprecated(results):
    ocp = results["solve_ocp"]
    with pytest.raises(TypeError, match="OCPResult has no field 'funn'; its fields are "):
        OCPResult(funn=1.0)
    with pytest.warns(DeprecationWarning, match="setting a field of an OCPResult"):
        ocp["message"] = ocp.message
    with pytest.raises(AttributeError, match="did you mean 'fun'"):
        ocp.funn
    # optimize_control's fields are scipy's, which depend on the method: open
    assert ControlResult(hess_inv=None).hess_inv is None


def test_each_family_has_documented_status_codes():
    docs = (ROOT.parent / "docs" / "results-and-status.md").read_text()
    for cls in (ImbeddingResult, FeedbackResult, OCPResult, ControlResult, FitResult):
        assert cls.STATUS_CODES and all(isinstance(k, Status) for k in cls.STATUS_CODES)
        assert cls.__name__ in docs
        for code in cls.STATUS_CODES:
            assert cls.STATUS_CODES[code] in docs, (cls.__name__, code)


def test_deprecated_aliases_of_status_warn_and_keep_their_values():
    with pytest.warns(DeprecationWarning, match="STATUS is deprecated: use invimbed.Status"):
        table = invimbed.STATUS
    assert table == {int(s): s.message for s in Status} == status_table()
    with pytest.warns(DeprecationWarning, match="OCP_STATUS is deprecated"):
        ocp = invimbed.OCP_STATUS
    assert ocp == {int(k): v for k, v in OCPResult.STATUS_CODES.items()}
    assert set(ocp) == {0, -1, -2, -4} and ocp[0].startswith("optimal")
    with pytest.warns(DeprecationWarning):
        from invimbed import STATUS  # noqa: F401
    from invimbed._control.ocp import solve
    from invimbed._core.results import results, status
    for module, name in ((solve, "OCP_STATUS"), (results, "STATUS"), (status, "STATUS")):
        with pytest.warns(DeprecationWarning):
            getattr(module, name)
    assert "STATUS" in dir(invimbed) and "STATUS" not in invimbed.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec("from invimbed import *", {})     # a star import warns of nothing


def test_warnings_are_in_warnings_not_in_the_message():
    """A float32 dynamics: its `low_precision` warning was appended to the message
    (" Note: ..."), and is now in `warnings` only; `optimize_control`'s notes likewise."""
    pb = invimbed.BolzaProblem(lambda t, z, u: (u - z).astype(np.float32),
                               lambda t, z, u: 0.5 * (u[:, 0] ** 2 + z[:, 0] ** 2),
                               q=1.0, vectorized=True)
    res = invimbed.solve_adjoint(pb, [1.0], [0.0], control=Constant([0.0]))
    low = [w for w in res.warnings if w.code == "low_precision"]
    assert low and isinstance(low[0], SolverWarning)
    assert low[0].message not in res.message and "Note:" not in res.message
    ctrl = invimbed.optimize_control(_lq(), [1.0], Constant([0.0]), p=0.0, order=2,
                                     trajectory_points=3)
    assert any("applies to gradient='imbedding' only" in w for w in ctrl.warnings)
    assert "Note:" not in ctrl.message and "gradient='imbedding'" not in ctrl.message


# -- built once: the AST of the package -------------------------------------------------
RESULT_CLASSES = {"ImbeddingResult", "FeedbackResult", "OCPResult", "ControlResult",
                  "FitResult"}
BUILDERS = {"sweep_result", "feedback_result"} | RESULT_CLASSES


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


@functools.lru_cache(maxsize=None)
def _package() -> tuple:
    """``(path, syntax tree)`` of every module of the package, parsed once."""
    return tuple((path.relative_to(ROOT).as_posix(), ast.parse(path.read_text()))
                 for path in sorted(ROOT.rglob("*.py")))


def test_no_set_fields_remains_and_no_result_is_edited_after_construction():
    edits, named = [], []
    for rel, tree in _package():
        everything = list(ast.walk(tree))
        for node in everything:
            if isinstance(node, (ast.Name, ast.Attribute)) and "set_fields" in (
                    getattr(node, "id", "") or getattr(node, "attr", "")):
                named.append(rel)
        # a function can build a result only in a module that builds one: the others
        # are not walked function by function
        builds = any(isinstance(n, ast.Assign) and _called(n.value) in BUILDERS
                     for n in everything)
        for fn in (n for n in everything if builds and isinstance(n, (ast.FunctionDef,
                                                                      ast.Module))):
            nodes = list(ast.walk(fn))
            built = {t.id for n in nodes if isinstance(n, ast.Assign)
                     and _called(n.value) in BUILDERS for t in n.targets
                     if isinstance(t, ast.Name)}
            for n in nodes if built else ():
                targets = (n.targets if isinstance(n, ast.Assign) else [n.target]
                           if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
                for t in targets:       # res[k] = ..., res.k = ... of a built result
                    if (isinstance(t, (ast.Subscript, ast.Attribute))
                            and isinstance(t.value, ast.Name) and t.value.id in built):
                        edits.append((rel, n.lineno))
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and isinstance(n.func.value, ast.Name) and n.func.value.id in built
                        and n.func.attr in ("update", "setdefault", "pop", "__setitem__")):
                    edits.append((rel, n.lineno))
        for n in everything:            # around a result's guard, outside its own module
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == "dict"
                    and n.func.attr in ("__setitem__", "pop", "update")
                    and not rel.startswith("_core/results/")):
                edits.append((rel, n.lineno))
    assert not named and not edits, (named, edits)


def test_each_result_class_is_built_in_one_function():
    """The sweep family through its builders (`sweep_result`, `feedback_result`), the
    optimisers' in the one function that makes each."""
    where: dict[str, set] = {}
    for rel, tree in _package():
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for n in ast.walk(fn):
                name = _called(n)
                if name in BUILDERS - {"sweep_result", "feedback_result"}:
                    where.setdefault(name, set()).add((rel, fn.name))
    assert where == {
        "ImbeddingResult": {("_core/results/results.py", "_built")},
        "OCPResult": {("_control/ocp/solve.py", "solve")},
        "ControlResult": {("_control/optimize.py", "optimize_control")},
        "FitResult": {("_learning/training.py", "_result")},
    }, where
