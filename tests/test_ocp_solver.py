"""`invimbed.OCPSolver`: the shooting NLP built once, solved from new initial states,
warm-started from the last solution moved on by some intervals (multipliers included).

References: `solve_ocp` on the gallery problems (the same transcription, solved cold),
a cold solve of the same window (the optimum a warm start must reach), and the moved
warm start written out by hand from the blocks of the decision vector.
"""

from __future__ import annotations

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp.guess import moved
from invimbed._control.ocp.solvers import have_ipopt

from test_ocp import _example

needs_ipopt = pytest.mark.skipif(not have_ipopt(), reason="cyipopt is not installed")

VDP_H, VDP_K = 1.0, 20


def vanderpol(q: float = VDP_H) -> invimbed.BolzaProblem:
    """The Van der Pol window of examples/receding_horizon.py."""
    sp = pytest.importorskip("sympy")
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], [z2, -z1 + (1 - z1 ** 2) * z2 + u],
                               z1 ** 2 + z2 ** 2 + u ** 2, q=q)


def vdp_solver(**kw) -> invimbed.OCPSolver:
    return invimbed.OCPSolver(vanderpol(), [1.0, 0.0], p=0.0, intervals=VDP_K,
                              control_bounds=(-0.3, 1.0), **kw)


def _gallery_arguments(name: str, K: int, monkeypatch) -> tuple:
    """The problem, state and keywords with which a gallery example calls `solve_ocp`,
    and its result."""
    ex = _example(name)
    calls = []
    real = invimbed.solve_ocp

    def spy(problem, x, **kw):
        calls.append((problem, x, kw))
        return real(problem, x, **kw)

    with monkeypatch.context() as m:
        m.setattr(invimbed, "solve_ocp", spy)
        res = ex.solve(K)
    (problem, x, kw), = calls
    return problem, x, kw, res


@needs_ipopt
@pytest.mark.parametrize("name", [
    "ocp_vanderpol", "ocp_min_time", "ocp_bryson_denham", "ocp_lq_tracking",
    pytest.param("ocp_rayleigh", marks=pytest.mark.slow),
    "ocp_hypersensitive"])
def test_solver_object_equals_solve_ocp_on_the_gallery(name, monkeypatch):
    """Built once, the solver gives `solve_ocp`'s result (the same iterates: one code
    path); a second cold solve gives it again (IPOPT's problem reused, its warm-start
    options set back); a warm re-solve of the same window from its own optimum stays
    there in at most two iterations."""
    problem, x, kw, ref = _gallery_arguments(name, None if "hyper" in name else 20,
                                             monkeypatch)
    assert ref.success, ref.message
    solver = invimbed.OCPSolver(problem, x, **kw)
    first = solver.solve()
    np.testing.assert_array_equal(first.x, ref.x)
    assert first.fun == ref.fun and first.nit == ref.nit and not first.warm_start
    again = solver.solve(warm_start=False)
    np.testing.assert_array_equal(again.x, ref.x)
    warm = solver.solve(shift=0)
    assert warm.success and warm.warm_start, warm.message
    assert warm.nit <= min(2, ref.nit)
    assert abs(warm.fun - ref.fun) <= 1e-7 * max(1.0, abs(ref.fun))


def _window_pair(solver_name: str, **kw):
    """A warm re-solve from the state 5 intervals on (the last solution moved 5
    intervals), and a cold solve from that state by a fresh solver."""
    mpc = vdp_solver(solver=solver_name, **kw)
    first = mpc.solve()
    assert first.success, first.message
    x1 = first.states[5] + np.array([0.01, -0.01])   # the plant drifted off the plan
    warm = mpc.solve(x1, shift=5)
    cold = vdp_solver(solver=solver_name, **kw).solve(x1)
    return first, warm, cold


@needs_ipopt
def test_warm_resolve_from_a_moved_state_is_faster_and_reaches_the_cold_optimum():
    # tol 1e-8: two optima of our KKT check at tol 1e-6 may differ by ~1e-6 in J
    first, warm, cold = _window_pair("ipopt", tol=1e-8)
    assert warm.success and cold.success and warm.warm_start and not cold.warm_start
    assert warm.nit < cold.nit, (warm.nit, cold.nit)
    assert abs(warm.fun - cold.fun) <= 1e-7 * abs(cold.fun)
    np.testing.assert_allclose(warm.controls, cold.controls, atol=1e-4)
    np.testing.assert_allclose(warm.states, cold.states, atol=1e-5)


def test_scipy_fallback_warm_starts_the_point():
    """SLSQP takes no multipliers: the point alone is moved on. From its own optimum it
    stops at once; from a moved state it reaches the cold optimum (its BFGS matrix
    starts anew either way, so it saves few iterations there: 11 and 11 here)."""
    first, warm, cold = _window_pair("slsqp")
    assert warm.success and cold.success and warm.warm_start
    assert abs(warm.fun - cold.fun) <= 1e-6 * abs(cold.fun)
    np.testing.assert_allclose(warm.controls, cold.controls, atol=1e-3)
    mpc = vdp_solver(solver="slsqp")
    start = mpc.solve()
    again = mpc.solve(shift=0)
    assert again.success and again.nit <= 2 < start.nit, (again.nit, start.nit)


