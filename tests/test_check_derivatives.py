"""``check_derivatives``: passes on every correct provider, and fails, on the right
derivative name, when a user derivative is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import invimbed
from invimbed._core.problem.check import TOL, DerivativeCheck, check_derivatives
from problems import (logistic_functions, lq_functions, pendulum_functions,
                      vanderpol_functions)

CLOSED_FORMS = {
    "pendulum": pendulum_functions,
    "vanderpol": vanderpol_functions,
    "logistic": logistic_functions,
    "lq": lambda: lq_functions([[-1.0, 0.3], [0.2, -0.7]], [[1.0], [0.5]], np.eye(2),
                               [[0.4]], [[0.1], [0.2]], [[2.0, 0.1], [0.1, 1.0]]),
}
POINT = {"pendulum": ([0.3, -0.4], [0.2, 0.5]), "vanderpol": ([0.3, -0.4], [0.2, 0.5]),
         "logistic": ([0.3], [0.7]), "lq": ([0.3, -0.4], [0.6])}

points = st.tuples(st.floats(-1.5, 1.5), st.floats(-1.5, 1.5), st.floats(-1.0, 1.0),
                   st.floats(-1.0, 1.0))


def fd_problem(pf):
    return invimbed.BolzaProblem(pf.f, pf.R, pf.T, q=pf.q, vectorized=True,
                                 derivatives="finite-differences")


# -- correct providers pass ----------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_user_callables_pass(name):
    x, th = POINT[name]
    res = check_derivatives(CLOSED_FORMS[name]().problem(), x, th, order=3)
    assert isinstance(res, DerivativeCheck)
    assert res.ok, res
    assert res.max_error < 1e-9, res      # exact parents: only rounding is left
    assert not res.suspects
    n = 3 * 3 + 2 * 3                     # f, R, T: z orders 1..3; f, R: theta with dz 0..2
    assert len(res.errors) == n


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_finite_differences_pass(name):
    x, th = POINT[name]
    res = check_derivatives(fd_problem(CLOSED_FORMS[name]()), x, th, order=3)
    assert res.ok, res
    assert res.max_error < 1e-5, res      # difference noise of the provider itself
    assert "finite-difference" in res.provider


@settings(max_examples=10, deadline=None, derandomize=True)
@given(pt=points, t=st.floats(-1.0, 0.0))
def test_passes_at_random_points(pt, t):
    pf = vanderpol_functions()
    x = np.array([pt[:2], [pt[1], pt[0]]])
    res = check_derivatives(pf.problem(), x, pt[2:], t=t, order=3)
    assert res.ok and res.max_error < 1e-9, res


def test_sympy_provider_passes():
    sp = pytest.importorskip("sympy")
    from invimbed._core.problem.sympy_problem import from_sympy

    t, phi, v, u = sp.symbols("t phi v u")
    problem = from_sympy(t, [phi, v], [u], [v, -sp.sin(phi) * sp.exp(v / 3) + u * sp.cos(t)],
                         running_loss=u ** 2 * phi ** 3, terminal_loss=sp.cosh(phi * v))
    res = check_derivatives(problem, [[0.3, -0.2], [1.0, 0.4]], [0.4], t=-0.3, order=4)
    assert res.ok and res.max_error < 1e-8, res
    assert not res.skipped
    assert "f_zzzz" in res.errors and "R_zzztheta" in res.errors
    # a provider can be checked directly
    res2 = check_derivatives(problem.provider(2, 1), [0.3, -0.2], [0.4], order=2)
    assert res2.ok


def test_missing_losses_are_not_checked():
    problem = invimbed.BolzaProblem(lambda t, z, th: -z ** 3)
    res = check_derivatives(problem, [0.5, 1.0])
    assert res.ok
    assert set(res.errors) == {"f_z", "f_zz"}


def test_orders_above_the_provider_limit_are_skipped():
    pf = pendulum_functions()
    prov = invimbed.FiniteDifferences({"f": pf.f, "R": pf.R, "T": lambda t, z, th: pf.T(z)},
                                      2, 2, max_fd_levels=3)
    res = check_derivatives(prov, [0.3, 0.1], [0.2, 0.1], order=4)
    assert res.ok
    # total order 4 is beyond 3 nested levels of differences
    assert set(res.skipped) == {"f_zzzz", "f_zzztheta", "R_zzzz", "R_zzztheta", "T_zzzz"}
    assert "f_zztheta" in res.errors and "T_zzz" in res.errors
    assert "not checked" in repr(res)
    limit = fd_problem(pf).provider(2, 2).max_order
    res = check_derivatives(fd_problem(pf), [0.3, 0.1], [0.2, 0.1], order=limit + 1)
    assert res.skipped and all(len(k) - 2 - 4 * k.count("theta") == limit + 1
                               for k in res.skipped)
    assert "not checked" in repr(res)


# -- wrong derivatives fail, on the right name ---------------------------------------
def _with(pf, **replace):
    d = dict(pf.derivatives)
    d.update(replace)
    return invimbed.BolzaProblem(pf.f, pf.R, pf.T, vectorized=True, derivatives=d)


def test_wrong_f_z_is_reported():
    pf = vanderpol_functions()
    good = pf.derivatives["f_z"]

    def wrong(t, z, th):   # a missing term in d f_1 / d x
        out = good(t, z, th).copy()
        out[:, 1, 0] += 0.5 * z[:, 1]
        return out

    res = check_derivatives(_with(pf, f_z=wrong), [[0.3, 0.5], [1.0, -1.0]], [0.2, 0.4])
    assert not res.ok
    assert res.errors["f_z"] > 0.1
    assert res.suspects == ["f_z"]
    assert res.details["f_z"]["index"][1:] == (1, 0)        # the wrong entry
    for name in ("f_theta", "R_z", "R_zz", "R_theta", "R_ztheta", "T_z", "T_zz"):
        assert res.errors[name] < 1e-9, name
    text = repr(res)
    assert "FAILED" in text and "suspects" in text and "f_z" in text


def test_wrong_user_f_z_alone_is_reported():
    """The brief's case: only ``derivatives={'f_z': wrong}``, the rest by differences."""
    problem = invimbed.BolzaProblem(
        lambda t, z, th: np.array([z[1], -np.sin(z[0]) + th[0]]),
        terminal_loss=lambda z: 0.5 * z @ z,
        derivatives={"f_z": lambda t, z, th: np.array([[0.0, 1.0], [np.cos(z[0]), 0.0]])})
    res = check_derivatives(problem, [0.3, 0.1], [0.0])
    assert not res.ok and res.suspects == ["f_z"]
    assert res.errors["f_z"] == pytest.approx(2 * np.cos(0.3), rel=1e-6)
    assert res.errors["T_z"] < TOL and res.errors["f_theta"] < TOL


