"""The tableaux and the registry of methods (`invimbed._core.integrators.tableau`,
`invimbed._core.integrators.methods`): order conditions by rooted trees, as scipy's
``test_coefficient_properties`` and diffrax's tableau checks test theirs."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy.integrate import RK23, RK45

from invimbed._core.integrators import ALL_METHODS, FIXED_METHODS, SCIPY_METHODS, method_of
from invimbed._core.integrators.methods import METHODS, integrate
from invimbed._core.integrators.tableau import EMBEDDED, TABLEAUX, ButcherTableau


def rooted_trees(order: int) -> list[tuple]:
    """Every rooted tree with ``order`` nodes, a tree being the sorted tuple of its
    subtrees (the leaf is ``()``)."""
    if order == 1:
        return [()]
    trees = set()
    # the children of the root: a multiset of trees whose orders sum to order - 1
    for parts in _partitions(order - 1):
        for kids in itertools.product(*(rooted_trees(k) for k in parts)):
            trees.add(tuple(sorted(kids)))
    return sorted(trees)


def _partitions(n: int, largest: int | None = None) -> list[tuple[int, ...]]:
    largest = n if largest is None else largest
    if n == 0:
        return [()]
    return [(k,) + rest for k in range(min(n, largest), 0, -1)
            for rest in _partitions(n - k, k)]


def _size(tree: tuple) -> int:
    return 1 + sum(_size(t) for t in tree)


def density(tree: tuple) -> int:
    """gamma(t): |t| times the densities of the subtrees."""
    g = _size(tree)
    for t in tree:
        g *= density(t)
    return g


def stage_weights(tree: tuple, A: np.ndarray) -> np.ndarray:
    """The stage vector of ``tree``: prod over subtrees of ``A @ stage_weights(subtree)``."""
    out = np.ones(A.shape[0])
    for t in tree:
        out = out * (A @ stage_weights(t, A))
    return out


def order_defects(weights: np.ndarray, A: np.ndarray, order: int) -> dict:
    """``b . Phi(t) - 1 / gamma(t)`` for every tree of up to ``order`` nodes."""
    return {t: float(weights @ stage_weights(t, A) - 1.0 / density(t))
            for k in range(1, order + 1) for t in rooted_trees(k)}


def test_tree_counts():
    # 1, 1, 2, 4, 9, 20 rooted trees of order 1..6 (OEIS A000081), 17 up to order 5
    assert [len(rooted_trees(k)) for k in range(1, 7)] == [1, 1, 2, 4, 9, 20]
    # the classical conditions: sum b c = 1/2, sum b c^2 = 1/3, sum b A c = 1/6
    assert density(((),)) == 2 and density(((), ())) == 3 and density((((),),)) == 6


@pytest.mark.parametrize("name", list(TABLEAUX))
def test_order_conditions(name):
    tab = TABLEAUX[name]
    top = min(tab.order, 5)
    defects = order_defects(tab.B, tab.A, top)
    assert max(abs(d) for d in defects.values()) < 1e-14, defects
    if tab.order < 5:      # and not of the next order: the order is the stated one
        next_ = order_defects(tab.B, tab.A, tab.order + 1)
        assert max(abs(d) for d in next_.values()) > 1e-3


@pytest.mark.parametrize("name", EMBEDDED)
def test_embedded_error_weights(name):
    """The embedded solution ``b_hat = B + E`` (over the FSAL stage too) has the stated
    error order, and not the order of the main solution."""
    tab = TABLEAUX[name]
    S = tab.n_stages
    A = np.zeros((S + 1, S + 1))        # the FSAL stage: y_new, i.e. the row of B
    A[:S, :S] = tab.A
    A[S, :S] = tab.B
    defects = order_defects(tab.b_hat, A, tab.error_order)
    assert max(abs(d) for d in defects.values()) < 1e-14, defects
    higher = order_defects(tab.b_hat, A, tab.error_order + 1)
    assert max(abs(d) for d in higher.values()) > 1e-6
    assert abs(tab.E.sum()) < 1e-15


@pytest.mark.parametrize("name", EMBEDDED)
def test_dense_output_matches_the_step(name):
    """At ``x = 1`` the continuous extension is the step itself: ``P`` sums to ``B``."""
    tab = TABLEAUX[name]
    B = np.concatenate([tab.B, np.zeros(tab.P.shape[0] - tab.n_stages)])
    np.testing.assert_allclose(tab.P.sum(axis=1), B, atol=1e-15)


def test_read_from_scipy_once():
    for tab, solver in ((TABLEAUX["RK45"], RK45), (TABLEAUX["RK23"], RK23)):
        assert np.array_equal(tab.A[:, :solver.A.shape[1]], solver.A)
        assert np.array_equal(tab.B, solver.B) and np.array_equal(tab.C, solver.C)
        assert np.array_equal(tab.E, solver.E) and np.array_equal(tab.P, solver.P)
        assert tab.error_order == solver.error_estimator_order and tab.order == solver.order
    # Shampine's h|lambda| at the last stage, the one scipy_ivp.h_lambda takes (c = 1 for
    # RK45, 3/4 for RK23)
    assert TABLEAUX["RK45"].stiff_stage == 5 and TABLEAUX["RK23"].stiff_stage == 2
    assert set(EMBEDDED) == {"RK45", "RK23"}


def test_exact_fixed_tableaux():
    """The fixed-step tableaux hold the exact rationals of their textbook form."""
    rk4 = TABLEAUX["rk4"]
    assert [Fraction(b).limit_denominator(10) for b in rk4.B] == [
        Fraction(1, 6), Fraction(1, 3), Fraction(1, 3), Fraction(1, 6)]
    assert list(TABLEAUX["midpoint"].C) == [0.0, 0.5]


@pytest.mark.parametrize("bad, match", [
    (dict(A=[[0.0, 1.0], [0.5, 0.0]]), "strictly lower triangular"),
    (dict(C=[0.0, 0.4]), "row sums"),
    (dict(B=[0.5, 0.6]), "sum to 1"),
    (dict(B=[1.0]), "`C` must have 1 entries"),
    (dict(A=[[0.0, 0.0, 0.0]] * 2), "`A` must have shape"),
    (dict(E=[0.1, 0.1], error_order=1), "sum to 0"),
    (dict(E=[0.1, -0.1]), "without `error_order`"),
    (dict(B=[np.nan, 1.0]), "finite"),
])
def test_checked_at_construction(bad, match):
    args = dict(A=[[0.0, 0.0], [0.5, 0.0]], B=[0.0, 1.0], C=[0.0, 0.5])
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        ButcherTableau("bad", order=2, **args)


def test_registry():
    assert ALL_METHODS == SCIPY_METHODS + FIXED_METHODS == tuple(METHODS)
    kinds = {name: m.kind for name, m in METHODS.items()}
    assert {n for n, k in kinds.items() if k == "adaptive"} == set(SCIPY_METHODS)
    assert kinds["disc"] == "layers" and kinds["rk4"] == "fixed"
    for name, m in METHODS.items():
        assert m.tableau is TABLEAUX.get(name)
        assert m.ensemble == (name in EMBEDDED)
    with pytest.raises(ValueError, match="`method` must be one of 'RK45'.*but got 'rk5'"):
        method_of("rk5")
    with pytest.raises(ValueError, match="`method` must be one of 'RK45', 'RK23'"):
        method_of("rk4", EMBEDDED)


@pytest.mark.parametrize("name", [n for n in ALL_METHODS if n != "disc"])
def test_integrate_contract(name):
    """Every registered method integrates ``dy/dp = -y`` from 0 down to -1 through the one
    contract, to its accuracy (fixed steps of 0.01: error of order ``0.01^order``)."""
    depths = np.array([0.0, -0.5, -1.0])
    out = integrate(name, lambda p, y, piece: -y, np.array([1.0, 2.0]), 0.0, depths,
                    np.empty(0), lambda a, b: None, rtol=1e-10, atol=1e-12, step=0.01)
    exact = np.exp(-depths)[:, None] * np.array([1.0, 2.0])
    tab = TABLEAUX.get(name)
    tol = 1e-7 if METHODS[name].kind == "adaptive" else 10 * 0.01 ** tab.order
    assert out.success
    np.testing.assert_allclose(out.ys, exact, rtol=tol)
