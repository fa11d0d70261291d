"""The user's path and terminal constraints of `solve_ocp` traced into sympy
(`invimbed._control.ocp.constraint_code`): values, Jacobians and Hessians at every point
at once, against closed forms and central differences; the fallback to differences
where a function does not trace, and what the result says.
"""

from __future__ import annotations

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp.constraint_code import (ConstraintCode, Differenced,
                                                   trace_constraint)
from invimbed._control.ocp.constraints import Path, Terminal
from invimbed._control.ocp.exact_hessian import LagrangianHessian
from invimbed._control.ocp.nlp import ShootingNLP
from test_ocp import every_block_nlp
from test_ocp_hessian import dense, gradient_differences

pytest.importorskip("sympy")

CX, CY, R = 5.0, 0.3, 1.5


def obstacle(t, z, u):
    """The benchmark's obstacle: ``r^2 - |p - c|^2 <= 0`` outside the disc."""
    return np.array([R ** 2 - (z[0] - CX) ** 2 - (z[1] - CY) ** 2])


def wavy(t, z, u):
    """Nonlinear in every variable, time included, two outputs."""
    return np.array([np.sin(z[0] * u[0]) + t * z[1] ** 2, np.exp(-z[1]) * u[1] - t ** 2])


def wavy_derivatives(v):
    """Closed-form Jacobian (2, 7) and Hessians (2, 7, 7) of `wavy` in ``v = (t, z0, z1,
    z2, z3, u0, u1)``."""
    t, z0, z1, u0, u1 = v[0], v[1], v[2], v[5], v[6]
    J = np.zeros((2, 7))
    H = np.zeros((2, 7, 7))
    c, s = np.cos(z0 * u0), np.sin(z0 * u0)
    J[0, [0, 1, 2, 5]] = z1 ** 2, u0 * c, 2 * t * z1, z0 * c
    H[0, 0, 2] = H[0, 2, 0] = 2 * z1
    H[0, 2, 2] = 2 * t
    H[0, 1, 1] = -u0 ** 2 * s
    H[0, 5, 5] = -z0 ** 2 * s
    H[0, 1, 5] = H[0, 5, 1] = c - z0 * u0 * s
    e = np.exp(-z1)
    J[1, [0, 2, 6]] = -2 * t, -e * u1, e
    H[1, 0, 0] = -2
    H[1, 2, 2] = e * u1
    H[1, 2, 6] = H[1, 6, 2] = -e
    return J, H


def points(seed=0, P=6):
    return np.random.default_rng(seed).normal(size=(P, 7))


def test_obstacle_traced_matches_its_closed_form_and_differences():
    """The distance constraint: Jacobian ``(0, -2 (x - cx), -2 (y - cy), 0...)`` and
    Hessian ``diag(0, -2, -2, 0...)`` to 1e-12; the differences (as before) agree to
    1e-9 (Jacobian) and 1e-7 (Hessian, step eps^(1/4))."""
    V = points(1) * 3.0
    code, why = trace_constraint(obstacle, V[0], 4, 2)
    assert isinstance(code, ConstraintCode) and why == "" and code.source.startswith("exact")
    c, G = code.first(V)
    np.testing.assert_allclose(c[:, 0], [obstacle(*Differenced(obstacle, 4, 2, "g", "").split(v))[0]
                                         for v in V], rtol=1e-13)
    ref = np.zeros((V.shape[0], 1, 7))
    ref[:, 0, 1], ref[:, 0, 2] = -2 * (V[:, 1] - CX), -2 * (V[:, 2] - CY)
    assert np.max(np.abs(G - ref)) <= 1e-12 * np.max(np.abs(ref))
    Y = np.random.default_rng(2).normal(size=(V.shape[0], 1))
    H = code.second(V, Y)
    H_ref = np.zeros((V.shape[0], 7, 7))
    H_ref[:, 1, 1] = H_ref[:, 2, 2] = -2 * Y[:, 0]
    assert np.max(np.abs(H - H_ref)) <= 1e-12 * np.max(np.abs(H_ref))
    fd = Differenced(obstacle, 4, 2, "g", "for the test")
    c_fd, G_fd = fd.first(V)
    assert np.max(np.abs(G_fd - G)) <= 1e-9 * np.max(np.abs(G))
    assert np.max(np.abs(fd.second(V, Y) - H)) <= 1e-7 * np.max(np.abs(H))


