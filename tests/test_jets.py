"""Jets of any order (issue: symbolic derivatives and jets of any order): exactness on
polynomial flows, convergence in the order K with depth slope K + 2, the error estimate,
and storage without redundancy."""

from math import comb

import numpy as np
import pytest
import sympy as sp

import invimbed
from invimbed._core.closures.jet import JetClosure

t, z0, z1, u = sp.symbols("t z0 z1 u")
TIGHT = dict(rtol=1e-12, atol=1e-14)


def quadratic_flow(T):
    """dz0/dt = z1^2, dz1/dt = 1: z(q) = [x0 + s x1^2 + s^2 x1 + s^3/3, x1 + s], degree 2."""
    return invimbed.from_sympy(t, [z0, z1], [], [z1 ** 2, sp.Integer(1)], terminal_loss=T)


def cubic_flow(T):
    """dz0/dt = z1^3, dz1/dt = 1: z0(q) = x0 + ((x1 + s)^4 - x1^4) / 4, degree 3 in x."""
    return invimbed.from_sympy(t, [z0, z1], [], [z1 ** 3, sp.Integer(1)], terminal_loss=T)


def exact_quadratic(x, s):
    return np.array([x[0] + s * x[1] ** 2 + s ** 2 * x[1] + s ** 3 / 3, x[1] + s])


def exact_cubic(x, s):
    return np.array([x[0] + ((x[1] + s) ** 4 - x[1] ** 4) / 4, x[1] + s])


LINEAR_T = 0.7 * z0 - 1.3 * z1


@pytest.mark.parametrize("flow, exact, degree", [(quadratic_flow, exact_quadratic, 2),
                                                 (cubic_flow, exact_cubic, 3)])
def test_polynomial_flow_is_reproduced_from_order_d(flow, exact, degree):
    """A flow map of degree d in x with a linear terminal loss: V has degree d and Lam
    degree d - 1, so the jet of order K >= d is exact in z, value and adjoint; K = d - 1
    is not."""
    pb = flow(LINEAR_T)
    x, s = np.array([0.4, -0.7]), np.array([0.3, 0.8])
    c = np.array([0.7, -1.3])
    h = 1e-5
    want_z = np.array([exact(x, si) for si in s])
    want_adj = np.array([[(c @ exact(x + h * e, si) - c @ exact(x - h * e, si)) / (2 * h)
                          for e in np.eye(2)] for si in s])
    for K in range(degree, degree + 2):
        res = invimbed.solve_imbedding(pb, x, -s, order=K, estimate_error=False, **TIGHT)
        np.testing.assert_allclose(res.z, want_z, rtol=1e-9)
        np.testing.assert_allclose(res.value, want_z @ c, rtol=1e-9)
        np.testing.assert_allclose(res.adjoint, want_adj, rtol=1e-7)
    low = invimbed.solve_imbedding(pb, x, -s, order=degree - 1, estimate_error=False, **TIGHT)
    assert np.abs(low.z - want_z).max() > 1e-3


def test_quadratic_flow_order_one_misses_s_cubed_over_three():
    pb = quadratic_flow(LINEAR_T)
    x, s = np.array([0.4, -0.7]), 0.8
    one = invimbed.solve_imbedding(pb, x, [-s], order=1, estimate_error=False, **TIGHT)
    assert one.z[0, 0] - exact_quadratic(x, s)[0] == pytest.approx(-s ** 3 / 3, rel=1e-8)


def test_quadratic_terminal_loss_needs_order_2d_minus_1():
    """With T quadratic, V = T(Z) has degree 2d: the jet needs V of degree K + 1 >= 2d."""
    pb = quadratic_flow((z0 ** 2 + z1 ** 2) / 2)
    x, s = np.array([0.4, -0.7]), 0.8
    zq = exact_quadratic(x, s)
    res3 = invimbed.solve_imbedding(pb, x, [-s], order=3, estimate_error=False, **TIGHT)
    res2 = invimbed.solve_imbedding(pb, x, [-s], order=2, estimate_error=False, **TIGHT)
    assert res3.value[0] == pytest.approx(0.5 * zq @ zq, rel=1e-9)
    assert abs(res2.value[0] - 0.5 * zq @ zq) > 1e-4


# -- nonlinear problems: convergence in K --------------------------------------------------
def pendulum():
    pb = invimbed.from_sympy(t, [z0, z1], [u], [z1, -sp.sin(z0) - 0.2 * z1 + u],
                             0.05 * z0 ** 2 + 0.05 * u ** 2, (z0 - 0.3) ** 2 / 2 + z1 ** 2 / 4)
    return pb, np.array([0.8, -0.3]), invimbed.Constant([0.4])


