"""The derivative layer: finite differences against closed-form tensors, the axes
convention, user derivatives taking precedence, and the FD error estimate."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invimbed import BolzaProblem, DerivativeOrderError, FiniteDifferences

# f(z, th) = [sin(z0) * th0, z0 * z1^2 + exp(th0 * z1)],  R = z0^2 z1 + th0^3,  T = cos(z0 z1)


def f(t, z, th):
    return np.stack([np.sin(z[..., 0]) * th[..., 0],
                     z[..., 0] * z[..., 1] ** 2 + np.exp(th[..., 0] * z[..., 1])], -1)


def R(t, z, th):
    return z[..., 0] ** 2 * z[..., 1] + th[..., 0] ** 3


def T(z):
    return np.cos(z[..., 0] * z[..., 1])


def exact(which, z, th, dz, dth):
    """Closed-form derivative tensors for one point (no batch axis)."""
    a, b = z
    c = th[0]
    e = np.exp(c * b)
    if which == "f":
        if (dz, dth) == (1, 0):
            return np.array([[np.cos(a) * c, 0.0], [b ** 2, 2 * a * b + c * e]])
        if (dz, dth) == (2, 0):
            out = np.zeros((2, 2, 2))
            out[0, 0, 0] = -np.sin(a) * c
            out[1, 0, 1] = out[1, 1, 0] = 2 * b
            out[1, 1, 1] = 2 * a + c * c * e
            return out
        if (dz, dth) == (3, 0):
            out = np.zeros((2, 2, 2, 2))
            out[0, 0, 0, 0] = -np.cos(a) * c
            for idx in [(0, 1, 1), (1, 0, 1), (1, 1, 0)]:
                out[(1,) + idx] = 2.0
            out[1, 1, 1, 1] = c ** 3 * e
            return out
        if (dz, dth) == (0, 1):
            return np.array([[np.sin(a)], [b * e]])
        if (dz, dth) == (1, 1):
            return np.array([[[np.cos(a)], [0.0]], [[0.0], [e + b * c * e]]])
    if which == "R":
        if (dz, dth) == (1, 0):
            return np.array([2 * a * b, a ** 2])
        if (dz, dth) == (2, 0):
            return np.array([[2 * b, 2 * a], [2 * a, 0.0]])
        if (dz, dth) == (0, 1):
            return np.array([3 * c ** 2])
        if (dz, dth) == (1, 1):
            return np.zeros((2, 1))
    if which == "T":
        u = a * b
        if dz == 1:
            return -np.sin(u) * np.array([b, a])
        if dz == 2:
            return (-np.cos(u) * np.outer([b, a], [b, a])
                    - np.sin(u) * np.array([[0.0, 1.0], [1.0, 0.0]]))
    raise KeyError((which, dz, dth))


CASES = [("f", 1, 0, 1e-8), ("f", 2, 0, 1e-6), ("f", 3, 0, 1e-4), ("f", 0, 1, 1e-8),
         ("f", 1, 1, 1e-6), ("R", 1, 0, 1e-8), ("R", 2, 0, 1e-6), ("R", 0, 1, 1e-8),
         ("R", 1, 1, 1e-6), ("T", 1, 0, 1e-8), ("T", 2, 0, 1e-6)]

points = st.tuples(st.floats(-1.5, 1.5), st.floats(-1.5, 1.5), st.floats(-1.0, 1.0))


def fd_provider():
    return BolzaProblem(f, R, T, vectorized=True, derivatives="finite-differences").provider(2, 1)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(points)
def test_finite_differences_match_closed_forms(pt):
    """Tolerances (relative to max(1, |exact|)): ~eps^(2/3) for one level of central
    differences, ~eps^(1/2) for two, ~eps^(2/5) for three."""
    prov = fd_provider()
    z = np.array([[pt[0], pt[1]]])
    th = np.array([[pt[2]]])
    for which, dz, dth, tol in CASES:
        got = prov.derivative(which, 0.0, z, th, dz=dz, dth=dth)[0]
        want = exact(which, z[0], th[0], dz, dth)
        scale = max(1.0, np.abs(want).max())
        assert np.abs(got - want).max() <= tol * scale, (which, dz, dth)


def test_batched_axes_convention():
    prov = fd_provider()
    rng = np.random.default_rng(0)
    z = rng.uniform(-1, 1, (5, 2))
    th = rng.uniform(-1, 1, (5, 1))
    d = prov.derivative("f", 0.0, z, th, dz=1, dth=1)
    assert d.shape == (5, 2, 2, 1)           # (B, out, z, theta)
    for b in range(5):
        np.testing.assert_allclose(d[b], exact("f", z[b], th[b], 1, 1), atol=1e-6)


def test_fd_error_estimate_bounds_the_error():
    prov = fd_provider()
    z, th = np.array([[0.4, -0.9]]), np.array([[0.6]])
    for which, dz, dth in [("f", 2, 0), ("f", 3, 0), ("R", 2, 0)]:
        got = prov.derivative(which, 0.0, z, th, dz=dz, dth=dth)[0]
        est = prov.derivative_error(which, 0.0, z, th, dz=dz, dth=dth)[0]
        err = np.abs(got - exact(which, z[0], th[0], dz, dth))
        # the Richardson estimate is within a factor 10 of the error or below the rounding floor
        assert np.all(err <= 10 * est + 1e-7), (which, dz, err.max(), est.max())


def test_user_derivatives_are_used_and_differenced_further():
    calls = {"f_z": 0}

    def f_z(t, z, th):
        calls["f_z"] += 1
        return np.stack([exact("f", zz, tt, 1, 0) for zz, tt in zip(z, th)])

    def f_untraced(t, z, th):    # compares a value: does not trace (docs/derivatives.md)
        if np.any(z != z):
            raise ValueError("NaN")
        return f(t, z, th)

    # where the functions do not trace, the rest are differences of the given ones
    prov = BolzaProblem(f_untraced, R, T, vectorized=True,
                        derivatives={"f_z": f_z}).provider(2, 1)
    assert prov.derivative_source.startswith("user: f_z; the rest by finite differences")
    z, th = np.array([[0.3, 0.5]]), np.array([[-0.4]])
    np.testing.assert_array_equal(prov.derivative("f", 0, z, th, dz=1)[0],
                                  exact("f", z[0], th[0], 1, 0))
    # the second derivative is one level of differences of the exact first: more accurate
    d2 = prov.derivative("f", 0, z, th, dz=2)[0]
    assert np.abs(d2 - exact("f", z[0], th[0], 2, 0)).max() < 1e-9
    assert calls["f_z"] >= 2
    assert prov.fd_levels("f", 2, 0) == 1 and prov.fd_levels("f", 1, 0) == 0
    # where they trace, the given f_z is called as it is and the rest are the trace's
    calls["f_z"] = 0
    prov = BolzaProblem(f, R, T, vectorized=True, derivatives={"f_z": f_z}).provider(2, 1)
    np.testing.assert_array_equal(prov.derivative("f", 0, z, th, dz=1)[0],
                                  exact("f", z[0], th[0], 1, 0))
    d2 = prov.derivative("f", 0, z, th, dz=2)[0]
    assert np.abs(d2 - exact("f", z[0], th[0], 2, 0)).max() < 1e-13
    assert calls["f_z"] == 1


def test_non_vectorized_functions_are_called_row_by_row():
    pb = BolzaProblem(lambda t, z, th: np.array([z[1], -z[0] * th[0]]),
                      terminal_loss=lambda z: float(z @ z))
    prov = pb.provider(2, 1)
    z = np.array([[1.0, 2.0], [3.0, 4.0]])
    th = np.array([[2.0], [2.0]])
    np.testing.assert_allclose(prov.derivative("f", 0, z, th), [[2.0, -2.0], [4.0, -6.0]])
    np.testing.assert_allclose(prov.derivative("f", 0, z, th, dz=1)[1], [[0, 1], [-2, 0]], atol=1e-9)
    np.testing.assert_allclose(prov.derivative("T", 0, z, None, dz=1), 2 * z, atol=1e-8)


def test_missing_losses_are_zero_to_every_order():
    prov = BolzaProblem(f, vectorized=True).provider(2, 1)
    z, th = np.array([[0.3, 0.5]]), np.array([[0.2]])
    assert prov.derivative("R", 0, z, th).shape == (1,)
    assert not prov.derivative("R", 0, z, th, dz=5).any()
    assert not prov.derivative("T", 0, z, None, dz=4).any()


def test_order_limit_is_reported():
    prov = fd_provider()
    with pytest.raises(DerivativeOrderError, match=r"up to total order 4, but order 5"):
        prov.derivative("f", 0, np.zeros((1, 2)), np.zeros((1, 1)), dz=5)
    assert isinstance(prov, FiniteDifferences)