def test_nonlinear_time_dependent_constraint_traced_exactly():
    """``sin(z0 u0) + t z1^2``, ``exp(-z1) u1 - t^2``: the traced Jacobian and Hessians
    against their closed forms (1e-12) and against the differences (1e-8, 1e-6)."""
    V = points(3)
    code, why = trace_constraint(wavy, V[0], 4, 2)
    assert why == ""
    c, G = code.first(V)
    Y = np.random.default_rng(4).normal(size=(V.shape[0], 2))
    H = code.second(V, Y)
    for p, v in enumerate(V):
        J_ref, H_ref = wavy_derivatives(v)
        np.testing.assert_allclose(c[p], wavy(v[0], v[1:5], v[5:]), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(G[p], J_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(H[p], np.einsum("k,kab->ab", Y[p], H_ref), rtol=1e-12,
                                   atol=1e-14)
    fd = Differenced(wavy, 4, 2, "g", "for the test")
    assert np.max(np.abs(fd.first(V)[1] - G)) <= 1e-8 * np.max(np.abs(G))
    assert np.max(np.abs(fd.second(V, Y) - H)) <= 1e-6 * np.max(np.abs(H))


def test_terminal_constraint_traced():
    """``h(z) = (z0^2 z1 - 1, cos z2)``: traced in ``z`` alone, exact derivatives."""
    h = lambda z: np.array([z[0] ** 2 * z[1] - 1.0, np.cos(z[2])])  # noqa: E731
    z = np.array([[0.7, -1.2, 0.4]])
    code, why = trace_constraint(h, z[0], 3, None)
    assert why == ""
    c, G = code.first(z)
    np.testing.assert_allclose(G[0], [[2 * 0.7 * -1.2, 0.49, 0.0], [0, 0, -np.sin(0.4)]],
                               rtol=1e-14)
    H = code.second(z, np.array([[2.0, 3.0]]))[0]
    np.testing.assert_allclose(H, [[2 * 2 * -1.2, 2 * 2 * 0.7, 0], [2 * 2 * 0.7, 0, 0],
                                   [0, 0, -3 * np.cos(0.4)]], rtol=1e-14)


def branchy(t, z, u):
    """Value-dependent: does not trace."""
    return np.array([z[0] - 1.0 if z[0] > 0 else -z[0] - 1.0])


@pytest.mark.parametrize("fn, why", [
    (branchy, "compares"),
    (lambda t, z, u: np.array([float(t) * z[0]]), "converts to float"),
])
def test_untraceable_constraint_falls_back_to_differences_saying_why(fn, why):
    code, reason = trace_constraint(fn, np.zeros(7), 4, 2)
    assert code is None and why in reason


def test_a_trace_that_disagrees_with_the_function_is_refused():
    """A function whose value depends on a global that tracing sees differently (here a
    counter of calls): the verification refuses the trace."""
    calls = []

    def drifting(t, z, u):
        calls.append(1)
        return np.array([z[0] + 1e-3 * len(calls)])

    code, reason = trace_constraint(drifting, np.ones(7), 4, 2)
    assert code is None and "disagrees" in reason


def test_traced_and_differenced_blocks_give_the_same_nlp_jacobian():
    """The NLP Jacobian of ``every_block_nlp`` (a time-dependent path constraint at the
    nodes and inside, a terminal inequality, free horizon) with traced constraint code
    and with the differences: equal to 1e-8."""
    nlp, w = every_block_nlp(True, rtol=1e-11, atol=1e-13)
    path = next(b for b in nlp.blocks if isinstance(b, Path))
    term = next(b for b in nlp.blocks if isinstance(b, Terminal))
    assert path.code.exact and term.code.exact
    J_traced = nlp.jacobian(w).toarray()
    c_traced = nlp.constraints(w)
    for b, m in ((path, nlp.sh.m), (term, None)):
        b.code = Differenced(b.fn, nlp.sh.n, m, b.name, "for the test")
        b.code.k = b.k
    nlp._cons = None                           # the blocks evaluated anew (same solve)
    J_fd = nlp.jacobian(w).toarray()
    np.testing.assert_allclose(nlp.constraints(w), c_traced, rtol=1e-13, atol=1e-13)
    assert np.max(np.abs(J_fd - J_traced)) <= 1e-8 * np.max(np.abs(J_traced))


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_hessian_with_differenced_constraints_still_matches(free):
    """The fallback inside the exact Hessian of the Lagrangian (a constraint that does
    not trace): against central differences of the exact gradient, 1e-6 relative, as
    with traced constraints (tests/test_ocp_hessian.py)."""
    nlp, w = every_block_nlp(free, rtol=1e-11, atol=1e-13)
    for b in nlp.blocks:
        if isinstance(b, (Path, Terminal)):
            b.code = Differenced(b.fn, nlp.sh.n, nlp.sh.m if isinstance(b, Path) else None,
                                 b.name, "for the test")
            b.code.k = b.k
    y = np.random.default_rng(3).normal(size=nlp.m)
    hess = LagrangianHessian(nlp)
    H = dense(hess, hess.values(w, y, 0.7))
    ref = gradient_differences(nlp, w, y, 0.7)
    assert np.max(np.abs(H - ref)) <= 1e-6 * np.max(np.abs(ref))


def test_result_says_how_each_constraint_is_differentiated():
    """``res.constraint_derivatives``: exact for the traced path constraint, central
    differences (with the reason) for the one that branches on a value."""
    sp = pytest.importorskip("sympy")
    t, x, v, u = sp.symbols("t x v u")
    problem = invimbed.from_sympy(t, [x, v], [u], [v, u], u ** 2 / 2, q=1.0)
    res = invimbed.solve_ocp(problem, [0.0, 0.0], p=0.0, intervals=4, final_state=[1, 0],
                             solver="slsqp",
                             path_constraints=lambda t, z, u: np.array([z[1] - 2.0]),
                             terminal_inequality=lambda z: branchy(0.0, z, None))
    assert res.success
    assert res.constraint_derivatives["path_constraints"] == "exact: traced into sympy"
    src = res.constraint_derivatives["terminal_inequality"]
    assert src.startswith("central differences (not traced:") and "compares" in src


def test_trace_kept_per_function_and_redone_when_its_values_change():
    """A second solver with the same function reuses its code (verified again); a
    closure over an array changed since is traced anew, with the new value."""
    scale = np.array([1.0])
    g = lambda t, z, u: np.array([scale[0] * z[0] - u[0]])  # noqa: E731
    first, _ = trace_constraint(g, np.ones(7), 4, 2)
    again, _ = trace_constraint(g, np.ones(7), 4, 2)
    assert again is first
    scale[0] = 3.0
    moved, why = trace_constraint(g, np.ones(7), 4, 2)
    assert why == "" and moved is not first
    np.testing.assert_allclose(moved.first(np.ones((1, 7)))[1][0, 0, 1], 3.0)
