"""The typed result: declared fields, built once, an undeclared field refused."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import invimbed
from invimbed import Constant, ImbeddingResult, solve_adjoint, solve_imbedding, solve_optimal
from invimbed._core.results.results import (COMMON_FIELDS, DROP, FIELDS, OPTIONAL_FIELDS,
                                            PRIVATE_FIELDS, Draft)


def _lq():
    return invimbed.BolzaProblem(
        lambda t, z, th: -z + th,
        lambda t, z, th: 0.5 * (np.sum(z**2, axis=-1) + np.sum(th**2, axis=-1)),
        lambda z: 0.5 * np.sum(z**2, axis=-1), vectorized=True)


X = np.array([[0.3, -0.2], [0.1, 0.4]])
C = Constant([0.1])
SOLVERS = {
    "imbedding": (lambda P: solve_imbedding(P, X, [0.0, -0.5], control=C),
                  {"param_grad", "converged", "series_ratio", "order", "orders_run",
                   "depth_order", "exact_fallback"}),
    "imbedding tol, fallback": (
        lambda P: solve_imbedding(P, X, [0.0, -0.5], control=C, tol=1e-5, max_order=1,
                                  fallback="adjoint"),
        {"param_grad", "converged", "series_ratio", "order", "orders_run", "depth_order",
         "exact_fallback"}),
    "imbedding dense": (
        lambda P: solve_imbedding(P, X, [0.0, -0.5], control=C, dense_output=True),
        {"param_grad", "converged", "series_ratio", "order", "orders_run", "depth_order",
         "exact_fallback", "sol"}),
    "imbedding stencil": (lambda P: solve_imbedding(P, X, [0.0, -0.5], control=C,
                                                    closure="stencil"),
                          {"param_grad", "converged", "series_ratio", "order", "orders_run",
                           "depth_order", "exact_fallback"}),
    "imbedding numba": (lambda P: solve_imbedding(P, X, [0.0, -0.5], control=C,
                                                  backend="numba", method="rk4", step=0.1),
                        {"param_grad", "converged", "series_ratio", "order", "orders_run",
                         "depth_order", "exact_fallback", "backend"}),
    "adjoint": (lambda P: solve_adjoint(P, X, [0.0, -0.5], control=C),
                {"param_grad", "nsteps", "strategy"}),
    "optimal": (lambda P: solve_optimal(P, X, [0.0, -0.5], n_controls=2),
                {"converged", "series_ratio", "feedback", "feedback_jacobian", "policy",
                 "linear_quadratic", "optimality_error"}),
}


def _compiled_lq():
    """An LQ problem of the same sizes from sympy expressions: the one
    ``python -m invimbed compile`` warms the generated jet code with
    (`invimbed._backends._warm`), so that the suite compiles its code once, in the warm-up,
    not again for this test."""
    pytest.importorskip("numba")
    pytest.importorskip("sympy")
    from invimbed._backends._warm import _sympy_problem

    return _sympy_problem()


@pytest.mark.parametrize("name", list(SOLVERS))
def test_fields_are_the_declared_ones_and_set_only_by_the_builder(name):
    make, optional = SOLVERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)   # no field set after building
        res = make(_compiled_lq() if "numba" in name else _lq())
    assert isinstance(res, ImbeddingResult)
    assert set(res) == set(COMMON_FIELDS) | optional
    assert set(res) <= set(COMMON_FIELDS + OPTIONAL_FIELDS)          # nothing private left
    assert res["z"] is res.z                                           # both accesses


def test_declared_sets_are_disjoint_and_complete():
    assert FIELDS == set(COMMON_FIELDS) | set(OPTIONAL_FIELDS) | set(PRIVATE_FIELDS)
    assert len(FIELDS) == len(COMMON_FIELDS) + len(OPTIONAL_FIELDS) + len(PRIVATE_FIELDS)


def test_an_undeclared_field_is_refused():
    with pytest.raises(TypeError, match=r"ImbeddingResult has no field 'zz'; its fields "
                                        r"are adjoint, .*z$"):
        ImbeddingResult(z=np.zeros(2), zz=1)
    res = solve_adjoint(_lq(), X[0], [-0.5], control=C)
    for setter in (lambda: res.__setitem__("zz", 1), lambda: setattr(res, "zz", 1),
                   lambda: res.update(zz=1), lambda: res.setdefault("zz", 1),
                   lambda: Draft(res).but(zz=1)):
        with pytest.raises(TypeError, match="no field 'zz'"):
            setter()
    assert "zz" not in res


def test_setting_a_field_directly_is_deprecated_and_a_draft_is_never_changed():
    res = solve_adjoint(_lq(), X[0], [-0.5], control=C)
    with pytest.warns(DeprecationWarning, match="setting a field of an ImbeddingResult"):
        res["message"] = "mine"
    assert res.message == "mine"
    draft = Draft(res)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        again = draft.but(message="again", strategy=DROP)
    assert again.message == "again" and "strategy" not in again
    assert draft.message == "mine" and "strategy" in draft        # a new draft, not edited
    for setter in (lambda: draft.__setitem__("message", 1), lambda: setattr(draft, "z", 1)):
        with pytest.raises(TypeError, match="not changed in place"):
            setter()


def test_a_result_survives_pickle_without_warnings():
    res = solve_imbedding(_lq(), X, [0.0, -0.5], control=C)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        back = pickle.loads(pickle.dumps(res))
    assert type(back) is ImbeddingResult and back.keys() == res.keys()
    np.testing.assert_array_equal(back.z, res.z)
    assert back.error_estimate.keys() == res.error_estimate.keys()
