"""Each compiled method held equal to its numpy twin, generated from the registry of methods
(`invimbed._core.integrators.methods`): one fixed step of every fixed-step tableau (the
numba sweep's `_stage_input` and `_step` against `fixed.run_schedule`), and the step-size
rules of every embedded pair (the compiled `initial_step` of
`invimbed._backends._ensemble_parts` against `ensemble._initial_step`, which applies the
same rules vectorised), on a small linear problem, to 1e-13. The step factors and the
error scale have one source (`invimbed._core.integrators.rules`), which both paths call:
checked by identity, by value against scipy's rule, and, where numba-cuda's compiler is
found, by compiling every shared piece as a CUDA device function."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import expm

from invimbed._core.integrators.ensemble import (MAX_FACTOR, MIN_FACTOR, SAFETY,
                                                 _initial_step, step_factors)
from invimbed._core.integrators.fixed import run_schedule
from invimbed._core.integrators.methods import METHODS
from invimbed._core.integrators.schedule import fixed_schedule

pytest.importorskip("numba")

from invimbed._backends import _ensemble_parts as parts  # noqa: E402
from invimbed._backends._numba_kernels import _stage_input, _step  # noqa: E402

FIXED = [n for n, m in METHODS.items() if m.kind == "fixed"]
EMBEDDED = [n for n, m in METHODS.items() if m.ensemble]
L = np.array([[-0.7, 0.3, 0.0], [0.2, -1.1, 0.5], [0.0, -0.4, 0.3]])
Y0 = np.array([1.3, -0.2, 0.8])


def test_every_method_is_covered():
    """A method added to the registry is covered here, or named as not compiled."""
    assert set(FIXED) == {"euler", "midpoint", "rk4"}
    assert set(EMBEDDED) == {"RK45", "RK23"}
    others = {n for n, m in METHODS.items() if m.kind == "adaptive" and not m.ensemble}
    assert others == {"DOP853", "Radau", "BDF", "LSODA"}     # scipy's only: no twin


@pytest.mark.parametrize("name", FIXED)
def test_fixed_step_compiled_equals_numpy(name):
    sched = fixed_schedule(0.0, np.array([-0.3]), np.empty(0), lambda a, b: None, name, 0.3)
    assert sched.n_steps == 1
    kept = {}
    run_schedule(sched, Y0.copy(), lambda k, s, p, y: L @ y, kept.__setitem__)
    S, h = sched.stages, float(sched.h[0])
    Ks = np.zeros((S, Y0.size))
    ys = np.empty(Y0.size)
    for s in range(S):
        _stage_input(Y0, Ks, sched.A, s, h, ys)
        Ks[s] = L @ ys
    y = Y0.copy()
    _step(y, Ks, sched.weights, h)
    np.testing.assert_allclose(y, kept[0], rtol=1e-13, atol=0)
    # and the step is the method's: against the matrix exponential, to its order
    from scipy.linalg import expm
    err = np.abs(y - expm(h * L) @ Y0).max()
    assert err < 2 * abs(h) ** (METHODS[name].tableau.order + 1)


@pytest.mark.parametrize("name", EMBEDDED)
@pytest.mark.parametrize("rtol, atol", [(1e-6, 1e-9), (1e-10, 1e-12), (1e-3, 1e-2)])
def test_initial_step_compiled_equals_numpy(name, rtol, atol):
    order = METHODS[name].tableau.error_order
    f = L @ Y0
    span = 0.8
    d1, h0 = parts.initial_step_h0(Y0, f, rtol, atol, span, np.empty(3))
    f1 = L @ (Y0 + h0 * f)
    h = parts.initial_step(Y0, f, f1, rtol, atol, d1, h0, order, span, np.empty(3))
    calls = []

    def evaluate(t, y, rows, piece):
        calls.append(y)
        return (L @ y[0])[None]

    ref = _initial_step(evaluate, np.zeros(1), Y0[None], f[None], np.ones(1),
                        np.array([span]), np.zeros(1, dtype=int), None, order, rtol, atol)
    np.testing.assert_allclose(calls[0][0], Y0 + h0 * f, rtol=1e-13, atol=0)
    np.testing.assert_allclose(h, ref[0], rtol=1e-13, atol=0)
    assert 0 < h <= span


def test_step_rules_have_one_source():
    """The compiled step rules are `rules`' functions, compiled; the numpy ensemble calls
    the same functions (its `step_factors` and error norm go through them)."""
    from invimbed._core.integrators import ensemble, rules

    for name in ("grow_factor", "shrink_factor", "error_scale", "first_guess",
                 "second_guess", "stiff_run", "stiff_stops"):
        assert getattr(parts, name).py_func is getattr(rules, name), name
    assert ensemble.grow_factor is rules.grow_factor
    assert ensemble.shrink_factor is rules.shrink_factor
    assert ensemble.error_scale is rules.error_scale


@pytest.mark.parametrize("name", EMBEDDED)
def test_step_factors_compiled_equal_numpy(name):
    """The one rule on scalars (compiled) and on arrays (numpy's `step_factors`), and
    against scipy's formula written out here: ``min(10, 0.9 norm^e)`` (10 at norm 0),
    at most 1 after a rejection; ``max(0.2, 0.9 norm^e)`` (0.2 after a non-finite
    stage)."""
    exponent = -1.0 / (METHODS[name].tableau.error_order + 1)
    norms = np.array([0.0, 1e-9, 0.3, 0.999, 1.0, 2.5, 1e6])
    with np.errstate(divide="ignore"):
        scipy_grow = np.where(norms == 0, MAX_FACTOR,
                              np.minimum(MAX_FACTOR, SAFETY * norms ** exponent))
        scipy_shrink = np.maximum(MIN_FACTOR, SAFETY * norms ** exponent)
    for rejected in (False, True):
        grow, shrink = step_factors(norms, np.ones(norms.size, bool),
                                    np.full(norms.size, rejected), exponent)
        want = np.minimum(1.0, scipy_grow) if rejected else scipy_grow
        np.testing.assert_array_equal(grow, want)
        np.testing.assert_array_equal(shrink, scipy_shrink)
        for k, norm in enumerate(norms):
            assert parts.grow_factor(norm, rejected, SAFETY, MAX_FACTOR, exponent) == grow[k]
            assert parts.shrink_factor(norm, SAFETY, MIN_FACTOR, exponent) == shrink[k]
    assert grow[0] == 1.0 and step_factors(norms[:1], np.ones(1, bool), np.zeros(1, bool),
                                           exponent)[0][0] == MAX_FACTOR
    _, shrink = step_factors(np.array([np.nan, 3.0]), np.array([False, False]),
                             np.zeros(2, bool), exponent)
    np.testing.assert_array_equal(shrink, [MIN_FACTOR, MIN_FACTOR])


def test_stiff_stop_compiled_equals_numpy():
    """The early stop of a stiff row on scalars (compiled, the kernels') and on arrays
    (the numpy ensemble's), against the sweep's own words: ``STIFF_WINDOW`` steps in a
    row above the limit, and ``steps + ceil(distance / h) > max_steps`` with ``h`` the
    larger of the next and the last step."""
    from invimbed._core.integrators import rules

    runs = np.array([0, 3, 24, 24, 25, 40, 25, 25])
    hl = np.array([0.5, 2.5, 2.5, 1.9, 2.0, 3.3, 3.3, 3.3])
    steps = np.array([10, 10, 10, 10, 10, 90, 60, 60])
    dist = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.25, 0.625, 0.625])
    h_next = np.array([1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-2, 1e-2, 1e-2])
    h_last = np.array([-2e-3, -2e-3, -2e-3, -2e-3, -2e-3, 5e-3, -2.0 ** -6, 1e-2])
    max_steps = 100
    run = rules.stiff_run(runs, hl, 2.0)
    np.testing.assert_array_equal(run, np.where(hl > 2.0, runs + 1, 0))
    stop = rules.stiff_stops(run, 25, steps, dist, h_next, h_last, max_steps)
    h = np.maximum(h_next, np.abs(h_last))
    want = (run >= 25) & (steps + np.ceil(dist / h) > max_steps)
    np.testing.assert_array_equal(stop, want)
    assert want.any() and not want.all()
    assert not want[6] and want[7]     # 60 + 40 steps fit in 100; 60 + 63 do not
    for k in range(runs.size):
        assert parts.stiff_run(runs[k], hl[k], 2.0) == run[k]
        assert parts.stiff_stops(run[k], 25, steps[k], dist[k], h_next[k], h_last[k],
                                 max_steps) == stop[k]


def test_pairwise_norm_is_numpys():
    """The compiled RMS norm adds as numpy's pairwise summation does (bit for bit), for
    sizes up to and across several levels of numpy's tree (blocks of 128), without
    allocating (the sum of a left half is kept in the consumed input)."""
    rng = np.random.default_rng(5)
    for n in [0, 1, 7, 8, 9, 127, 128, 129, 135, 136, 255, 256, 257, 1000, 1031, 4097,
              33333]:
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
        want = np.sqrt(np.mean(a * a)) if n else 0.0
        assert parts._rms(a.copy()) == want, n


def test_search_is_searchsorted():
    """`_search` (the kernels' bisection, also a device function) against numpy."""
    stops = np.array([-1.0, -0.5, -0.5, 0.0, 2.0])
    for v in (-2.0, -1.0, -0.7, -0.5, 0.0, 1.0, 2.0, 3.0):
        for right in (True, False):
            assert parts._search(stops, v, right) == np.searchsorted(
                stops, v, side="right" if right else "left")
    assert parts._search(np.empty(0), 1.0, True) == 0


def _ptx_compiler():
    """numba-cuda's ``compile_ptx`` where it can compile here (it needs NVVM, not a GPU),
    else None."""
    try:
        from numba import cuda, float64
        cuda.compile_ptx(lambda a: abs(a), (float64,), device=True, cc=(8, 0))
    except Exception:   # no numba-cuda, or no NVVM: nothing to compile with
        return None
    return cuda.compile_ptx


def _device_signatures():
    """Each shared piece with the argument types a kernel gives it: the step arithmetic
    (`_ensemble_parts`), the jet products (`_numba_kernels`) and the Taylor tape
    interpreter (`_taylor_numba.run_row` and what it calls)."""
    import sympy as sp
    from numba import typeof, types

    from invimbed._backends import _numba_kernels as kern
    from invimbed._backends._numba import _jet_tables
    from invimbed._core.derivatives import _taylor_numba as tay
    from invimbed._core.derivatives._tape import build_tape

    f8, i8, b1 = types.float64, types.int64, types.boolean
    v, m, iv = types.float64[::1], types.float64[:, ::1], types.int64[::1]
    sigs = [(parts, {
        "error_scale": (f8, f8, f8, f8), "grow_factor": (f8, b1, f8, f8, f8),
        "shrink_factor": (f8, f8, f8, f8), "first_guess": (f8, f8, f8),
        "second_guess": (f8, f8, f8, i8, f8), "_rms": (v,), "_fmin": (f8, f8),
        "_fmax": (f8, f8), "_finite": (v,), "_next_stop": (f8, f8, f8, v),
        "_piece": (v, f8, f8), "_dense_z": (f8, m, i8, iv, i8, i8, v),
        "initial_step_h0": (v, v, f8, f8, f8, v),
        "initial_step": (v, v, v, f8, f8, f8, f8, i8, f8, v),
        "stage_state": (v, m, m, i8, f8, i8, v), "weighted_step": (v, m, v, i8, f8, i8, v),
        "scaled_error": (v, v, m, v, i8, f8, f8, f8, i8, v),
        "dense_coefficient": (m, m, i8, i8, i8), "stiff_run": (i8, f8, f8),
        "stiff_stops": (i8, i8, i8, f8, f8, f8, i8)})]
    N, nw = 2, 2
    tab = _jet_tables(N, 1)
    ops = kern.jet_scratch(N, nw, 10, np.array([kern.operator_size(N, tab)]))
    sigs.append((kern, {
        "jet_rhs": (i8, i8, i8, i8, typeof(tab), m, v, types.float64[:, :, ::1], m, v, i8, v,
                    typeof(ops), i8, m, m, iv, types.int64[:, ::1], v),
        "_stage_input": (v, m, m, i8, f8, v), "_step": (v, m, v, f8)}))
    t, a, b = sp.symbols("t a b")
    tape = build_tape(sp, [sp.exp(a) * sp.sin(a * b) + abs(b), sp.atan(a) ** 3], t, [a, b],
                      [a, b], [b])
    ptr, ib, io = tay.plan(2, 4)
    C = 15
    row = (tape.ops, tape.par, tape.kind, tape.outputs, 0.0, np.array([0.3, 0.2]), 4, 2, ptr,
           ib, io, np.zeros((len(tape.ops), 2, C)), np.zeros((7, C + 2)),
           np.zeros((2, 2, C)), tay.lengths(tape.ops, tape.kind, 4, 2))
    sigs.append((tay, {"run_row": tuple(typeof(x) for x in row),
                       "series_into": (i8, f8, f8, i8, v)}))
    return sigs


def _cuda_exp():
    """numba-cuda 0.30 types ``np.exp`` of a scalar but has no lowering for it (its table
    of ufuncs lacks it): the one the CUDA kernels register, by ``math.exp``."""
    import math

    from numba.cuda import ufuncs
    from numba.cuda.mathimpl import get_unary_impl_for_fn_and_ty

    def exp(context, builder, sig, args):
        return get_unary_impl_for_fn_and_ty(math.exp, sig.args[0])(context, builder, sig,
                                                                    args)

    return ufuncs.ufunc_db(), {"d->d": exp, "f->f": exp}


@pytest.mark.slow
def test_shared_pieces_are_cuda_device_functions(monkeypatch):
    """Every piece the compiled kernels share (the step arithmetic and rules, the jet
    products, the Taylor tape interpreter) compiles as a numba-cuda device function as
    written (no allocation, no slice copies, no numpy call the CUDA target lacks but
    ``np.exp``): what the CUDA kernels reuse. PTX for compute capability 8.0; without a
    GPU, the callees' compilation is told that capability (numba-cuda asks the current
    device for it)."""
    compile_ptx = _ptx_compiler()
    if compile_ptx is None:
        pytest.skip("numba-cuda's compiler (NVVM) is not available on this machine")
    from types import SimpleNamespace

    import numba.cuda.dispatcher as cuda_dispatcher
    from numba import cuda

    if not cuda.is_available():
        monkeypatch.setattr(cuda_dispatcher, "get_current_device",
                            lambda: SimpleNamespace(compute_capability=(8, 0)))
    db, exp = _cuda_exp()
    if np.exp not in db:
        monkeypatch.setitem(db, np.exp, exp)
    for module, sigs in _device_signatures():
        for name, sig in sigs.items():
            compile_ptx(getattr(module, name).py_func, sig, device=True, cc=(8, 0))


def test_taylor_series_have_one_source():
    """The compiled tape interpreter's univariate series are the numpy evaluator's
    function, compiled; on one point and on a batch they agree to rounding (numpy's
    vectorised ``tan``, ``sin``... and libm's differ in the last bit, which the
    recurrences carry on)."""
    from invimbed._core.derivatives import _taylor_numba, _univariate

    assert _taylor_numba.series_into.py_func is _univariate.series_into
    c = np.array([0.3, -0.2, 0.7])
    for code in range(15):
        x = c + (1.5 if code == 13 else 0.0)
        with np.errstate(all="ignore"):
            batch = _univariate.series(code, x, 2.5, 5)
        for i in range(x.size):
            g = np.zeros(6)
            _taylor_numba.series_into(code, x[i], 2.5, 5, g)
            np.testing.assert_allclose(g, batch[:, i], rtol=1e-13, atol=1e-15)


def test_numba_adjoint_equations_equal_numpy():
    """The numba ensemble's transcription of the forward and adjoint equations
    (`_ensemble_kernels._rhs`) against the numpy ones (`adjoint.forward_rates`,
    `adjoint.adjoint_rates`): on steps forced to one size (``first_step = max_step``,
    tolerances every step meets), both ensembles take the same steps, so that every
    field agrees to rounding, 1e-13 of its largest entry, with a control of several
    pieces (``param_grad``) and knots between the depths."""
    from invimbed import PiecewiseConstant, solve_adjoint
    from problems import sympy_pendulum

    problem = sympy_pendulum()
    ctrl = PiecewiseConstant([-1.0, -0.55, -0.15, 0.0], [[0.2, 0.1], [-0.3, 0.05], [0.4, 0.2]])
    X = np.array([[0.4, -0.3], [1.1, 0.6]])
    depths = np.array([-1.0, -0.3, 0.0])
    kw = dict(control=ctrl, rtol=1e-2, atol=1e-2, first_step=0.01, max_step=0.01)
    ref = solve_adjoint(problem, X, depths, **kw)
    res = solve_adjoint(problem, X, depths, backend="numba", **kw)
    assert ref.success and res.success, res.message
    np.testing.assert_array_equal(res.nsteps, ref.nsteps)
    assert ref.nsteps.max() >= 100              # the forced steps: 0.01 over 1.0, twice
    for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
        got, want = np.asarray(res[k]), np.asarray(ref[k])
        scale = np.max(np.abs(want))
        assert scale > 0
        assert np.max(np.abs(got - want)) <= 1e-13 * scale, k


@pytest.mark.parametrize("name", EMBEDDED)
@pytest.mark.parametrize("h", [0.13, -0.07])
def test_one_embedded_step_compiled_equals_numpy(name, h):
    """The step arithmetic both compiled adaptive kernels share (`stage_state`,
    `weighted_step`, `scaled_error`, `dense_coefficient`) against the numpy ensemble's
    expressions (`ensemble.integrate_rows`: ``A[s, :s] K``, ``B K``, ``E K`` over
    ``atol + max(|y|, |y_new|) rtol``, and scipy's dense output ``Q = K^T P``)."""
    tab = METHODS[name].tableau
    ns, rtol, atol = tab.n_stages, 1e-6, 1e-9
    S = Y0.size
    K = np.empty((ns + 1, S))
    K[0] = L @ Y0
    ys = np.empty(S)
    for s in range(1, ns):
        parts.stage_state(Y0, K, tab.A, s, h, S, ys)
        ref = Y0 + np.matmul(tab.A[s, :s], K[:s]) * h
        np.testing.assert_allclose(ys, ref, rtol=1e-13, atol=1e-15)
        K[s] = L @ ys
    y_new = np.empty(S)
    parts.weighted_step(Y0, K, tab.B, ns, h, S, y_new)
    np.testing.assert_allclose(y_new, Y0 + h * np.matmul(tab.B, K[:-1]), rtol=1e-13, atol=1e-15)
    K[ns] = L @ y_new
    err = np.empty(S)
    parts.scaled_error(Y0, y_new, K, tab.E, ns + 1, h, rtol, atol, S, err)
    scale = atol + np.maximum(np.abs(Y0), np.abs(y_new)) * rtol
    ref = h * np.matmul(tab.E, K) / scale
    # the error weights sum to 0: compare to the size of the terms (summation rounding)
    terms = abs(h) * np.matmul(np.abs(tab.E), np.abs(K)) / scale
    assert np.all(np.abs(err - ref) <= 1e-13 * terms)
    Q = np.array([[parts.dense_coefficient(K, tab.P, ns + 1, i, c)
                   for c in range(tab.P.shape[1])] for i in range(S)])
    assert np.all(np.abs(Q - K.T @ tab.P) <= 1e-13 * (np.abs(K.T) @ np.abs(tab.P)))
    # the step is a step: y_new near the exact flow, to the method's order
    assert np.abs(y_new - expm(h * L) @ Y0).max() < abs(h) ** (tab.order + 1)


def test_kernels_take_their_arguments_in_bundles():
    """The compiled kernels take, beyond the item, the evaluator, the functions and the
    plan, a few flat bundles (`invimbed._backends._bundles`), each built in one place:
    no kernel takes more than 15 arguments (they took 25 to 46), and no bundle holds a
    tuple (numba's ``prange`` loops cannot pass one nested in an argument)."""
    import inspect

    import invimbed._backends._bundles as bundles
    from invimbed._backends import _ensemble_kernels, _numba_kernels, _sweep_kernels

    for kernel in (_sweep_kernels.sweep_one, _sweep_kernels.sweep_rows,
                   _numba_kernels._jet_sweep_one, _numba_kernels.jet_sweep,
                   _ensemble_kernels._row, _ensemble_kernels.ensemble_rows):
        fn = getattr(kernel, "py_func", kernel)
        assert len(inspect.signature(fn).parameters) <= 15, fn.__name__
    x = np.zeros((3, 2))
    jet = bundles.jet(x, 0.0, 1, 2, [1, 2])
    assert list(jet.cZs) == [3, 6] and list(jet.cVs) == [6, 10]
    assert list(jet.offs) == [0, 2 * 3 + 6 * 3] and jet.size == 24 + 2 * 6 + 10 * 3
    assert not any(isinstance(v, tuple) for v in jet)


def test_packed_tables_and_tapes_are_the_arrays_they_pack():
    """The jet tables of the carried orders and the Taylor tapes reach the kernels packed
    (`_bundles.pack`: three and four arrays where they were 18 per order and 15, whose
    passing through the ``prange`` loops cost most of a minute of compilation), and
    `order_tables` and `tape_arrays` give back arrays equal to the packed ones, of the
    same numba types (so the callees' compiled code is the same), as views."""
    import sympy as sp
    from numba import njit, typeof

    import invimbed._backends._bundles as bundles
    from invimbed._backends._numba import _jet_tables, packed_tables
    from invimbed._backends._packed import order_tables, tape_arrays, tape_plan
    from invimbed._core.derivatives import _taylor_numba as tay
    from invimbed._core.derivatives._tape import build_tape

    orders = (1, 2, 3, 3)
    ti, tf, tm = packed_tables(3, orders)
    for o, K in enumerate(orders):
        want = _jet_tables(3, K)
        got = order_tables(ti, tf, tm, o)
        assert typeof(got) == typeof(want)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    t, a, b = sp.symbols("t a b")
    tapes = [build_tape(sp, [sp.exp(a) * sp.sin(a * b), a + b], t, [a, b], [a, b], [b]),
             build_tape(sp, [a * a * t], t, [a, b], [a, b], [b]),
             build_tape(sp, [sp.cos(b)], t, [a, b], [a, b])]
    arrays = tuple(x for tp in tapes for x in (tp.ops, tp.par, tp.kind, tp.outputs))
    plan = tay.plan(2, 3)
    tape = bundles.Tapes(True, *bundles.pack(arrays + plan), 3, 2)
    assert len(tape) == 7
    for k in range(3):
        got = tape_arrays(tape, k)
        assert typeof(got) == typeof(arrays[4 * k:4 * k + 4])
        assert all(np.array_equal(g, w) for g, w in zip(got, arrays[4 * k:4 * k + 4]))
    assert all(np.array_equal(g, w) for g, w in zip(tape_plan(tape), plan))

    @njit
    def poke(tape):       # views: a write shows in the packed buffer
        tape_arrays(tape, 1)[1][0] = 7.5

    poke(tape)
    assert tape.flts[tape.meta[5, 0]] == 7.5
