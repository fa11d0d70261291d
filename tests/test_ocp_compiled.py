"""The compiled shooting rows (`invimbed._backends.ocp_rows`): a from_sympy problem's
intervals integrated by the compiled per-row loop with a generated numba right-hand side
give what the numpy ensemble gives (the same steps, values to rounding), first and
second order, and the same `solve_ocp` result."""

import numpy as np
import pytest

import invimbed

pytest.importorskip("numba")
pytest.importorskip("sympy")

from test_ocp_solver import _gallery_arguments, needs_ipopt  # noqa: E402
from test_ocp import nonautonomous_problem  # noqa: E402


@pytest.fixture
def numpy_rows(monkeypatch):
    """A switch: ``numpy_rows()`` makes every later solve take the numpy path."""
    from invimbed._control.ocp import variational

    return lambda: monkeypatch.setattr(variational, "compiled_available", lambda p: False)


def _shooting(prov, free, rtol=1e-9, atol=1e-11):
    from invimbed._control.ocp.shooting import Shooting

    tau = np.array([0.0, 0.3, 0.6, 1.0])
    return Shooting(prov, np.array([0.4, -0.2]), 1.0, tau, free_horizon=free, horizon=1.3,
                    m=1, rtol=rtol, atol=atol)


def _point(free):
    w = np.random.default_rng(3).normal(scale=0.5, size=3 * 3 + int(free))
    if free:
        w[-1] = 1.3
    return w


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_compiled_rows_equal_the_numpy_rows(free, numpy_rows):
    """End states, costs, their sensitivities in the nodes, controls and horizon, the
    step counts, the defects' Jacobian and the dense output inside the intervals, on a
    time-dependent problem with running and terminal losses: the same steps, the values
    to rounding."""
    from invimbed._control.ocp import variational

    prov = nonautonomous_problem(q=1.0).provider(2, 1)
    assert variational.first_order_rows(prov) is not None
    w = _point(free)
    fractions = np.array([0.25, 0.5, 0.9])

    def solve():
        sh = _shooting(prov, free)
        sol = sh.solve(w, record=True)
        return sh, sol, sh.interior(w, sol, fractions)

    sh, fast, inside_fast = solve()
    numpy_rows()
    _, slow, inside_slow = solve()
    for name in ("F", "C", "Fs", "Fu", "Cs", "Cu", "FH", "CH"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name),
                                   rtol=1e-12, atol=1e-14, err_msg=name)
    np.testing.assert_array_equal(fast.nsteps, slow.nsteps)
    assert fast.nfev == slow.nfev and fast.failure is None is slow.failure
    np.testing.assert_allclose(sh.defect_jacobian(fast), sh.defect_jacobian(slow),
                               rtol=1e-12, atol=1e-14)
    for a, b in zip(inside_fast, inside_slow):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_compiled_second_order_rows_equal_the_numpy_rows(free, numpy_rows):
    """The second-order rows of the exact Hessian (`second_order.SecondOrderRows`),
    at the row ends and inside: the compiled rows carry ``Y_pp`` divided by
    `HESSIAN_TOL_FACTOR` under the loop's one tolerance, the numpy rows under a looser
    per-column one, so both are accurate to their tolerance, not equal to rounding:
    integrated at rtol 1e-11 they agree to 1e-9."""
    from invimbed._control.ocp import variational
    from invimbed._control.ocp.second_order import HESSIAN_TOL_FACTOR, SecondOrderRows

    prov = nonautonomous_problem(q=1.0).provider(2, 1)
    w = _point(free)
    fractions = np.array([0.4, 0.8])

    def solve():
        rows = SecondOrderRows(_shooting(prov, free, rtol=1e-11, atol=1e-13))
        solved = rows.solve(w, record=True)
        return rows.ends(w, solved), rows.inside(w, solved, fractions)[1]

    ends_fast, inside_fast = solve()
    assert variational.second_order_rows(prov, np.arange(3), HESSIAN_TOL_FACTOR) is not None
    numpy_rows()
    ends_slow, inside_slow = solve()
    for fast, slow in ((ends_fast, ends_slow), (inside_fast, inside_slow)):
        for name in ("y", "d1", "d2"):
            a, b = getattr(fast, name), getattr(slow, name)
            assert np.max(np.abs(a - b)) <= 1e-9 * max(1.0, np.max(np.abs(b))), name


def test_compiled_row_failure_is_reported_as_the_numpy_one(numpy_rows):
    """A row that blows up (``z' = z^2`` from 2 over a unit interval: infinite at t =
    0.5) fails at the same place with the same message on both paths."""
    sp = pytest.importorskip("sympy")
    from invimbed._control.ocp.shooting import Shooting

    t, z, u = sp.symbols("t z u")
    prov = invimbed.from_sympy(t, [z], [u], [z ** 2 + u], u ** 2, q=1.0).provider(1, 1)
    w = np.array([0.0, 1.0])

    def failure():
        sh = Shooting(prov, np.array([2.0]), 1.0, np.array([0.0, 1.0]), free_horizon=False,
                      horizon=1.0, m=1)
        sol = sh.solve(w)
        return sol.failure, sol.F

    fast, F = failure()
    numpy_rows()
    slow, F_slow = failure()
    assert fast is not None and "shooting interval 0" in fast
    assert fast == slow
    assert np.all(np.isnan(F)) and np.all(np.isnan(F_slow))


@needs_ipopt
def test_solve_ocp_gives_the_same_result_compiled_and_numpy(numpy_rows, monkeypatch):
    """The gallery's Van der Pol problem (20 intervals, exact Hessian): the same
    iterations, objective and controls on both paths."""
    problem, x, kw, fast = _gallery_arguments("ocp_vanderpol", 20, monkeypatch)
    numpy_rows()
    slow = invimbed.solve_ocp(problem, x, **kw)
    assert fast.success and slow.success and fast.hessian == "exact"
    assert fast.nit == slow.nit
    assert abs(fast.fun - slow.fun) <= 1e-9 * abs(slow.fun)
    np.testing.assert_allclose(fast.controls, slow.controls, atol=1e-7)


def test_rows_numba_cannot_compile_take_the_numpy_path(monkeypatch):
    """Where the generated code cannot be printed or compiled, the numpy rows serve
    (the same values): the solve does not fail."""
    from invimbed._control.ocp import variational

    def refuse(*args):
        raise ValueError("cannot print")

    monkeypatch.setattr(variational, "_row_module", refuse)
    prov = nonautonomous_problem(q=1.0).provider(2, 1)
    assert variational.first_order_rows(prov) is None
    sol = _shooting(prov, False).solve(_point(False))
    assert sol.failure is None and np.all(np.isfinite(sol.F))