@needs_ipopt
def test_multipliers_make_the_warm_start():
    """From its own optimum with its multipliers IPOPT stops at once; from the same
    point without them (a cold start's options: a given guess) it needs more."""
    mpc = vdp_solver()
    first = mpc.solve()
    warm = mpc.solve(shift=0)
    point_only = mpc.solve(initial_guess=first)
    assert warm.warm_start and not point_only.warm_start
    assert warm.nit <= 1 < point_only.nit, (warm.nit, point_only.nit)
    assert abs(warm.fun - first.fun) <= 1e-9 * abs(first.fun)


def test_moved_takes_each_interval_from_the_one_shift_on():
    """The warm start written out by hand: controls, node states, bound multipliers
    and the defects' multipliers of interval k from interval k + shift (the last one
    repeated); the path constraint's node multipliers likewise; the final state's
    stay."""
    solver = invimbed.OCPSolver(
        vanderpol(), [1.0, 0.0], p=0.0, intervals=4, control_bounds=(-0.3, 1.0),
        final_state=[0.0, np.nan], path_constraints=lambda t, z, u: np.array([z[0] - 2.0]),
        solver="slsqp")
    nlp = solver.nlp
    K, n, m = 4, 2, 1
    w = np.arange(nlp.n, dtype=float) / 100.0                     # inside the bounds
    y = np.arange(nlp.m, dtype=float)
    z_lo, z_hi = np.arange(nlp.n) + 100.0, np.arange(nlp.n) + 200.0
    w2, (y2, zl2, zh2) = moved(w, (y, z_lo, z_hi), nlp, 1)
    blocks = w.reshape(K, n + m)
    want = np.concatenate([blocks[1], blocks[2], blocks[3], blocks[3]])
    np.testing.assert_array_equal(w2, want)
    np.testing.assert_array_equal(zl2, np.concatenate(
        [z_lo.reshape(K, n + m)[k] for k in (1, 2, 3, 3)]))
    np.testing.assert_array_equal(zh2 - 100.0, zl2)
    defects = y[:K * n].reshape(K, n)
    np.testing.assert_array_equal(y2[:K * n], defects[[1, 2, 3, 3]].ravel())
    np.testing.assert_array_equal(y2[K * n:K * n + 1], y[K * n:K * n + 1])   # final state
    path = y[K * n + 1:]                     # nodes 0..K-1 as (k, 0), then the end (K-1, 1)
    np.testing.assert_array_equal(y2[K * n + 1:], path[[1, 2, 3, 3, 4]])
    w0, none = moved(w, None, nlp, 0)
    np.testing.assert_array_equal(w0, w)
    assert none is None


