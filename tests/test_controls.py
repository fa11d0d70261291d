"""Open-loop controls: theta(t), d theta / d w, parameter layout, breakpoints."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invimbed import Constant, Control, PiecewiseConstant


def test_constant():
    c = Constant([1.0, -2.0])
    np.testing.assert_array_equal(c.theta(-3.0), [1.0, -2.0])
    np.testing.assert_array_equal(c.jacobian(5.0), np.eye(2))
    assert (c.size, c.n_params) == (2, 2)
    assert c.breakpoints.size == 0
    np.testing.assert_array_equal(c.with_params([3.0, 4.0]).theta(0.0), [3.0, 4.0])


def test_piecewise_constant_row_major_parameters():
    knots = [-1.0, -0.4, 0.0]
    values = np.array([[1.0, 2.0], [3.0, 4.0]])
    c = PiecewiseConstant(knots, values)
    np.testing.assert_array_equal(c.w, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(c.theta(-0.7), [1.0, 2.0])
    np.testing.assert_array_equal(c.theta(-0.2), [3.0, 4.0])
    np.testing.assert_array_equal(c.theta(0.0), [3.0, 4.0])      # last interval closed
    np.testing.assert_array_equal(c.theta(-0.4), [3.0, 4.0])     # right-continuous
    # the piece of an interval is taken from its inside, whatever the end points
    assert c.piece(-0.4, -1.0, -0.4) == 0 and c.piece(-0.4, -0.4, 0.0) == 1
    jac = c.jacobian(-0.7)
    np.testing.assert_array_equal(jac, [[1, 0, 0, 0], [0, 1, 0, 0]])
    np.testing.assert_array_equal(c.breakpoints, [-0.4])
    with pytest.raises(ValueError, match=r"t = 0.5, outside \[knots\[0\], knots\[-1\]\] = \[-1.0, 0.0\]"):
        c.theta(0.5)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 5), st.integers(1, 3), st.floats(0.0, 1.0))
def test_piecewise_constant_jacobian_is_derivative(K, M, u):
    """theta is linear in w: theta(t; w + dw) - theta(t; w) = jacobian @ dw exactly."""
    rng = np.random.default_rng(K * 10 + M)
    knots = np.cumsum(rng.uniform(0.1, 1.0, K + 1))
    c = PiecewiseConstant(knots, rng.normal(size=(K, M)))
    t = knots[0] + u * (knots[-1] - knots[0])
    dw = rng.normal(size=K * M)
    lhs = c.with_params(c.w + dw).theta(t) - c.theta(t)
    np.testing.assert_allclose(lhs, c.jacobian(t) @ dw, atol=1e-12)


def test_user_control_fd_jacobian_matches_given_jacobian():
    fn = lambda t, w: np.array([w[0] * np.sin(t), w[0] * w[1] + t])  # noqa: E731
    jac = lambda t, w: np.array([[np.sin(t), 0.0], [w[1], w[0]]])  # noqa: E731
    w = [0.8, -1.3]
    a = Control(fn, w)
    b = Control(fn, w, jac=jac)
    for t in (-1.0, 0.3):
        np.testing.assert_allclose(a.jacobian(t), b.jacobian(t), atol=1e-9)
        np.testing.assert_array_equal(a.theta(t), fn(t, np.array(w)))
    assert a.size == 2 and a.n_params == 2
    np.testing.assert_allclose(a.with_params([1.0, 1.0]).theta(0.0), [0.0, 1.0])