def vanderpol():
    pb = invimbed.from_sympy(t, [z0, z1], [u], [z1, u * (1 - z0 ** 2) * z1 - z0],
                             0.1 * z0 ** 2 * z1 ** 2, sp.log(1 + (z0 - 1) ** 2 + z1 ** 2))
    return pb, np.array([0.9, 0.4]), invimbed.Constant([1.0])


S = 0.05 * 2.0 ** np.arange(4)        # depths s = 0.05 .. 0.4
_cache = {}


def errors(make, K):
    key = (make.__name__, K)
    if key not in _cache:
        pb, x, c = make()
        ref = invimbed.solve_adjoint(pb, x, -S, control=c, **TIGHT)
        res = invimbed.solve_imbedding(pb, x, -S, control=c, order=K, ratio_test=False,
                                       **TIGHT)
        assert ref.success
        # honest success: where the estimate exceeds 10% the result says so (status -2)
        # and still returns the fields. (The estimate alone judges, `ratio_test=False`:
        # the error law is under test here; the ratio test, default without `tol` too,
        # refuses Van der Pol's deepest depths at orders 2 and 3, tests/test_default_rule.py
        # tests it.)
        big = any(np.any(res.error_estimate[k].reshape(S.size, -1)
                         > 0.1 * np.maximum(1, np.abs(res[k]).reshape(S.size, -1)))
                  for k in ("z", "value", "adjoint"))
        assert (res.success, res.status) == ((False, -2) if big else (True, 0)), res.message
        err = {k: np.abs(res[k] - ref[k]).reshape(S.size, -1).max(1)
               for k in ("z", "value", "adjoint", "param_grad")}
        est = {k: res.error_estimate[k].reshape(S.size, -1).max(1) for k in err}
        _cache[key] = (err, est)
    return _cache[key]


@pytest.mark.parametrize("make", [pendulum, vanderpol])
def test_error_falls_with_the_order_at_fixed_depth(make):
    at_deepest = [errors(make, K)[0] for K in (1, 2, 3, 4)]
    for k in ("z", "value", "adjoint"):
        e = [a[k][-1] for a in at_deepest]
        assert e[0] > e[1] > e[2] > e[3], (k, e)


@pytest.mark.parametrize("make", [pendulum, vanderpol])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_depth_slope_is_K_plus_2(make, K):
    err, _ = errors(make, K)
    slope = np.polyfit(np.log(S), np.log(err["z"]), 1)[0]
    assert abs(slope - (K + 2)) <= 0.6, slope


@pytest.mark.parametrize("make", [pendulum, vanderpol])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_error_estimate_within_factor_three(make, K):
    """Documented factor ("Controlling the closure error"): for depths s <= 0.4, the
    estimate (order K + 1 minus order K) lies within a factor 3 of the true error of z,
    value and adjoint (errors below 1e-12 are rounding, not closure, and are skipped)."""
    err, est = errors(make, K)
    for k in ("z", "value", "adjoint"):
        keep = err[k] > 1e-12
        ratio = est[k][keep] / err[k][keep]
        assert np.all((ratio >= 1 / 3) & (ratio <= 3)), (k, ratio)


def test_orders_five_and_six_keep_converging():
    pb, x, c = pendulum()
    ref = invimbed.solve_adjoint(pb, x, [-0.8], control=c, **TIGHT)
    errs = []
    for K in (4, 5, 6):
        res = invimbed.solve_imbedding(pb, x, [-0.8], control=c, order=K, estimate_error=False,
                                       **TIGHT)
        errs.append(np.abs(res.z - ref.z).max())
    assert errs[0] > errs[1] > errs[2], errs


@pytest.mark.parametrize("N, K", [(2, 6), (4, 3), (8, 2)])
def test_jets_are_stored_without_redundancy(N, K):
    """C(N + L, L) Taylor coefficients per field of degree L, not N^L tensor entries."""
    pb = invimbed.BolzaProblem(lambda t, z, th: -z, terminal_loss=lambda z: 0.5 * z @ z)
    prov = pb.provider(N, 0)
    clo = JetClosure(prov, invimbed._core.problem.open_loop.NoControl(), np.zeros((1, N)), 0.0, order=K,
                     estimate_error=False)
    assert clo.layout.shapes[f"Z{K}"] == (1, N, comb(N + K, K))
    assert clo.layout.shapes[f"V{K}"] == (1, comb(N + K + 1, K + 1))
    assert clo.layout.size == N * comb(N + K, K) + comb(N + K + 1, K + 1)