def test_bad_arguments_are_named():
    mpc = vdp_solver(solver="slsqp")
    with pytest.raises(ValueError, match=r"`x` must be one initial state, shape \(2,\)"):
        mpc.solve([1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="`x` must be finite"):
        mpc.solve([np.nan, 0.0])
    with pytest.raises(ValueError, match="`shift`"):
        mpc.solve([1.0, 0.0], shift=-1)
    with pytest.raises(TypeError, match="`warm_start` must be True or False"):
        mpc.solve([1.0, 0.0], warm_start="yes")
    with pytest.raises(ValueError, match="`intervals`"):
        invimbed.OCPSolver(vanderpol(), [1.0, 0.0], p=0.0, intervals=0)
    with pytest.raises(TypeError, match="`problem` must be an invimbed.BolzaProblem"):
        invimbed.OCPSolver(lambda t, z, u: u, [1.0], p=0.0)
    with pytest.raises(ValueError, match="`initial_guess` has the unknown key"):
        mpc.solve(initial_guess={"state": np.zeros((VDP_K + 1, 2))})


@needs_ipopt
def test_ipopt_option_refused_when_the_solver_is_built():
    with pytest.raises(ValueError, match="IPOPT refused the option 'no_such_option'"):
        vdp_solver(solver_options={"no_such_option": 1})


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_generated_variational_rhs_equals_the_six_call_path(free, monkeypatch):
    """A sympy problem's intervals integrated with the one generated right-hand side
    (`invimbed._control.ocp.variational`) give the end states, costs and sensitivities
    of the generic path (six derivative calls and a matrix product), on a
    time-dependent problem with running and terminal losses."""
    import invimbed._control.ocp.shooting as shooting
    from invimbed._control.ocp import variational
    from test_ocp import nonautonomous_problem
    monkeypatch.setattr(variational, "compiled_available", lambda p: False)  # numpy rows
    problem = nonautonomous_problem(q=1.0)
    prov = problem.provider(2, 1)
    assert shooting.variational_rhs(prov) is not None
    tau = np.array([0.0, 0.3, 0.6, 1.0])
    w = np.random.default_rng(3).normal(scale=0.5, size=3 * 3 + int(free))
    if free:
        w[-1] = 1.3

    def solve():
        sh = shooting.Shooting(prov, np.array([0.4, -0.2]), 1.0, tau, free_horizon=free,
                               horizon=1.3, m=1, rtol=1e-9, atol=1e-11)
        return sh.solve(w)

    fused = solve()
    monkeypatch.setattr(shooting, "variational_rhs", lambda provider: None)
    generic = solve()
    for name in ("F", "C", "Fs", "Fu", "Cs", "Cu", "FH", "CH"):
        np.testing.assert_allclose(getattr(fused, name), getattr(generic, name),
                                   rtol=1e-10, atol=1e-12, err_msg=name)
    assert fused.nfev == generic.nfev


@needs_ipopt
def test_collocation_warm_start_carries_the_multipliers():
    """Radau collocation (Van der Pol, control bounds active): the warm re-solve from a
    moved state starts from the last solution moved 5 intervals on, interior states and
    IPOPT's multipliers included; it takes fewer iterations than the same moved point
    without multipliers (IPOPT's cold start, what the warm start was before: 5 against
    3 measured) and reaches the cold optimum (tol 1e-8: J to 1e-9). From its own
    optimum with its multipliers IPOPT stops at once."""
    kw = dict(solver="ipopt", transcription="collocation", tol=1e-8)
    mpc = vdp_solver(**kw)
    first = mpc.solve()
    assert first.success, first.message
    last = mpc._last
    x1 = first.states[5] + np.array([0.01, -0.01])
    w0, mult = moved(*last, mpc.nlp, 5)
    assert mult is not None and w0.size == mpc.nlp.n
    mpc.nlp.set_initial_state(x1)
    point_only = mpc._run(w0, None)
    warm = mpc.solve(x1, shift=5)
    cold = vdp_solver(**kw).solve(x1)
    assert warm.success and warm.warm_start and cold.success
    assert warm.nit < point_only.nit, (warm.nit, point_only.nit)
    assert abs(warm.fun - cold.fun) <= 1e-9 * abs(cold.fun)
    again = mpc.solve(x1, shift=0)
    assert again.success and again.nit <= 1 and abs(again.fun - warm.fun) <= 1e-9 * abs(
        warm.fun)


def test_collocation_moved_takes_each_interval_from_the_one_shift_on():
    """Collocation's layout moved by hand: the node blocks ``(u_k, s_(k+1))`` and the
    interior states ``X_kj`` of interval k from interval k + shift (the last one
    repeated), the horizon staying; the collocation equations' multipliers (d n per
    interval) likewise."""
    solver = invimbed.OCPSolver(
        vanderpol(), [1.0, 0.0], p=0.0, intervals=4, transcription="collocation",
        collocation_degree=3, free_horizon=True, horizon_bounds=(0.5, 2.0), solver="slsqp")
    nlp = solver.nlp
    K, n, m, d = 4, 2, 1, 3
    w = np.arange(nlp.n, dtype=float) / 1000.0 + 0.5
    y = np.arange(nlp.m, dtype=float)
    z_lo = np.arange(nlp.n) + 100.0
    w2, (y2, zl2, _) = moved(w, (y, z_lo, z_lo + 100.0), nlp, 1)
    order = [1, 2, 3, 3]
    nodes = w[:K * (n + m)].reshape(K, n + m)
    inner = w[K * (n + m):-1].reshape(K, (d - 1) * n)
    want = np.concatenate([nodes[order].ravel(), inner[order].ravel(), w[-1:]])
    np.testing.assert_array_equal(w2, want)
    np.testing.assert_array_equal(zl2 - 100.0, np.rint((want - 0.5) * 1000.0))
    np.testing.assert_array_equal(y2, y.reshape(K, d * n)[order].ravel())


def test_collocation_warm_start_moves_the_nodes_and_reaches_the_cold_optimum():
    """The collocation transcription packs its interior states past the nodes: a warm
    re-solve moves the nodes and controls and rebuilds the points (it failed with a shape
    error when the shooting layout was moved instead)."""
    sp = pytest.importorskip("sympy")
    t, x, u = sp.symbols("t x u")
    problem = invimbed.from_sympy(t, [x], [u], [x * (1 - x) + u], x ** 2 + u ** 2, q=1.0)
    kw = dict(p=0.0, intervals=8, control_bounds=(-1, 1), transcription="collocation",
              solver="slsqp")
    mpc = invimbed.OCPSolver(problem, [1.0], **kw)
    assert mpc.solve().success
    warm = mpc.solve([0.9])
    cold = invimbed.solve_ocp(problem, [0.9], **kw)
    assert warm.success and warm.warm_start and cold.success
    assert abs(warm.fun - cold.fun) <= 1e-6 * abs(cold.fun)
