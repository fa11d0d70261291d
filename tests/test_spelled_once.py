"""Rules written once and used by several solvers: ``tol`` turned into an integrator's
``rtol``/``atol`` (`Accuracy.derived`, for the sweep and for its exact
fallback) and the names of the derivatives (`derivatives.derivative_name`, read back by
`parse_key`)."""

from __future__ import annotations

import itertools

import pytest

from invimbed._core.setup.settings import Accuracy
from invimbed._core.derivatives import derivative_name, parse_key
from invimbed._core.sweep.fallback import exact_options
from invimbed._core.sweep.imbedding import integrator_tolerances


@pytest.mark.parametrize("tol, sweep, exact", [
    ((1e-4, 1e-4), (1e-6, 1e-9), (1e-6, 1e-9)),         # capped at 1e-6 and 1e-9
    ((1e-6, 0.0), (1e-8, 1e-11), (1e-8, 1e-11)),         # atol 0: from rtol
    ((0.0, 1e-7), (1e-9, 1e-12), (1e-9, 1e-12)),         # rtol 0: from atol
    ((1e-12, 1e-13), (1e-12, 1e-14), (1e-12, 1e-14)),    # floored at 1e-12 and 1e-14
])
def test_tol_to_integrator_tolerances(tol, sweep, exact):
    acc = integrator_tolerances(Accuracy(tol=tol))
    r, a = acc.rtol, acc.atol
    assert r == pytest.approx(sweep[0], rel=1e-12) and a == pytest.approx(sweep[1], rel=1e-12)
    opts = exact_options("RK45", Accuracy(tol=tol, rtol=1e-3, atol=1e-3))
    assert opts["rtol"] == pytest.approx(exact[0], rel=1e-12)
    assert opts["atol"] == pytest.approx(exact[1], rel=1e-12)
    # the user's own rtol/atol win over tol in the sweep
    acc = integrator_tolerances(Accuracy(tol=tol, rtol=1e-3, atol=2e-3))
    assert (acc.rtol, acc.atol) == (1e-3, 2e-3)


def test_tolerances_from_tol_applies_factors_in_turn():
    t = 3.3e-7
    assert Accuracy(tol=(t, t)).derived((0.01,), (0.01, 1e-3), (0, 1), (0, 1)) == (
        0.01 * t, 0.01 * t * 1e-3)


def test_derivative_names_round_trip():
    for which, dz, dth in itertools.product("fRT", range(5), range(3)):
        if which == "T" and dth or dz + dth == 0:
            continue
        name = derivative_name(which, dz, dth)
        assert parse_key(name) == (which, dz, dth)
    assert derivative_name("f", 1, 1) == "f_ztheta" and derivative_name("R", 0, 0) == "R"
