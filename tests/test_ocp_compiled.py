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


# -- traced problems (plain numpy functions) and the `backend` keyword -------------------
def _vdp_twins():
    """The Van der Pol MPC window (benchmarks/_ocp_problems.VDP_MPC) twice: written with
    `invimbed.from_sympy`, and as plain vectorised numpy functions (traced)."""
    sp = pytest.importorskip("sympy")
    t, z0, z1, u = sp.symbols("t z0 z1 u")
    symbolic = invimbed.from_sympy(t, [z0, z1], [u], [z1, -z0 + (1 - z0 ** 2) * z1 + u],
                                   z0 ** 2 + z1 ** 2 + u ** 2, q=1.0)
    plain = invimbed.BolzaProblem(
        lambda t, z, u: np.stack([z[:, 1], -z[:, 0] + (1 - z[:, 0] ** 2) * z[:, 1] + u[:, 0]],
                                 axis=1),
        lambda t, z, u: z[:, 0] ** 2 + z[:, 1] ** 2 + u[:, 0] ** 2, q=1.0, vectorized=True)
    return symbolic, plain


_VDP = dict(p=0.0, intervals=20, n_controls=1, control_bounds=(-0.3, 1.0))


def test_traced_problem_runs_the_compiled_rows_as_its_sympy_twin():
    """A problem of plain numpy functions whose trace succeeds gets the compiled rows:
    its rows (ends, sensitivities, steps, dense output) equal those of its from_sympy
    twin to 1e-12, first and second order."""
    from invimbed._control.ocp import variational
    from invimbed._control.ocp.second_order import HESSIAN_TOL_FACTOR, SecondOrderRows
    from invimbed._core.derivatives.traced import TracedProvider

    symbolic, plain = _vdp_twins()
    provs = [symbolic.provider(2, 1), plain.provider(2, 1)]
    assert isinstance(provs[1], TracedProvider)
    assert all(variational.rows_backend("numba", p) == "numba" for p in provs)
    w = np.random.default_rng(5).normal(scale=0.5, size=3 * 3)
    out = []
    for prov in provs:
        sh = _shooting(prov, False)
        sol = sh.solve(w, record=True)
        rows = SecondOrderRows(sh)
        ends = rows.ends(w, rows.solve(w))
        out.append((sol, sh.interior(w, sol, np.array([0.3, 0.7])), ends))
    (a, ia, ea), (b, ib, eb) = out
    for name in ("F", "C", "Fs", "Fu", "Cs", "Cu"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12,
                                   atol=1e-14, err_msg=name)
    np.testing.assert_array_equal(a.nsteps, b.nsteps)
    for x, y in zip(ia, ib):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-14)
    for name in ("y", "d1", "d2"):
        np.testing.assert_allclose(getattr(eb, name), getattr(ea, name), rtol=1e-12,
                                   atol=1e-14, err_msg=name)
    assert variational.second_order_rows(provs[1], np.arange(3), HESSIAN_TOL_FACTOR)


@needs_ipopt
def test_traced_problem_solves_as_its_sympy_twin_on_every_backend():
    """solve_ocp on the traced twin: compiled (``backend="auto"`` and ``"numba"``) and
    numpy, the same iterations, J to 1e-9 and controls to 1e-7 as the from_sympy twin;
    the result names the rows that ran."""
    symbolic, plain = _vdp_twins()
    ref = invimbed.solve_ocp(symbolic, [1.0, 0.0], **_VDP)
    assert ref.success and ref.backend == "numba"
    for backend in ("auto", "numba", "numpy"):
        res = invimbed.solve_ocp(plain, [1.0, 0.0], backend=backend, **_VDP)
        assert res.success and res.backend == ("numpy" if backend == "numpy" else "numba")
        assert res.nit == ref.nit and res.hessian == "exact"
        assert abs(res.fun - ref.fun) <= 1e-9 * abs(ref.fun)
        np.testing.assert_allclose(res.controls, ref.controls, atol=1e-7)


def test_backend_is_checked_and_numba_refused_where_it_cannot_run(monkeypatch):
    """An unknown ``backend`` names the argument and its values; ``"numba"`` where the
    compiled rows cannot run (finite-difference derivatives, collocation, no numba)
    says why and the fix, where ``"auto"`` quietly takes numpy."""
    from invimbed._control.ocp import variational

    symbolic, plain = _vdp_twins()
    kw = dict(_VDP, solver="slsqp", max_iter=1)
    with pytest.raises(ValueError, match=r"`backend` must be one of 'auto', 'numpy', "
                                         r"'numba', but got 'cuda'"):
        invimbed.OCPSolver(symbolic, [1.0, 0.0], backend="cuda", **kw)
    fd = invimbed.BolzaProblem(plain.dynamics, plain.running_loss, q=1.0, vectorized=True,
                               derivatives="finite-differences")
    with pytest.raises(ValueError, match=r"backend='numba'.*finite differences.*"
                                         r"backend='auto'.*backend='numpy'"):
        invimbed.OCPSolver(fd, [1.0, 0.0], backend="numba", **kw)
    assert invimbed.OCPSolver(fd, [1.0, 0.0], **kw).backend == "numpy"
    with pytest.raises(ValueError, match=r"backend='numba'.*transcription='collocation'"):
        invimbed.OCPSolver(symbolic, [1.0, 0.0], backend="numba", transcription="collocation",
                           **kw)
    assert invimbed.OCPSolver(symbolic, [1.0, 0.0], transcription="collocation",
                              **kw).backend == "numpy"
    monkeypatch.setattr(variational, "_have_numba", lambda: False)
    with pytest.raises(ValueError, match=r"backend='numba'.*numba is not installed.*pip "
                                         r"install"):
        invimbed.OCPSolver(symbolic, [1.0, 0.0], backend="numba", **kw)
    assert invimbed.OCPSolver(symbolic, [1.0, 0.0], **kw).backend == "numpy"


def test_backend_numpy_runs_no_compiled_rows(monkeypatch):
    """``backend="numpy"`` never generates or calls the compiled rows."""
    from invimbed._backends import ocp_rows
    from invimbed._control.ocp import variational

    def forbidden(*args, **kwargs):
        raise AssertionError("the compiled rows ran")

    monkeypatch.setattr(variational, "compiled_rows", forbidden)
    monkeypatch.setattr(ocp_rows, "integrate", forbidden)
    symbolic, _ = _vdp_twins()
    res = invimbed.solve_ocp(symbolic, [1.0, 0.0], backend="numpy", solver="slsqp", **_VDP)
    assert res.success and res.backend == "numpy"


def test_compiling_a_problems_rows_is_announced(monkeypatch):
    """The first compilation of a problem's generated rows writes one line saying what
    is compiled, its expected duration and how to run without it."""
    import io

    from invimbed._core.runtime import compile_cost

    stream = io.StringIO()
    monkeypatch.setattr(compile_cost, "STREAM", stream)
    monkeypatch.setattr(compile_cost, "compiled", lambda dispatcher, sig=None: False)
    monkeypatch.setattr(compile_cost, "record", lambda *args: None)
    _, plain = _vdp_twins()
    invimbed.OCPSolver(plain, [1.0, 0.0], solver="slsqp", **_VDP)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert ("compiling this problem's generated shooting rows" in lines[0]
            and "expected about" in lines[0] and "backend='numpy'" in lines[0])
