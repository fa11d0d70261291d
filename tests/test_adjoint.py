"""Tests of :func:`invimbed.solve_adjoint`, the classical reference.

Everything else in the package is verified against ``solve_adjoint``, so it is itself
checked only against independent references:

* closed forms (:func:`problems.lq_closed_form`, :func:`problems.logistic_closed_form`),
  which are in turn checked against a brute-force ``solve_ivp`` and finite differences;
* finite differences of the loss in ``x``, ``w`` and ``p`` on nonlinear problems;
* the depth-gradient example of docs/theory.md, "The imbedded fields".

Error measure: ``rel_err(got, exp) = max|got - exp| / max|exp|`` over a whole field
(all depths, all batch rows), i.e. a normwise relative error in the max norm (with an
optional floor on the denominator for fields that may vanish).

Measured (rtol=1e-10, atol=1e-12, RK45, on the examples below): LQ closed form <= 1e-10
relative on non-degenerate data, logistic closed form ~2e-11, finite differences on
the pendulum and Van der Pol ~5e-11. The whole file runs in ~13 s.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import invimbed
from problems import (DERIVATIVE_KEYS, DERIVATIVE_PARENTS, brute_force, logistic_closed_form,
                      logistic_functions, logistic_problem, lq_closed_form, lq_functions,
                      lq_matrices, lq_problem,
                      pendulum_functions, piecewise_theta, vanderpol_functions)

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def rel_err(got, exp, floor: float = 1e-300) -> float:
    """Normwise relative error ``max|got - exp| / max(max|exp|, floor)``.

    Shapes must agree. ``floor`` turns the measure into an absolute one for fields
    that are (nearly) zero, where a relative error is meaningless next to ``atol``.
    """
    got, exp = np.asarray(got, dtype=float), np.asarray(exp, dtype=float)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    if exp.size == 0:
        return 0.0
    return float(np.max(np.abs(got - exp)) / max(np.max(np.abs(exp)), floor))


def fd5(fun, u0, h):
    """Five-point central differences of ``fun`` at ``u0``.

    ``fun`` is evaluated once on the batch of perturbed points, ``U (K, n) -> (K, *S)``;
    the result has shape ``(*S, n)`` (the gradient for a scalar ``fun``). Truncation
    error ``h^4 |fun^(5)| / 30``.
    """
    u0 = np.asarray(u0, dtype=float)
    n = u0.size
    steps = np.array([2.0, 1.0, -1.0, -2.0])
    U = u0 + h * (steps[:, None, None] * np.eye(n)[None])  # (4, n, n)
    vals = np.asarray(fun(U.reshape(4 * n, n)), dtype=float)
    vals = vals.reshape((4, n) + vals.shape[1:])
    d = (-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * h)  # (n, *S)
    return np.moveaxis(d, 0, -1)


def random_lq(seed: int, N: int, M: int) -> dict:
    rng = np.random.default_rng(seed)
    L, K = rng.uniform(-1, 1, (N, N)), rng.uniform(-1, 1, (N, N))
    Lr = rng.uniform(-1, 1, (M, M))
    return dict(A=-np.eye(N) + 0.5 * rng.uniform(-1, 1, (N, N)) / N,
                B=rng.uniform(-1, 1, (N, M)), Q=L @ L.T, Rth=Lr @ Lr.T + 0.5 * np.eye(M),
                S=0.5 * rng.uniform(-1, 1, (N, M)), PT=K @ K.T)


# ---------------------------------------------------------------------------------------
# 1. The hand-written derivative tensors of every test problem
# ---------------------------------------------------------------------------------------
def _sample_points(fns, seed=1, batch=3):
    rng = np.random.default_rng(seed)
    if fns is LOGISTIC:
        z = rng.uniform(0.1, 0.9, (batch, 1))
    else:
        z = rng.uniform(-1.5, 1.5, (batch, fns.n_state))
    return 0.37, z, rng.uniform(-1.5, 1.5, (batch, fns.n_theta))


def _central(fns, parent, var, t, z, th, h=1e-3):
    """Five-point central differences of ``parent`` in ``var``, new axis placed by the
    package convention (output axes, then z axes, then theta axes)."""
    u = z if var == "z" else th
    cols = []
    for j in range(u.shape[1]):
        def at(k):
            uu = u.copy()
            uu[:, j] += k * h
            return fns.evaluate(parent, t, uu, th) if var == "z" else fns.evaluate(parent, t, z, uu)
        cols.append((-at(2) + 8 * at(1) - 8 * at(-1) + at(-2)) / (12 * h))
    base = fns.evaluate(parent, t, z, th)
    d = np.stack(cols, axis=-1) if cols else np.zeros(base.shape + (0,))
    if var == "z":  # the new z axis goes before the parent's theta axes
        n_theta_axes = parent.count("theta")
        d = np.moveaxis(d, -1, d.ndim - 1 - n_theta_axes)
    return d


LOGISTIC = logistic_functions(q=0.2)
DERIV_PROBLEMS = {
    "lq": lq_functions(**random_lq(0, 3, 2)),
    "lq-no-control": lq_functions(**random_lq(1, 4, 0)),
    "logistic": LOGISTIC,
    "pendulum": pendulum_functions(),
    "vanderpol": vanderpol_functions(),
}


@pytest.mark.parametrize("name", list(DERIV_PROBLEMS))
@pytest.mark.parametrize("key", DERIVATIVE_KEYS)
def test_exact_derivatives_match_finite_differences(name, key):
    # h = 1e-3, five points: truncation ~ h^4/30 * |5th derivative| ~ 1e-13, rounding
    # ~ eps / h ~ 1e-13; a wrong entry, sign or axis order is an O(1) error.
    fns = DERIV_PROBLEMS[name]
    t, z, th = _sample_points(fns)
    got = fns.evaluate(key, t, z, th)
    for parent, var in DERIVATIVE_PARENTS[key]:
        expected = _central(fns, parent, var, t, z, th)
        assert got.shape == expected.shape, (key, parent, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-9,
                                   err_msg=f"{name}: {key} vs d({parent})/d{var}")


# ---------------------------------------------------------------------------------------
# 2. The closed forms themselves, against brute force and finite differences
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,N,M", [(0, 3, 2), (1, 4, 0), (2, 1, 1), (3, 6, 3)])
def test_lq_closed_form_is_exact(seed, N, M):
    mats = random_lq(seed, N, M)
    fns = lq_functions(**mats, q=0.4)
    rng = np.random.default_rng(seed + 10)
    x, w, p = rng.uniform(-1, 1, N), rng.uniform(-1, 1, M), -1.3
    cf = lq_closed_form(**mats, x=x, w=w, p=p, q=0.4)
    # z(q) and J against an independent forward solve (DOP853, rtol 1e-13)
    zq, J = brute_force(fns, x[None], p, w)
    assert rel_err(cf["z"], zq[0]) < 1e-10
    assert rel_err(cf["value"], J[0]) < 1e-10
    # gradients: J is exactly quadratic in (x, w), so central differences have no
    # truncation error; only rounding ~ eps |J| / h.
    h = 1e-3
    gx = fd5(lambda X: lq_closed_form(**mats, x=X, w=w, p=p, q=0.4)["value"], x, h)
    assert rel_err(cf["adjoint"], gx) < 1e-9
    if M:
        gw = fd5(lambda W: [lq_closed_form(**mats, x=x, w=wr, p=p, q=0.4)["value"]
                            for wr in W], w, h)
        assert rel_err(cf["param_grad"], gw) < 1e-9
    assert cf["param_grad"].shape == (M,)
    gp = fd5(lambda P: [lq_closed_form(**mats, x=x, w=w, p=pp[0], q=0.4)["value"] for pp in P],
             [p], h)[0]
    assert rel_err(cf["depth_grad"], gp) < 1e-8
    # and the identity dJ/dp = -(grad_x J . f + R) at t = p
    f = fns.f(p, x[None], w[None])[0]
    R = fns.R(p, x[None], w[None])[0]
    assert rel_err(cf["depth_grad"], -(cf["adjoint"] @ f + R)) < 1e-10


@pytest.mark.parametrize("x,w,p", [(0.3, 1.2, -1.5), (0.8, -0.7, -2.0), (0.55, 0.4, 0.1)])
def test_logistic_closed_form_is_exact(x, w, p):
    fns, q = LOGISTIC, LOGISTIC.q
    cf = logistic_closed_form([x], w, p, q)
    zq, J = brute_force(fns, [[x]], p, [w])
    assert rel_err(cf["z"][0], zq[0]) < 1e-11
    assert rel_err(cf["value"][0], J[0]) < 1e-11
    h = 1e-3

    def value(x_=x, w_=w, p_=p):
        return logistic_closed_form([x_], w_, p_, q)["value"][0]

    assert rel_err(cf["adjoint"][0, 0], fd5(lambda U: [value(x_=u[0]) for u in U], [x], h)[0]) < 1e-9
    assert rel_err(cf["param_grad"][0, 0], fd5(lambda U: [value(w_=u[0]) for u in U], [w], h)[0]) < 1e-9
    assert rel_err(cf["depth_grad"][0], fd5(lambda U: [value(p_=u[0]) for u in U], [p], h)[0]) < 1e-9


# ---------------------------------------------------------------------------------------
# 3. solve_adjoint against the LQ closed form (hypothesis)
# ---------------------------------------------------------------------------------------
@st.composite
def lq_cases(draw):
    mats = draw(lq_matrices(max_n=6, max_m=3))
    N, M = mats["B"].shape
    batch = draw(st.integers(1, 3))
    elems = st.floats(-2.0, 2.0, allow_nan=False, allow_subnormal=False)
    x = np.array(draw(st.lists(elems, min_size=N * batch, max_size=N * batch))).reshape(batch, N)
    w = np.array(draw(st.lists(elems, min_size=M, max_size=M)))
    q = draw(st.floats(-1.0, 1.0))
    gaps = draw(st.lists(st.floats(0.1, 0.8), min_size=1, max_size=3))
    spans = np.cumsum(gaps) - (gaps[0] if draw(st.booleans()) else 0.0)  # maybe include p = q
    depths = q - spans
    if draw(st.booleans()):
        depths = depths[::-1]
    batched = draw(st.booleans()) or batch > 1
    return mats, (x if batched else x[0]), w, q, depths


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(lq_cases())
def test_lq_all_fields_match_closed_form(case):
    # rtol=1e-10, atol=1e-12: the adjoint method's error is ~1e-11 relative (measured
    # <= 1e-10 over these examples); 1e-7 leaves three orders of magnitude of margin
    # and is still far below any modelling error (a missing term is O(1)). Hypothesis
    # also draws near-zero data (entries ~1e-40): a field whose magnitude is below
    # 1e-3 is compared absolutely, at 1e-10 (100 atol), via the floor of rel_err.
    mats, x, w, q, depths = case
    N, M = mats["B"].shape
    problem = lq_problem(**mats, q=q)
    control = invimbed.Constant(w) if M else None
    res = invimbed.solve_adjoint(problem, x, depths, control=control, rtol=1e-10, atol=1e-12)
    assert res.success, res.message
    np.testing.assert_array_equal(res.depths, depths)
    exact = [lq_closed_form(**mats, x=x, w=w, p=p, q=q) for p in depths]
    for k in FIELDS:
        expected = np.stack([e[k] for e in exact])
        assert res[k].shape == expected.shape, k
        assert rel_err(res[k], expected, floor=1e-3) <= 1e-7, k


# ---------------------------------------------------------------------------------------
# 4. the logistic equation: a nonlinear problem with a closed form
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("w", [1.2, -0.7])
def test_logistic_all_fields_match_closed_form(w):
    q = LOGISTIC.q
    x = np.array([[0.3], [0.8], [0.55]])
    depths = q - np.array([0.0, 0.3, 1.0, 2.5])
    res = invimbed.solve_adjoint(logistic_problem(q=q), x, depths,
                                 control=invimbed.Constant([w]), rtol=1e-10, atol=1e-12)
    assert res.success, res.message
    exact = [logistic_closed_form(x[:, 0], w, p, q) for p in depths]
    for k in FIELDS:
        expected = np.stack([e[k] for e in exact])
        assert rel_err(res[k], expected) <= 1e-7, k


# ---------------------------------------------------------------------------------------
# 5. Finite differences of J on nonlinear problems
# ---------------------------------------------------------------------------------------
Q_NL = 0.25
NONLINEAR = {"pendulum": (pendulum_functions(q=Q_NL), [0.4, -0.3], [0.2, 0.3]),
             "vanderpol": (vanderpol_functions(q=Q_NL), [0.8, 0.2], [0.9, -0.2])}
NL_DEPTHS = Q_NL - np.array([0.05, 0.7, 1.5])      # at least 0.1 away from every knot
KNOTS = Q_NL - np.array([1.8, 1.0, 0.4, 0.0])      # spans [p_min - 0.3, q]
FD_H = 1e-3
# Tolerance of the finite-difference checks: five-point quotients with h = 1e-3 have
# truncation ~ h^4 / 30 |J^(5)| ~ 1e-13; the values differenced come from solves at
# rtol = 1e-12 (DOP853; solve_adjoint in x, `problems.brute_force` at 1e-13 in w and p),
# whose noise ~ 1e-12 |J| is amplified by ~ 1.5 / h to ~ 1e-9; the gradients under test
# come from rtol = 1e-10 (RK45), error ~ 1e-10. FD_TOL = 1e-6 sits well above that
# budget (measured errors <= ~1e-8; 1e-11 to 4e-11 in w and p) and far below an O(1)
# error.
FD_TOL = 1e-6
FD_SOLVE = dict(method="DOP853", rtol=1e-12, atol=1e-14)


def _control(kind, w0):
    if kind == "constant":
        return invimbed.Constant(w0)
    values = np.array([[1.0, 1.0], [0.6, 1.4], [1.3, 0.7]]) * np.asarray(w0)
    return invimbed.PiecewiseConstant(KNOTS, values)


def _brute_theta(control, W=None):
    """``theta`` and its breakpoints for `problems.brute_force`, written without invimbed:
    the control, or with ``W`` of shape (K, n_w) the K controls of those parameters as K
    rows."""
    W = np.atleast_2d(control.w if W is None else np.asarray(W, float))
    if isinstance(control, invimbed.PiecewiseConstant):
        rows = [piecewise_theta(control.knots, w.reshape(control.values.shape)) for w in W]
        return (lambda t: np.stack([row(t) for row in rows])), control.knots
    return W, ()


def _value(problem, x, depths, control):
    res = invimbed.solve_adjoint(problem, x, depths, control=control, **FD_SOLVE)
    assert res.success, res.message
    return res.value


@pytest.fixture(scope="module", params=[(n, k) for n in NONLINEAR
                                        for k in ("constant", "piecewise")],
                ids=lambda nk: f"{nk[0]}-{nk[1]}")
def nonlinear_case(request):
    name, kind = request.param
    fns, x0, w0 = NONLINEAR[name]
    problem = fns.problem()
    control = _control(kind, w0)
    res = invimbed.solve_adjoint(problem, x0, NL_DEPTHS, control=control, rtol=1e-10,
                                 atol=1e-12)
    assert res.success, res.message
    return fns, problem, np.asarray(x0, float), control, res


def test_nonlinear_value_and_output_match_brute_force(nonlinear_case):
    fns, problem, x0, control, res = nonlinear_case
    theta, bps = _brute_theta(control)
    for i, p in enumerate(NL_DEPTHS):
        zq, J = brute_force(fns, x0[None], p, theta, breakpoints=bps)
        assert rel_err(res.z[i], zq[0]) < 1e-8
        assert rel_err(res.value[i], J[0]) < 1e-8


def test_adjoint_is_gradient_of_value_in_x(nonlinear_case):
    fns, problem, x0, control, res = nonlinear_case
    for i, p in enumerate(NL_DEPTHS):
        fd = fd5(lambda X: _value(problem, X, [p], control)[0], x0, FD_H)
        assert rel_err(res.adjoint[i], fd) < FD_TOL, p


def test_param_grad_is_gradient_of_value_in_w(nonlinear_case):
    fns, problem, x0, control, res = nonlinear_case
    w0 = control.w
    assert res.param_grad.shape == (NL_DEPTHS.size, w0.size)

    def values(W):  # (K, n_w) -> (K, n): every depth's loss for each perturbed w
        # by brute force, independent of invimbed: the K perturbed controls as K rows of
        # one forward solve_ivp per depth (DOP853, rtol 1e-13: tighter than FD_SOLVE)
        # rather than K solve_adjoint calls, each integrating the adjoint as well
        theta, bps = _brute_theta(control, W)
        X = np.repeat(x0[None], len(W), axis=0)
        return np.stack([brute_force(fns, X, p, theta, breakpoints=bps)[1]
                         for p in NL_DEPTHS], axis=1)

    fd = fd5(values, w0, FD_H)  # (n, n_w)
    assert rel_err(res.param_grad, fd) < FD_TOL
    if isinstance(control, invimbed.PiecewiseConstant):
        # pieces entirely below a depth do not affect its loss: exactly zero there
        shallow = NL_DEPTHS.argmax()       # p = q - 0.05 lies in the last piece
        np.testing.assert_array_equal(res.param_grad[shallow, :4], 0.0)


def test_depth_grad_is_derivative_of_value_in_p(nonlinear_case):
    fns, problem, x0, control, res = nonlinear_case
    theta, bps = _brute_theta(control)
    for i, p in enumerate(NL_DEPTHS):
        # each depth alone, so the stencil cannot cross q; the stencil stays within one
        # control piece (depths are >= 0.1 away from the knots)
        # (by brute force, forward only, rtol 1e-13: independent of invimbed)
        fd = fd5(lambda P: [brute_force(fns, x0[None], pp[0], theta, breakpoints=bps)[1][0]
                            for pp in P], [p], FD_H)[0]
        assert rel_err(res.depth_grad[i], fd) < FD_TOL, p


def test_depth_grad_at_a_knot_is_the_derivative_from_above():
    # ImbeddingResult documents: at a jump of a piecewise-constant control, depth_grad
    # is the derivative from above (p -> p_i+). One-sided 5-point differences, h = 1e-3.
    fns, x0, w0 = NONLINEAR["pendulum"]
    problem = fns.problem()
    control = _control("piecewise", w0)
    knots = control.knots[1:-1]
    res = invimbed.solve_adjoint(problem, x0, knots, control=control, rtol=1e-10, atol=1e-12)
    assert res.success, res.message
    coef = np.array([-25.0, 48.0, -36.0, 16.0, -3.0]) / 12.0   # f'(0) from f(0..4h)
    for i, p in enumerate(knots):
        above = coef @ np.array([_value(problem, x0, [p + k * FD_H], control)[0]
                                 for k in range(5)]) / FD_H
        below = -coef @ np.array([_value(problem, x0, [p - k * FD_H], control)[0]
                                  for k in range(5)]) / FD_H
        assert rel_err(res.depth_grad[i], above) < 1e-5    # one-sided: O(h^4) ~ 1e-10 + noise
        assert abs(above - below) > 1e-2                    # the jump is real


# ---------------------------------------------------------------------------------------
# 6. docs/theory.md, "The imbedded fields": the depth gradient is -(Lam . Phi + R), not the paper's recursion
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("exact_derivatives", [True, False])
def test_design_depth_gradient_example(exact_derivatives):
    a, x, q, p = 0.7, 1.3, 0.0, -1.0
    s = q - p
    derivs = ({"f_z": lambda t, z, th: np.full((len(z), 1, 1), a), "T_z": lambda z: z}
              if exact_derivatives else None)
    problem = invimbed.BolzaProblem(lambda t, z, th: a * z, terminal_loss=lambda z: 0.5 * z[:, 0] ** 2,
                                    q=q, vectorized=True, derivatives=derivs)
    res = invimbed.solve_adjoint(problem, [x], [p], rtol=1e-10, atol=1e-12)
    # J(p) = x^2 e^{2 a s} / 2, s = q - p:  dJ/dp = -a x^2 e^{2 a s}
    true = -a * x ** 2 * np.exp(2 * a * s)
    paper = x ** 2 * np.exp(2 * a * s) * (a + a ** 2 * s)   # eqs. (33)/-pde solved
    assert round(-true, 3) == 4.797 and round(paper, 3) == 8.155
    assert rel_err(res.value[0], 0.5 * x ** 2 * np.exp(2 * a * s)) < 1e-8
    assert rel_err(res.adjoint[0, 0], x * np.exp(2 * a * s)) < 1e-8
    assert rel_err(res.depth_grad[0], true) < 1e-8
    assert round(-float(res.depth_grad[0]), 3) == 4.797
    assert abs(-res.depth_grad[0] - paper) > 3.0


# ---------------------------------------------------------------------------------------
# 7. Result conventions
# ---------------------------------------------------------------------------------------
CONV_MATS = random_lq(5, 3, 2)
CONV_FNS = lq_functions(**CONV_MATS, q=0.5)
CONV_W = np.array([0.3, -0.6])
CONV_DEPTHS = np.array([-1.5, -0.6, 0.1, 0.5])      # increasing, last one at q
CONV_X = np.array([[0.2, -0.4, 1.0], [1.1, 0.3, -0.7]])


@lru_cache(maxsize=None)
def _conv_problem():
    # one problem for the conventions' solves (traced and checked once): what they test
    # is the layout of the result, not the first solve of a new problem
    return CONV_FNS.problem()


def _conv(x, depths, **kw):
    return invimbed.solve_adjoint(_conv_problem(), x, depths,
                                  control=invimbed.Constant(CONV_W), rtol=1e-10, atol=1e-12, **kw)


def test_depths_returned_in_the_order_given():
    inc = _conv(CONV_X, CONV_DEPTHS)
    dec = _conv(CONV_X, CONV_DEPTHS[::-1])
    np.testing.assert_array_equal(inc.depths, CONV_DEPTHS)
    np.testing.assert_array_equal(dec.depths, CONV_DEPTHS[::-1])
    for k in FIELDS:
        np.testing.assert_allclose(dec[k], inc[k][::-1], rtol=1e-13, atol=0, err_msg=k)
        exact = np.stack([lq_closed_form(**CONV_MATS, x=CONV_X, w=CONV_W, p=p, q=0.5)[k]
                          for p in CONV_DEPTHS])
        assert rel_err(inc[k], exact) < 1e-7, k
    # a non-monotone order is refused
    with pytest.raises(ValueError, match="monotone"):
        _conv(CONV_X, [-1.5, 0.1, -0.6])


def test_batched_and_unbatched_shapes():
    n, (B, N), M = CONV_DEPTHS.size, CONV_X.shape, CONV_W.size
    res = _conv(CONV_X, CONV_DEPTHS)
    shapes = {"z": (n, B, N), "value": (n, B), "adjoint": (n, B, N), "param_grad": (n, B, M),
              "depth_grad": (n, B)}
    for k, shape in shapes.items():
        assert res[k].shape == shape, k
    for b in range(B):
        one = _conv(CONV_X[b], CONV_DEPTHS)
        for k, shape in shapes.items():
            assert one[k].shape == shape[:1] + shape[2:], k
            assert rel_err(one[k], res[k][:, b]) < 1e-8, k
    # a batch of one keeps its batch axis
    assert _conv(CONV_X[:1], CONV_DEPTHS).z.shape == (n, 1, N)
    # a scalar depth is one depth
    res = _conv(CONV_X[0], -0.6)
    assert res.z.shape == (1, N) and res.value.shape == (1,) and res.depths.shape == (1,)


def test_no_control_has_empty_param_grad():
    mats = random_lq(6, 2, 0)
    problem = lq_functions(**mats).problem()
    x = np.array([[0.5, -1.0], [0.1, 0.2], [1.0, 1.0]])
    res = invimbed.solve_adjoint(problem, x, [-1.0, -0.3], rtol=1e-10, atol=1e-12)
    assert res.param_grad.shape == (2, 3, 0)
    exact = [lq_closed_form(**mats, x=x, w=np.empty(0), p=p) for p in (-1.0, -0.3)]
    for k in FIELDS:
        assert rel_err(res[k], np.stack([e[k] for e in exact])) < 1e-7, k


def test_depth_at_q_gives_the_terminal_fields():
    # at p = q: Z = x, V = T(x), Lam = grad T(x), Lam_w = 0, dJ/dp = -(grad T . f + R)
    res = _conv(CONV_X, [0.5])
    PT = CONV_FNS.info["PT"]
    th = np.broadcast_to(CONV_W, (2, 2))
    np.testing.assert_array_equal(res.z[0], CONV_X)
    np.testing.assert_allclose(res.value[0], 0.5 * np.einsum("bi,ij,bj->b", CONV_X, PT, CONV_X),
                               rtol=1e-14)
    np.testing.assert_allclose(res.adjoint[0], CONV_X @ PT, rtol=1e-14)
    np.testing.assert_array_equal(res.param_grad[0], 0.0)
    dg = -(np.einsum("bi,bi->b", CONV_X @ PT, CONV_FNS.f(0.5, CONV_X, th))
           + CONV_FNS.R(0.5, CONV_X, th))
    np.testing.assert_allclose(res.depth_grad[0], dg, rtol=1e-12)
    assert res.nfev == 0


def test_nfev_grows_with_the_number_of_depths():
    # strategy="per_depth": "one forward and one backward solve each": the work of several
    # depths is the sum of the work of each depth solved alone, and strictly grows with
    # their number.
    depths = CONV_DEPTHS[:-1]                        # exclude p = q, which costs nothing
    single = [_conv(CONV_X, [p], strategy="per_depth").nfev for p in depths]
    assert all(n > 0 for n in single)
    cumulative = [_conv(CONV_X, depths[:k], strategy="per_depth").nfev
                  for k in range(1, depths.size + 1)]
    assert all(b > a for a, b in zip(cumulative, cumulative[1:]))
    assert cumulative[-1] == sum(single)


# ---------------------------------------------------------------------------------------
# 8. Regression: a smooth time-varying Control must be evaluated at every t (it was once
# frozen at each segment's midpoint in the forward and backward solves)
# ---------------------------------------------------------------------------------------
def test_time_varying_control_matches_closed_form():
    # dz/dt = theta(t) = w0 + w1 t^2, R = 0, T = z^2/2:  Z = x + w0 s + w1 (q^3 - p^3)/3,
    # J = Z^2/2, grad_x J = Z, dJ/dw = Z [s, (q^3 - p^3)/3], dJ/dp = -Z theta(p).
    q, x, w = 1.0, 0.5, np.array([1.0, 2.0])
    problem = invimbed.BolzaProblem(lambda t, z, th: th.copy(), terminal_loss=lambda z: 0.5 * z @ z,
                                    q=q, derivatives={"f_z": lambda t, z, th: np.zeros((1, 1)),
                                                      "f_theta": lambda t, z, th: np.ones((1, 1)),
                                                      "T_z": lambda z: z})
    control = invimbed.Control(lambda t, w: np.array([w[0] + w[1] * t ** 2]), w,
                               jac=lambda t, w: np.array([[1.0, t ** 2]]))
    depths = np.array([0.0, -0.7])
    res = invimbed.solve_adjoint(problem, [x], depths, control=control, rtol=1e-10, atol=1e-12)
    s, c = q - depths, (q ** 3 - depths ** 3) / 3
    Z = x + w[0] * s + w[1] * c
    exact = {"z": Z[:, None], "value": 0.5 * Z ** 2, "adjoint": Z[:, None],
             "param_grad": Z[:, None] * np.stack([s, c], axis=1),
             "depth_grad": -Z * (w[0] + w[1] * depths ** 2)}
    for k in FIELDS:
        assert rel_err(res[k], exact[k]) < 1e-8, k