def test_wrong_axis_order_of_a_mixed_derivative_is_reported():
    pf = vanderpol_functions()
    good = pf.derivatives["f_ztheta"]
    swapped = _with(pf, f_ztheta=lambda t, z, th: np.swapaxes(good(t, z, th), 2, 3))
    res = check_derivatives(swapped, [0.3, 0.5], [0.2, 0.4], order=3)
    assert not res.ok and res.suspects == ["f_ztheta"]
    assert res.errors["f_ztheta"] > 0.1
    assert res.errors["f_zz"] < 1e-9 and res.errors["f_theta"] < 1e-9


@pytest.mark.parametrize("key, factor", [("T_zz", 2.0), ("R_theta", -1.0), ("R_zzz", 0.5)])
def test_wrong_derivatives_of_the_losses_are_reported(key, factor):
    pf = pendulum_functions()
    good = pf.derivatives[key]
    wrong = (lambda z: factor * good(z)) if key[0] == "T" else \
        (lambda t, z, th: factor * good(t, z, th))
    res = check_derivatives(_with(pf, **{key: wrong}), [0.9, -0.4], [0.3, 0.2], order=3)
    assert not res.ok and res.suspects == [key], res
    assert res.errors[key] > 1e-2


def test_small_errors_are_caught_with_a_tighter_tolerance():
    pf = pendulum_functions()
    good = pf.derivatives["f_z"]
    slightly = _with(pf, f_z=lambda t, z, th: good(t, z, th) * (1 + 1e-6))
    x, th = [0.9, -0.4], [0.3, 0.2]
    assert check_derivatives(slightly, x, th).ok                # within the default 1e-4
    res = check_derivatives(slightly, x, th, tol=1e-8)
    assert not res.ok and "f_z" in res.suspects


# -- inputs ----------------------------------------------------------------------------
def test_bad_inputs_name_the_argument():
    problem = pendulum_functions().problem()
    with pytest.raises(TypeError, match="`problem` must be an invimbed.BolzaProblem"):
        check_derivatives(lambda t, z, th: z, [1.0])
    with pytest.raises(ValueError, match="`x` must have shape"):
        check_derivatives(problem, np.zeros((2, 2, 2)), [0.0, 0.0])
    with pytest.raises(ValueError, match="`x` must be finite"):
        check_derivatives(problem, [np.nan, 0.0], [0.0, 0.0])
    with pytest.raises(TypeError, match="`x` must be array_like"):
        check_derivatives(problem, "ab", [0.0, 0.0])
    with pytest.raises(ValueError, match=r"`theta` must have shape \(M,\) or \(B, M\) with B = 2"):
        check_derivatives(problem, np.zeros((2, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="`theta` must be finite"):
        check_derivatives(problem, [0.0, 0.0], [np.inf, 0.0])
    with pytest.raises(ValueError, match="`order` must be an integer >= 1"):
        check_derivatives(problem, [0.0, 0.0], [0.0, 0.0], order=0)
    with pytest.raises(TypeError, match="`order` must be an integer, but got 1.5"):
        check_derivatives(problem, [0.0, 0.0], [0.0, 0.0], order=1.5)
    with pytest.raises(ValueError, match="`tol` must be positive"):
        check_derivatives(problem, [0.0, 0.0], [0.0, 0.0], tol=0)
    with pytest.raises(TypeError, match="`t` must be a real number"):
        check_derivatives(problem, [0.0, 0.0], [0.0, 0.0], t="now")
    with pytest.raises(ValueError, match="`t` must be finite"):
        check_derivatives(problem, [0.0, 0.0], [0.0, 0.0], t=np.inf)
    prov = problem.provider(2, 2)
    with pytest.raises(ValueError, match="`theta` is required"):
        check_derivatives(prov, [0.0, 0.0])
    with pytest.raises(ValueError, match="`theta` must have M = 2"):
        check_derivatives(prov, [0.0, 0.0], [0.0])
    with pytest.raises(ValueError, match="`x` must have last dimension N = 2"):
        check_derivatives(prov, [0.0], [0.0, 0.0])
