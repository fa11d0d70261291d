"""``solve_imbedding(..., backend="numba", method="RK45" | "RK23")``: the jet sweep with
scipy's adaptive step control, compiled with numba, one sweep per input.

What it computes is the numpy sweep's (`invimbed._core.sweep.imbedding`, ``closure="jet"``):
the jets of the carried orders (`JetClosure.carried_orders`: ``K - 1`` for the ratio
test, ``K``, ``K + 1`` for the error estimate, ``K + 2`` for the look-ahead), stepped as
`integrate_scipy` steps scipy's solvers (`invimbed._backends._sweep_kernels`), and the
result assembled by the core (`invimbed._core.sweep.assembly.collect_results`: depth
gradient, error estimate, ratio test, ``tol``). So ``tol``, ``fallback`` and the order
loop work as with ``backend="numpy"``.

One difference, on purpose: each input is stepped on its own (a loop over the batch,
in chunks on numba's number of threads: `invimbed._backends._chunks.run_rows`), where the
numpy sweep steps the whole batch as one system. Input ``b``'s fields are those of the
numpy sweep of ``x[b]`` alone (``tests/test_sweep_numba.py``: 1e-10), and a failing input
(a non-finite value, the step budget) leaves the others untouched: its fields are NaN
from where it stopped, ``success`` is False and the message names it.

Derivatives: a ``from_sympy`` problem, and one whose functions were traced into sympy
(derivatives given or not), runs on its Taylor-mode tapes
(`invimbed._core.derivatives.taylor_mode`; any jet order, nothing compiled per
problem); other per-sample ``numba.njit`` functions (``derivatives=`` as for the
fixed-step numba sweep, tracing failed) on a derivative plan
(`invimbed._backends._plans`: the user's derivatives, finite differences beyond them)
as far as it serves the order. Controls: ``None``, `Constant`, `PiecewiseConstant`.
``nfev``: the most right-hand-side evaluations of any input. ``memory_budget`` bounds the
kernel's arrays (`memory_bytes`). Compiled once per machine (about a minute of CPU),
announced first.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.setup.arguments import Setup
from .._core.setup.settings import Accuracy
from .._core.sweep.assembly import _depth_gradients, collect_results, depth_gradient_of
from .._core.derivatives.multiindex import n_coefficients
from .._core.results.failures import (below_min_step, budget_exhausted, first_evaluation,
                                      step_collapsed, sweep_stopped)
from .._core.integrators.common import DEFAULT_MAX_STEPS, NonFiniteError, Outcome, segments
from .._core.integrators.ensemble import ENSEMBLE_METHODS, MAX_FACTOR, MIN_FACTOR, SAFETY, TABLEAUX
from .._core.sweep.memory import check_compiled
from ._function_values import (_Address, _addressed, _callees, _calls, check_returns,
                               rhs_signature)
from ._chunks import run_rows
from ._numba import _typeof, compile_loop, eval_signature, packed_tables
from ._numba_functions import _types, function_tuple, import_numba
from ._plans import Request, build_plan
from . import _bundles as bundles
from . import _sweep_kernels as kern

#: The methods of the compiled adaptive sweep.
ADAPTIVE_METHODS = ENSEMBLE_METHODS
#: Steps per input kept at first for a dense output (the sweep reruns with room for all
#: of them where an input takes more).
DENSE_STEPS = 64
_KEYS = ("z", "value", "adjoint", "param_grad")


@dataclass
class SweepSteps:
    """The accepted steps of a compiled adaptive sweep, for a dense output.

    Input ``b`` took ``n_steps[b]`` steps; step ``k < n_steps[b]`` went from depth
    ``t_old[b, k]`` to ``t_old[b, k] + h[b, k]`` (``h < 0``: the sweep runs from ``q``
    down) and its continuous extension (scipy's ``RkDenseOutput``) is
    ``y(p) = y_old[b, k] + h[b, k] * Q[b, k] @ [x, x^2, ..., x^kq]``,
    ``x = (p - t_old[b, k]) / h[b, k]``.

    Shapes: ``t_old``, ``h`` (B, S); ``y_old`` (B, S, size); ``Q`` (B, S, size, kq), with
    ``S = max(n_steps)``, ``kq = 4`` (RK45) or 3 (RK23). A state ``y`` (size,) holds the
    jets of ``orders`` side by side: order ``orders[o]`` from ``offsets[o]``, ``Z`` (N,
    ``cZ[o]``) then ``V`` (``cV[o]``) then ``W`` (n_w, ``cV[o]``), Taylor coefficients in
    the graded order of `invimbed._core.derivatives.multiindex`; `step_fields` reads the
    fields off it.
    """

    t_old: np.ndarray
    h: np.ndarray
    y_old: np.ndarray
    Q: np.ndarray
    n_steps: np.ndarray
    orders: np.ndarray
    offsets: np.ndarray
    cZ: np.ndarray
    cV: np.ndarray
    N: int
    nw: int

    def state(self, b: int, p: float) -> np.ndarray:
        """The state of input ``b`` at depth ``p`` (in the swept interval)."""
        n = int(self.n_steps[b])
        lo = self.t_old[b, :n] + self.h[b, :n]          # step k covers [lo_k, t_old_k]
        k = int(np.clip(np.searchsorted(-lo, -p, side="left"), 0, n - 1))
        x = (p - self.t_old[b, k]) / self.h[b, k]
        pw = np.cumprod(np.full(self.Q.shape[-1], x))
        return self.y_old[b, k] + self.h[b, k] * (self.Q[b, k] @ pw)

    def step_fields(self, y: np.ndarray, o: int) -> dict[str, np.ndarray]:
        """``z``, ``value``, ``adjoint``, ``param_grad`` of carried order ``orders[o]``."""
        N, cZ, cV, off = self.N, int(self.cZ[o]), int(self.cV[o]), int(self.offsets[o])
        oV = off + N * cZ
        return {"z": y[off:oV:cZ].copy(), "value": y[oV].copy(),
                "adjoint": y[oV + 1:oV + 1 + N].copy(),
                "param_grad": y[oV + cV:oV + cV + self.nw * cV:cV].copy()}


def carried_orders(order: int, est: bool, ratio: bool, look_ahead: bool) -> list[int]:
    """`JetClosure.carried_orders` for these flags (the same blocks in the same order)."""
    ratio = ratio and est
    return (([order - 1] if ratio else []) + [order] + ([order + 1] if est else [])
            + ([order + 2] if ratio and look_ahead else []))


def _segments(setup: Setup) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The intervals between breakpoints, theta and ``dtheta/dw`` on each, and each
    depth's interval (-1 at ``q``)."""
    from .._core.problem.open_loop import Constant, NoControl, PiecewiseConstant

    ctrl = setup.control
    if type(ctrl) not in (Constant, NoControl, PiecewiseConstant):
        raise ValueError(
            f"backend='numba' with an adaptive method runs `control` None, Constant or "
            f"PiecewiseConstant, but got control={ctrl!r} ({type(ctrl).__name__}); use "
            f"backend='numpy', which runs any control")
    q, d = float(setup.q), setup.depths_desc
    segs = segments(q, float(d[-1]), ctrl.breakpoints)
    M, nw = ctrl.size, ctrl.n_params
    th = np.zeros((max(len(segs), 1), M))
    J = np.zeros((max(len(segs), 1), M, nw))
    if segs:        # every interval at once (`Setup.piece_of` of each)
        ab = np.array(segs, dtype=float)
        mid, lo, hi = 0.5 * (ab[:, 0] + ab[:, 1]), ab.min(axis=1), ab.max(axis=1)
        pieces = ctrl.pieces(lo, hi)
        th[:len(segs)] = ctrl.theta_rows(mid, pieces)
        if nw:
            J[:len(segs)] = ctrl.jacobian_rows(mid, pieces)
    where = np.full(d.size, -1, dtype=np.int64)
    for s, (a, b) in enumerate(segs):
        where[(d >= b) & (d < a)] = s
    return (np.array(segs, dtype=float).reshape(-1, 2), np.ascontiguousarray(th),
            np.ascontiguousarray(J), where)


def _tapes(setup: Setup, nw: int) -> tuple | None:
    """The Taylor-mode tapes of ``f``, ``R``, ``T`` of a ``from_sympy`` problem, or of
    the expressions a problem's functions were traced into (derivatives given or not:
    `invimbed._core.derivatives.traced`); None for other problems, or a function the
    tapes do not know."""
    from .._core.derivatives._tape import Unsupported
    from .._core.derivatives.symbolic import SympyProvider
    from .._core.derivatives.taylor_mode import TaylorJets

    prov = setup.problem.derivative_provider
    if prov is None and getattr(setup.provider, "traced", False):
        prov = getattr(setup.provider, "traced_part", setup.provider)
    if not isinstance(prov, SympyProvider):
        return None
    jets = _JETS.get(prov)
    if jets is None:      # built once per provider (sympy's cse: tens of milliseconds)
        jets = _JETS[prov] = TaylorJets(prov._sp, prov.t, prov.z, prov.theta,
                                        prov.expressions)
    mode = "dual" if nw else "z"
    try:
        tapes = [jets.tape("f", mode), jets.tape("R", mode), jets.tape("T", "z")]
    except Unsupported:
        return None
    return tuple((t.ops, t.par, t.kind, t.outputs) for t in tapes)


_JETS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


_KERNELS: dict[tuple, Any] = {}
#: The tapes' node storage of the last sweep of each Python thread, kept up to this
#: many bytes: `run_row` writes the same entries at every run of the same tapes, so a
#: later sweep of the same problem reuses it as it is, where fresh zeroed memory costs
#: one page fault per page (most of a short sweep's time, measured for ``N = 16``).
WORKSPACE_BYTES = 64 * 2 ** 20
_WORK: dict[int, tuple] = {}


def _workspace(tapes: tuple, F: int, Df: int, CF: int) -> tuple:
    """Zeroed node storage of the tapes ``f``, ``R``, ``T`` for each of numba's threads
    (`invimbed._backends._sweep_kernels.sweep_one`), reused from this thread's previous
    sweep where that ran the same tapes."""
    import threading

    numba = _types()["numba"]
    T = int(numba.config.NUMBA_NUM_THREADS)
    key = (tapes[0][0], tapes[1][0], tapes[2][0], F, Df, CF, T)
    me = threading.get_ident()
    hit = _WORK.get(me)
    if (hit is not None and all(a is b for a, b in zip(hit[0][:3], key[:3]))
            and hit[0][3:] == key[3:]):
        return hit[1]
    shapes = [(T, tapes[0][0].shape[0], Df, CF), (T, tapes[1][0].shape[0], Df, CF),
              (T, tapes[2][0].shape[0], 1, CF)]
    ws = tuple(np.zeros(s) for s in shapes)
    if sum(w.nbytes for w in ws) <= WORKSPACE_BYTES:
        _WORK[me] = (key, ws)
    else:
        _WORK.pop(me, None)
    return ws


def _kernel(args: tuple) -> Any:
    """The compiled loop over a chunk of the inputs for the types of ``args`` (cached on
    disk; `invimbed._backends._chunks.run_rows` runs the chunks)."""
    # every argument has the same type on every call (C-contiguous float64/int64/int8
    # arrays of fixed ranks, the same tuples): one kernel, looked up by its name
    key = ("sweep_rows",)
    hit = _KERNELS.get(key)
    if hit is None:
        from numba import types

        from ._numba_calls import eval_request

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
            argtypes, ev_sig, ev_type = eval_signature(args)
            rh_sig = rhs_signature(argtypes, ev_type)
            cf = args[2] + (_Address(kern._rhs, rh_sig),)     # `_calls` and `_rhs`
            argtypes = argtypes[:2] + (_typeof(cf),) + argtypes[3:]
            one_sig = types.void(types.int64, types.int64, ev_type, *argtypes)
            entry = compile_loop("sweep_adaptive", kern.sweep_rows, kern.sweep_one, one_sig,
                                 ev_sig, argtypes, first=_callees() + [(kern._rhs, rh_sig)])
            check_returns(kern._rhs, rh_sig)
        hit = _KERNELS[key] = (entry, _Address(kern.sweep_one, one_sig),
                               _Address(eval_request, ev_sig), cf)
    return hit


def sweep_numba_adaptive(setup: Setup, *, order: int, method: str, rtol: float, atol: float,
                         closure: str = "jet", est: bool, accuracy: Accuracy,
                         look_ahead: bool, warnings_: list, keep_steps: int = 0,
                         max_steps: int | None = None, first_step: float | None = None,
                         max_step: float | None = None, min_step: float | None = None,
                         dense_output: bool = False, finish: Any = None,
                         memory_budget: int | None = None, memory_held: int = 0) -> Any:
    """One adaptive jet sweep at order ``order`` on numba (see the module docstring):
    the `ImbeddingResult` of `collect_results`, with ``accuracy`` (``tol``, ratio test)
    and the order loop's predictions (``predict``). ``keep_steps > 0`` also returns the
    `SweepSteps` (the first ``keep_steps`` steps are kept; the sweep is rerun with room
    for all of them where an input took more). ``dense_output``: the result's ``sol``
    from the kept steps (`attach_steps`; ``finish`` as for `attach_dense`). A sweep whose
    outputs and arrays exceed ``memory_budget`` (bytes; None: the default of
    `check_compiled`; ``memory_held`` of them taken already) raises its `MemoryError`
    before they are allocated (`memory_bytes`)."""
    if closure != "jet":
        raise ValueError(f"backend='numba' runs method={method!r} for closure='jet' only, but "
                         f"got closure={closure!r}; use backend='numpy' for it")
    import_numba()
    ctrl, prov = setup.control, setup.provider
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    orders = carried_orders(order, est, accuracy.ratio_test, look_ahead)
    F = max(orders) + 1
    CF = n_coefficients(N, F)
    tapes = _tapes(setup, nw)
    use_tape = tapes is not None
    if use_tape:
        plan = build_plan(prov, [Request("f", 0, 0)])
        fns = function_tuple(setup, frozenset())
    else:
        reqs = [Request("f", 0, F), Request("R", 0, F), Request("f", 1, F if nw else 0),
                Request("R", 1, F if nw else 0), Request("T", 0, F)]
        plan = build_plan(prov, reqs)
        fns = function_tuple(setup, plan.used)
        empty = (np.zeros((0, 4), np.int64), np.zeros(0), np.zeros(0, np.int8),
                 np.zeros(0, np.int64))
        tapes = (empty, empty, empty)
    from .._core.derivatives._taylor_numba import plan as tape_plan

    tplan = tape_plan(N, F)
    Df = 1 + M if (use_tape and nw) else 1
    tabs = packed_tables(N, tuple(orders + [orders[-1]] * (4 - len(orders))))
    tape = bundles.Tapes(use_tape, *bundles.pack(tapes[0] + tapes[1] + tapes[2] + tplan), F,
                         Df)
    jet = bundles.jet(setup.x, setup.q, M, nw, orders)
    cZs, cVs, offs, size = jet.cZs, jet.cVs, jet.offs, jet.size
    seg, seg_th, seg_J, dep_seg = _segments(setup)
    tab = TABLEAUX[method]
    rk = bundles.tableau_arrays(tab)
    num = (float(rtol), float(atol), float(first_step or 0.0),
           float(np.inf if max_step is None else max_step), float(min_step or 0.0),
           float(SAFETY), float(MIN_FACTOR), float(MAX_FACTOR))
    budget = int(DEFAULT_MAX_STEPS if max_steps is None else max_steps)
    depths = np.ascontiguousarray(setup.depths_desc, dtype=float)
    n, width, kq = depths.size, 2 * N + 1 + nw, tab.P.shape[1]
    cap = int(keep_steps) or (DENSE_STEPS if dense_output else 0)
    qd = np.array([float(setup.q)])        # theta at q as the core takes it (`depth_gradient`)
    q_same = bool(np.array_equal(ctrl.theta_rows(qd, ctrl.pieces(qd, qd))[0], seg_th[0]))
    while True:
        held, work = memory_bytes(n, B, N, len(orders), width, size, cap, kq, tab.A.shape[0],
                                  tapes, F, Df, CF)
        check_compiled(setup, copies=len(orders) - 1, held=held + memory_held, work=work,
                       budget=memory_budget)
        out = np.full((n, B, len(orders), width), np.nan)
        fr = np.full((n, B, N + 1), np.nan)
        info = np.zeros((B, 3), dtype=np.int64)
        where = np.full((B, 2), np.nan)
        d_t, d_h = np.zeros((B, cap)), np.zeros((B, cap))
        d_y, d_Q = np.zeros((B, cap, size)), np.zeros((B, cap, size, kq))
        args = (_addressed(fns), plan.arrays(), _calls(), tape, jet,
                *tabs, bundles.Grid(seg, seg_th, seg_J, depths, dep_seg),
                bundles.Stepper(*rk, *num, budget, int(tab.error_order), cap, int(q_same)),
                bundles.SweepOut(out, fr, info, where, d_t, d_h, d_y, d_Q),
                _workspace(tapes, F, Df, CF))
        loop, one, ev, cf = _kernel(args)
        run_rows(loop, (one, ev, *args[:2], cf, *args[3:]), B)
        if not cap or int(info[:, 2].max()) <= cap:
            break
        cap = int(info[:, 2].max())
    res = _assemble(setup, out, fr, info, where, orders, order, est, method, accuracy,
                    warnings_, budget, N, nw, min_step)
    if not cap:
        return res
    S = int(info[:, 2].max()) if B else 0
    steps = SweepSteps(d_t[:, :S], d_h[:, :S], d_y[:, :S], d_Q[:, :S], info[:, 2].copy(),
                       np.array(orders), offs, cZs, cVs, N, nw)
    if dense_output:
        from .._core.closures import JetClosure

        clo = JetClosure(prov, ctrl, setup.x, setup.q, order=order, estimate_error=est,
                         ratio_test=accuracy.ratio_test, look_ahead=look_ahead)
        res = attach_steps(res, setup, steps, clo, method, finish)
    return (res, steps) if keep_steps else res


def memory_bytes(n: int, B: int, N: int, n_orders: int, width: int, size: int, cap: int,
                 kq: int, stages: int, tapes: tuple, F: int, Df: int,
                 CF: int) -> tuple[int, int]:
    """``(held, work)`` bytes of `sweep_numba_adaptive` (`check_compiled`): its fields at
    every depth (``out``, ``fr``), status and ``cap`` kept steps per input; the tapes'
    storage (`_workspace`) and each thread's scratch for an input (`sweep_one`'s)."""
    held = 8 * (n * B * (n_orders * width + N + 1) + 5 * B
                + B * cap * (2 + size * (1 + kq)))
    threads = int(_types()["numba"].config.NUMBA_NUM_THREADS)     # as `_workspace`
    nodes = sum(t[0].shape[0] for t in tapes[:2]) * Df + tapes[2][0].shape[0]
    work = 8 * threads * (nodes * CF + size * (stages + kq + 6) + (N + 1) * (Df + 5) * (CF + 2))
    return held, work


def attach_steps(res: Any, setup: Setup, steps: SweepSteps, clo: Any, method: str,
                 finish: Any = None) -> Any:
    """The draft ``res`` with its ``sol`` (`invimbed._core.sweep.dense.DenseSolution`) from
    the kept steps:
    input ``b``'s continuous extension (`StateInterpolant.from_steps` on its own steps)
    fills its columns of the state of ``clo`` (`JetClosure`, the same jets as the kernel:
    `carried_orders`), `input_columns`; the fields and estimate of that state are the
    closure's, the rest the core's assembly. The swept interval is where every input
    reached; no ``sol`` (None) where an input took no step."""
    from .._core.sweep.dense import DenseSolution, StateInterpolant, input_columns

    if steps.n_steps.size == 0 or steps.n_steps.min() < 1:
        return res.but(sol=None)
    parts, deepest = [], float(setup.depths_desc[-1])
    for b, n in enumerate(steps.n_steps):
        t, end = steps.t_old[b, n - 1], steps.t_old[b, n - 1] + steps.h[b, n - 1]
        if abs(end - deepest) <= 4 * np.spacing(max(abs(t), abs(deepest))):
            end = deepest       # the kernel's last step ends there; t_old + h rounds
        ts = np.append(steps.t_old[b, :n], end)
        parts.append(StateInterpolant.from_steps(
            ts, steps.y_old[b, :n], steps.Q[b, :n], columns=input_columns(clo.layout.shapes, b),
            size=clo.layout.size))

    def stacked(ys: np.ndarray) -> tuple:
        return (clo.fields(ys), clo.error_estimate(ys), clo.lower_difference(ys),
                clo.upper_difference(ys))

    sol = DenseSolution(setup, StateInterpolant.stack(parts, clo.layout.size), None,
                        _shapes(setup), stacked=stacked, finish=finish, closure="jet",
                        method=method, with_errors=clo.has_error_estimate, backend="numba")
    sol.layout = clo.layout
    return res.but(sol=sol)


def _assemble(setup: Setup, out: np.ndarray, fr: np.ndarray, info: np.ndarray,
              where: np.ndarray, orders: list[int], order: int, est: bool, method: str,
              accuracy: Accuracy, warnings_: list, budget: int, N: int, nw: int,
              min_step: Any) -> Any:
    """The result of the kernel's outputs, by `collect_results`. The depth gradient is
    `depth_gradient_of` the ``f`` and ``R`` at ``x`` the kernel recorded (``fr``), and
    the core's (`_depth_gradients`) where it recorded none and the adjoint is finite (a
    problem whose ``f`` or ``R`` reads ``t``, depths at ``q`` where theta is not the first
    piece's)."""
    sl = {"z": slice(0, N), "value": N, "adjoint": slice(N + 1, 2 * N + 1),
          "param_grad": slice(2 * N + 1, 2 * N + 1 + nw)}
    by_order = {K: {k: out[:, :, o, s] for k, s in sl.items()} for o, K in enumerate(orders)}

    def diff(lo: int, hi: int) -> dict | None:
        if lo not in by_order or hi not in by_order:
            return None
        return {k: np.abs(by_order[hi][k] - by_order[lo][k]) for k in _KEYS}

    fields = {k: np.ascontiguousarray(v) for k, v in by_order[order].items()}
    lam = fields["adjoint"]
    dg, flow = depth_gradient_of(lam, fr[..., :N], fr[..., N]), fr[..., :N]
    left = np.isnan(fr[..., N]) & np.all(np.isfinite(lam), axis=-1)
    if left.any():
        core, f = _depth_gradients(setup, np.where(left[..., None], lam, np.nan), True)
        dg, flow = np.where(left, core, dg), np.where(left[..., None], f, flow)
    fields["depth_grad"] = dg
    errors = diff(order, order + 1) if est else None
    lower = diff(order - 1, order) if errors is not None else None
    upper = diff(order + 1, order + 2) if errors is not None else None
    outcome = Outcome(ys=np.zeros((setup.depths_desc.size, 1)), nfev=int(info[:, 1].max()))
    bad = np.flatnonzero(info[:, 0] != kern.S_DONE)
    if bad.size:
        b = int(bad[0])
        outcome.success = False
        outcome.failed_at = float(where[b, 0])
        outcome.message = _failure(setup, int(info[b, 0]), where[b], budget, min_step,
                                   method, b, bad.size)
    outcome.extra["nsteps"] = int(info[:, 2].max())
    return collect_results(setup, outcome, None, _shapes(setup), closure="jet",
                           method=method, with_errors=errors is not None, accuracy=accuracy,
                           warnings=warnings_, predict=accuracy.checked, flow=flow,
                           stacked_fields=(fields, errors, lower, upper), backend="numba")


def _shapes(setup: Setup) -> dict:
    B, N = setup.x.shape
    return {"z": (B, N), "value": (B,), "adjoint": (B, N),
            "param_grad": (B, setup.control.n_params), "depth_grad": (B,)}


def _failure(setup: Setup, code: int, where: np.ndarray, budget: int, min_step: Any,
             method: str, b: int, count: int) -> str:
    """The message of input ``b``'s failure (the words of the numpy sweep), naming the
    input and how many failed."""
    p = float(where[0])
    if code == kern.S_FIRST:
        text = first_evaluation(NonFiniteError(p, "right-hand side"), float(setup.q))
    elif code == kern.S_NONFINITE:
        text = sweep_stopped(NonFiniteError(p, "imbedded fields"), fixed_step=False)
    elif code == kern.S_MAX_STEPS:
        text = budget_exhausted(p, budget)
    elif code == kern.S_UNDERFLOW:
        text = step_collapsed(p, "Required step size is less than spacing between numbers.",
                              explicit=True)
    else:
        text = below_min_step(p, float(where[1]), float(min_step), explicit=True)
    B = setup.x.shape[0]
    if not setup.batched:
        return text
    return (f"Input x[{b}]: {text} {count} of {B} inputs failed (NaN fields from where "
            f"each stopped); the others reached every depth.")
