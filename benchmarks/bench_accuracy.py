"""Time to a target accuracy: which method is fastest for a problem, a number of depths
``n``, a state size ``N`` and an accuracy target.

For every problem and ``n`` (depths evenly spaced in ``[p_min, q] = [-1, 0]``), every
method sweeps its tolerance knob; each configuration is timed and its worst relative
error over the five fields (``z``, ``value``, ``adjoint``, ``param_grad``,
``depth_grad``) is measured against a tight reference. For each target (``1e-3``,
``1e-6``, ``1e-9``) the fastest configuration whose worst error meets it wins.

Problems (all built with ``invimbed.from_sympy``, so every jet order is available):

* ``lq4``, ``lq16``: linear-quadratic, ``N = 4`` and ``16``: ``dz/dt = A z + B u``, ``A``
  random and stable (spectral abscissa ``-0.5``), ``M = 2`` controls,
  ``R = (z'Qz + u'Ru)/2``, ``T = z'Pz/2`` (``Q``, ``P`` random positive definite,
  ``R = 0.1 I``), ``u`` piecewise constant on the four pieces of ``linspace(-1, 0, 5)``
  (``n_w = 8``), seed 0. The imbedding sweep (jet, order 1) is exact here. Reference:
  exact, by matrix exponentials (Van Loan's block exponential for the running loss), no
  ODE solver involved;
* ``pendulums``: the coupled pendulums of ``_pendulums.py`` (``N = 4``, piecewise-constant
  torque, ``n_w = 8``), its ``X0``, ``CONTROL`` and ``depths(n)``;
* ``duffing``: a forced Duffing oscillator, ``N = 2``,
  ``x'' = -0.2 x' - x - x^3 + 0.5 sin(2 pi t) + u`` (one forcing period over the depth
  interval), ``u`` constant (``n_w = 1``), ``R = (x^2 + 0.1 v^2 + 0.05 u^2)/2``,
  ``T = ((x - 1)^2 + v^2)/2``, ``x = (0.5, 0)``.

Reference of the nonlinear problems: ``solve_adjoint(strategy="per_depth",
method="DOP853", rtol=1e-13, atol=1e-15)``, once per (problem, n), checked against an
independent solve (the ensemble, RK45, same tolerances): the ``ref check`` column, the
worst relative error between the two, says down to which level the reference itself
can be trusted (``(!)`` where it is above a tenth of the target). The LQ references are
exact; at the smallest ``n`` they are checked against per_depth DOP853.

Accuracy measure: ``_pendulums.worst_rel_error`` with its default, for every problem:
per field (``z``, ``value``, ``adjoint``, ``param_grad``, ``depth_grad``, every depth
at once) ``max|a - b| / max|b|``, the field-normwise relative error, and the worst over
the five fields. The full table also prints the entry-wise variant (``floor =
_pendulums.ENTRYWISE_FLOOR``, 1e-8: every entry relative to itself), which is set by the
entries that are nearly zero (a component of the adjoint crossing zero between depths)
and is informative only.

Methods and their knob (``atol = rtol / 100`` throughout, RK45), in the order they run:

* ``ensemble numba``, ``ensemble``: ``solve_adjoint(strategy="ensemble",
  backend="numba"/"numpy")``; the numba rows are dropped, with a note, where the backend
  cannot be imported;
* ``jet-K``, ``jet-K+est``: ``solve_imbedding(closure="jet", order=K,
  estimate_error=False/True)``, ``K = 1..4``; a jet whose Taylor state would have more
  than 500 coefficients per field (``C(N + K', K')``, ``K' = K + 1`` with the estimate;
  ``benchmarks/bench_jets.py`` measures that cost) is skipped;
* ``nb jet-K``, ``nb jet-K+est``: the same on the compiled adaptive sweep,
  ``solve_imbedding(..., backend="numba")`` (RK45 with scipy's error control, one sweep
  per input); dropped, with a note, where it cannot run (``--no-numba-sweep`` drops it
  too). Its compilation is reported separately and excluded from every time: the
  process's first call (the kernel compiled, or loaded from numba's disk cache) and a
  second call;
* ``stencil``: ``solve_imbedding(closure="stencil")`` (central differences);
* ``per_depth``: ``solve_adjoint(strategy="per_depth")``.

Cells: by default ``lq4`` at ``n = 8, 128, 1024, 10^4, 10^5``, ``lq16`` at ``n = 8, 128,
1024, 10^4``, the nonlinear problems at ``n = 8, 128, 1024`` (their per-depth DOP853
reference is too slow beyond); ``--cells lq4:1024,100000 pendulums:1024`` picks others,
``--methods`` a subset of the methods. From ``n = 10^4`` on only the two ensembles, the
numpy jet of order 1 and the numba sweeps run, with one call per configuration, rtol
``1e-3`` to ``1e-9`` and a call cap of ``--big-call-seconds``; from ``n = 10^5`` on, of
the ensembles only the one that was faster at the largest smaller ``n``. The LQ
reference shares exponentials along evenly spaced depths (``e^{X(h + j dh)} = e^{Xh}
(e^{X dh})^j``, a fresh ``expm`` every 64 depths; it agrees with one ``expm`` per depth
to ``1e-14``).

The rtol sweep runs from ``1e-3`` down to ``1e-12`` a decade at a time (``--quick``:
``1e-3, 1e-6, 1e-9, 1e-12``) and stops early for a method, with the reason in the row,

1. once its worst error is below the smallest target;
2. for the jets and the stencil, once an rtol two decades (or more) tighter no longer
   halves the error: the closure's truncation error, set by the depth and the order,
   dominates, and the best accuracy such a method reaches is on record;
3. once a call ran past ``--max-call-seconds`` (it is interrupted) or the next one is
   predicted to (from the growth of the previous two);
4. once two other methods already meet, no slower than its last call, every target it
   has not met, so that its slower configurations could be neither the fastest nor the
   runner-up -- and, for an imbedding closure, once another closure does too (for a
   numba sweep: another numba sweep), so that they could not be the fastest sweep either
   (printed beside the winner). An ensemble stops by this rule only once the other
   ensemble meets those targets no slower: the speed-up table needs the fastest
   ensemble of every target.

Rule 4 only cuts configurations that cannot change the summary (given that a tighter
rtol is not faster); rule 3 cuts those slower than the cap, so that a target only they
would meet shows as "not reached" (raise ``--max-call-seconds``).

Timing: ``time.perf_counter``. Warm-up: one untimed call of every method on every
problem (two depths, ``rtol = 1e-3``) before anything is timed, which pays sympy's code
generation for each derivative order and numba's compilation. Then per configuration
the best of ``--repeats`` calls (default 5, 2 with ``--quick``; one call when a call
takes longer than 0.5 s). One thread: ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` are set to 1 before numpy is imported
(unless already set), so the numba ensemble's ``prange`` over rows runs on one core here.
Machine information and the load average are printed at the start and the end: compare
times within one run.

After the summary, the numba sweep against the exact ensemble: per cell and target, the
fastest numba sweep configuration, the fastest ensemble (numpy or numba backend) and the
ensemble's time over the sweep's, then each speed target of ``SPEED_TARGETS`` with its
measured ratio: met, NOT met, or not measured in the run. Below ``BIG_N`` depths the
three fastest configurations of each side meeting the target (numba sweeps; exact
ensembles) are timed again in alternation (one call of each per round,
``max(--repeats, 5)`` rounds, the best of each), and the fastest of each side decide: the map
times each configuration at its own moment, and the speed of this shared machine drifts
during a run (the same compiled sweep measured 1.5x slower a few minutes later in the
same process), so that a ratio of two moments can be off by as much.

Run:  python benchmarks/bench_accuracy.py [--quick] [--repeats R] [--plot FILE]
      [--max-call-seconds S] [--big-call-seconds S] [--problems lq4 lq16 pendulums duffing]
      [--cells PROBLEM:N[,N...] ...] [--methods NAME ...] [--no-numba-sweep]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import datetime  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import invimbed  # noqa: E402
import _pendulums as P  # noqa: E402
from _machine import arguments, header, interleaved, repeats_of  # noqa: E402
from _map_problems import (BIG_N, HUGE_N, P_MIN, Q_END, TARGETS,  # noqa: E402  the problems
                           Problem, duffing_problem, lq_problem, pendulum_problem)

REF_TOL = (1e-13, 1e-15)
MAX_JET_COEFFS = 500           # skip a jet whose Taylor state exceeds C(N + K', K') of this
SLOW_CALL = 0.5                # a call longer than this is timed once
FIELDS = P.FIELDS


# -- methods ----------------------------------------------------------------------------------
@dataclass
class Method:
    name: str
    run: Callable[[Problem, np.ndarray, float], Any]
    truncation_limited: bool = False
    jet_order: int = 0               # K' = the highest jet order carried (0: not a jet)


def _adjoint(strategy: str, backend: str = "numpy") -> Callable:
    extra = {} if backend == "numpy" else {"backend": backend}

    def run(pb: Problem, d: np.ndarray, rtol: float) -> Any:
        return invimbed.solve_adjoint(pb.problem, pb.x, d, control=pb.control, rtol=rtol,
                                      atol=rtol / 100, strategy=strategy, **extra)
    return run


def _jet(K: int, est: bool) -> Callable:
    def run(pb: Problem, d: np.ndarray, rtol: float) -> Any:
        return invimbed.solve_imbedding(pb.problem, pb.x, d, control=pb.control,
                                        closure="jet", order=K, estimate_error=est,
                                        rtol=rtol, atol=rtol / 100)
    return run


def _jet_numba(K: int, est: bool) -> Callable:
    def run(pb: Problem, d: np.ndarray, rtol: float) -> Any:
        return invimbed.solve_imbedding(pb.problem, pb.x, d, control=pb.control,
                                        closure="jet", order=K, estimate_error=est,
                                        rtol=rtol, atol=rtol / 100, backend="numba")
    return run


def _stencil(pb: Problem, d: np.ndarray, rtol: float) -> Any:
    return invimbed.solve_imbedding(pb.problem, pb.x, d, control=pb.control,
                                    closure="stencil", rtol=rtol, atol=rtol / 100)


def methods(numba_ok: bool, sweep_numba_ok: bool = False) -> list[Method]:
    out = []
    if numba_ok:
        out.append(Method("ensemble numba", _adjoint("ensemble", "numba")))
    out.append(Method("ensemble", _adjoint("ensemble")))
    if sweep_numba_ok:
        for K in (1, 2, 3, 4):
            out.append(Method(f"nb jet-{K}", _jet_numba(K, False), True, K))
            out.append(Method(f"nb jet-{K}+est", _jet_numba(K, True), True, K + 1))
    for K in (1, 2, 3, 4):
        out.append(Method(f"jet-{K}", _jet(K, False), True, K))
        out.append(Method(f"jet-{K}+est", _jet(K, True), True, K + 1))
    out.append(Method("stencil", _stencil, True))
    out.append(Method("per_depth", _adjoint("per_depth")))
    return out


def methods_at(ms: list[Method], n: int, faster_ensemble: str | None) -> list[Method]:
    """The methods run at ``n`` depths: all of them up to ``BIG_N``; from ``BIG_N`` on the
    two ensembles, the numpy jet of order 1 and the numba sweeps (the per-depth loop, the
    stencil and the numpy jets of higher order are left out: their cost or their
    truncation floor is on record at the smaller ``n``); from ``HUGE_N`` on only the
    ensemble that was the faster at the largest smaller ``n`` (``faster_ensemble``) and
    the numba sweeps."""
    if n < BIG_N:
        return ms
    if n < HUGE_N:
        return [m for m in ms if m.name in ("ensemble numba", "ensemble", "jet-1")
                or m.name.startswith("nb ")]
    return [m for m in ms if m.name == faster_ensemble or m.name.startswith("nb ")]


def probe_numba(pb: Problem) -> tuple[bool, str | None]:
    """``(available, note)``: ``backend="numba"`` tried once. An ImportError (the backend
    or numba missing) drops the numba rows; another failure keeps them (each row then
    reports its error) and is noted."""
    try:
        res = invimbed.solve_adjoint(pb.problem, pb.x, pb.depths(2), control=pb.control,
                                     rtol=1e-6, atol=1e-8, strategy="ensemble",
                                     backend="numba")
    except (ImportError, ModuleNotFoundError) as exc:
        return False, f"ensemble numba skipped: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - report, keep the rows
        return True, (f"ensemble numba probe on {pb.name}: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}")
    return True, None if res.success else f"ensemble numba probe: {res.message}"


def probe_sweep_numba(pb: Problem) -> tuple[bool, str | None, float]:
    """``(available, note, seconds)``: the compiled adaptive sweep
    (``solve_imbedding(backend="numba")``) tried once; its seconds are the process's
    first call: it compiles the kernel, or loads it from numba's on-disk cache."""
    t0 = time.perf_counter()
    try:
        res = invimbed.solve_imbedding(pb.problem, pb.x, pb.depths(2), control=pb.control,
                                       order=1, estimate_error=False, rtol=1e-6, atol=1e-8,
                                       backend="numba")
    except Exception as exc:  # noqa: BLE001 - no numba sweep here: its rows are dropped
        return False, (f"numba sweep skipped: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}"), math.nan
    spent = time.perf_counter() - t0
    return True, None if res.success else f"numba sweep probe: {res.message}", spent


# -- measuring -------------------------------------------------------------------------------
class CallTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise CallTimeout


def capped_call(fn: Callable[[], Any], cap: float | None) -> tuple[float, Any]:
    """``(wall time, result)`` of ``fn()``; raises CallTimeout past ``cap`` seconds
    (SIGALRM; no cap where there is none)."""
    use = cap is not None and hasattr(signal, "setitimer")
    if use:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        t0 = time.perf_counter()
        res = fn()
        return time.perf_counter() - t0, res
    finally:
        if use:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


@dataclass
class Row:
    problem: str
    n: int
    N: int
    method: str
    rtol: float
    time: float = math.inf
    err: float = math.inf
    worst_field: str = ""
    err_entrywise: float = math.inf
    note: str = ""
    est_ratio: float | None = None     # jets with estimate: estimated / actual error (norm)


ENTRYWISE = getattr(P, "ENTRYWISE_FLOOR", 1e-8)


def errors(res: Any, ref: dict) -> tuple[float, str, float]:
    """(worst relative error, its field, the entry-wise variant)."""
    if not getattr(res, "success", True):
        return math.inf, "failed", math.inf
    e = P.worst_rel_error(res, ref, per_field=True)
    worst = max(e, key=e.get)
    return e[worst], worst, P.worst_rel_error(res, ref, floor=ENTRYWISE)


def estimate_ratio(res: Any, ref: dict) -> float | None:
    """Field-normwise estimated error over actual error, worst fields of each
    (``z``, ``value``, ``adjoint``, ``param_grad``: those the estimate covers)."""
    est = getattr(res, "error_estimate", None)
    if est is None:
        return None
    names = [k for k in ("z", "value", "adjoint", "param_grad") if k in est]
    scale = {k: max(float(np.max(np.abs(ref[k]))), 1e-300) for k in names}
    e_est = max(float(np.max(np.abs(est[k]))) / scale[k] for k in names)
    e_act = max(float(np.max(np.abs(np.asarray(res[k]) - ref[k]))) / scale[k] for k in names)
    return e_est / e_act if e_act > 0 else None


def is_sweep(method: str) -> bool:
    return "jet" in method or method == "stencil"


def is_ensemble(method: str) -> bool:
    return method.startswith("ensemble")


def too_big(pb: Problem, m: Method) -> bool:
    return bool(m.jet_order) and math.comb(pb.N + m.jet_order, m.jet_order) > MAX_JET_COEFFS


def dominated(t: float, done: set[float], others: list[Row], method: str,
              among: Callable[[str], bool] = lambda name: True, count: int = 2) -> bool:
    """Whether every target this method has not met yet is met, in at most ``t`` seconds,
    by ``count`` other methods (those ``among`` accepts): its later (slower)
    configurations can then not be among the ``count`` fastest of those."""
    for tgt in TARGETS:
        if tgt in done:
            continue
        rivals = {r.method for r in others if r.method != method and among(r.method)
                  and r.err <= tgt and r.time <= t}
        if len(rivals) < count:
            return False
    return True


def cut(t: float, met: set[float], others: list[Row], m: Method) -> bool:
    """Rule 4 of the module docstring: whether the rest of ``m``'s rtol sweep can change
    neither the summary nor the speed-up table (an ensemble only yields to the other
    ensemble, a numba sweep also to another numba sweep, a numpy sweep to another
    sweep)."""
    if is_ensemble(m.name):
        return dominated(t, met, others, m.name, is_ensemble, 1)
    if not dominated(t, met, others, m.name):
        return False
    if is_numba_sweep(m.name):
        return dominated(t, met, others, m.name, is_numba_sweep, 1)
    return not m.truncation_limited or dominated(t, met, others, m.name, is_sweep, 1)


def sweep(pb: Problem, n: int, m: Method, rtols: list[float], ref: dict, repeats: int,
          cap: float, others: list[Row]) -> list[Row]:
    """The rtol sweep of one method (see the module docstring for when it stops)."""
    d = pb.depths(n)
    rows: list[Row] = []
    if too_big(pb, m):
        k = m.jet_order
        rows.append(Row(pb.name, n, pb.N, m.name, rtols[0],
                        note=f"skipped: jet state C(N+{k},{k}) = "
                             f"{math.comb(pb.N + k, k)} coefficients > {MAX_JET_COEFFS}"))
        return rows
    times: list[float] = []
    met: set[float] = set()
    for rtol in rtols:
        row = Row(pb.name, n, pb.N, m.name, rtol)
        if times and cut(times[-1], met, others, m):
            row.note = ("stopped: faster methods meet every target not met yet"
                        + (" (a sweep among them)" if m.truncation_limited else ""))
            rows.append(row)
            break
        if len(times) >= 2 and times[-1] * max(times[-1] / times[-2], 1.0) > cap:
            row.note = f"stopped: predicted > {cap:g} s"
            rows.append(row)
            break
        call = lambda: m.run(pb, d, rtol)  # noqa: E731
        try:
            best = math.inf
            for _ in range(repeats):
                t, res = capped_call(call, cap)
                best = min(best, t)
                if t > SLOW_CALL:
                    break
            row.time = best
        except CallTimeout:
            row.note = f"stopped: over the {cap:g} s cap"
            rows.append(row)
            break
        except Exception as exc:  # noqa: BLE001 - report the row and go on
            row.note = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
            rows.append(row)
            break
        row.err, row.worst_field, row.err_entrywise = errors(res, ref)
        if m.name.endswith("+est"):
            row.est_ratio = estimate_ratio(res, ref)
        rows.append(row)
        times.append(row.time)
        met |= {tgt for tgt in TARGETS if row.err <= tgt}
        if row.err <= min(TARGETS):
            break
        if m.truncation_limited:
            looser = [r.err for r in rows[:-1] if r.rtol >= 100 * rtol]
            if looser and row.err > 0.5 * min(looser):
                row.note = "plateau: truncation error dominates"
                break
    return rows


def prime(pb: Problem, ms: list[Method]) -> float:
    """One untimed call of each method at two depths (sympy code generation for every
    derivative order it needs, numba compilation); seconds spent."""
    t0 = time.perf_counter()
    for m in ms:
        if too_big(pb, m):
            continue
        try:
            m.run(pb, pb.depths(2), 1e-3)
        except Exception:  # noqa: BLE001 - the sweep reports it
            pass
    return time.perf_counter() - t0


def best_for(rows: list[Row], target: float) -> list[Row]:
    """Per method, its fastest row meeting ``target``; sorted by time."""
    per: dict[str, Row] = {}
    for r in rows:
        if r.err <= target and math.isfinite(r.time):
            if r.method not in per or r.time < per[r.method].time:
                per[r.method] = r
    return sorted(per.values(), key=lambda r: r.time)


def reference(pb: Problem, n: int, check_exact: bool) -> tuple[dict, float | None, float]:
    """``(reference fields, check, seconds)``. ``check``: the worst relative error of an
    independent solve against the reference -- the ensemble (RK45) at the reference's
    tolerances for the nonlinear problems; per_depth DOP853 at those tolerances for the
    exact (LQ) references, where ``check_exact`` (None otherwise: it is exact)."""
    d = pb.depths(n)
    t0 = time.perf_counter()
    if pb.exact is not None:
        ref = pb.exact(d)
        spent = time.perf_counter() - t0
        if not check_exact:
            return ref, None, spent
        chk = invimbed.solve_adjoint(pb.problem, pb.x, d, control=pb.control, method="DOP853",
                                     rtol=REF_TOL[0], atol=REF_TOL[1], strategy="per_depth")
        return ref, P.worst_rel_error(chk, ref), spent
    res = invimbed.solve_adjoint(pb.problem, pb.x, d, control=pb.control, method="DOP853",
                                 rtol=REF_TOL[0], atol=REF_TOL[1], strategy="per_depth")
    if not res.success:
        raise RuntimeError(f"reference failed for {pb.name}, n = {n}: {res.message}")
    ref = {k: np.asarray(res[k], float) for k in FIELDS}
    spent = time.perf_counter() - t0
    chk = invimbed.solve_adjoint(pb.problem, pb.x, d, control=pb.control, rtol=REF_TOL[0],
                                 atol=REF_TOL[1], strategy="ensemble")
    return ref, P.worst_rel_error(chk, ref), spent


# -- output ------------------------------------------------------------------------------------
def fmt_t(t: float) -> str:
    if not math.isfinite(t):
        return "-"
    return f"{1e3 * t:.1f} ms" if t < 10 else f"{t:.1f} s"


def print_full(rows: list[Row]) -> None:
    head = (f"{'problem':<10} {'n':>5} {'N':>3}  {'method':<15} {'rtol':>6}  {'time':>10} "
            f"{'worst rel':>9}  {'field':<10} {'entrywise':>9} {'est/err':>7}  note")
    print(head)
    print("-" * len(head))
    last = None
    for r in rows:
        key = (r.problem, r.n)
        if last is not None and key != last:
            print()
        last = key
        est = "" if r.est_ratio is None else f"{r.est_ratio:.2g}"
        err = "-" if not math.isfinite(r.err) else f"{r.err:.1e}"
        ent = "-" if not math.isfinite(r.err_entrywise) else f"{r.err_entrywise:.1e}"
        print(f"{r.problem:<10} {r.n:>5} {r.N:>3}  {r.method:<15} {r.rtol:>6.0e}  "
              f"{fmt_t(r.time):>10} {err:>9}  {r.worst_field:<10} {ent:>9} {est:>7}  {r.note}")


def table_cells(rows: list[Row], problems: list[Problem], plan: dict[str, list[int]],
                head: str):
    """Print ``head`` and its rule, then yield ``(problem, n, that cell's rows, target)``
    for every cell of a table, with a blank line after each problem."""
    print(head)
    print("-" * len(head))
    for pb in problems:
        for n in plan[pb.name]:
            sel = [r for r in rows if r.problem == pb.name and r.n == n]
            for tgt in TARGETS:
                yield pb, n, sel, tgt
        print()


def summary(rows: list[Row], problems: list[Problem], plan: dict[str, list[int]],
            checks: dict) -> list[dict]:
    out = []
    head = (f"{'problem':<10} {'n':>5} {'N':>3} {'target':>7}  {'fastest':<22} {'time':>9}  "
            f"{'runner-up':<22} {'time':>9} {'ratio':>6}  {'fastest sweep':<17} {'time':>9} "
            f"{'ratio':>6}  ref check")
    for pb, n, sel, tgt in table_cells(rows, problems, plan, head):
        ranked = best_for(sel, tgt)
        first = ranked[0] if ranked else None
        second = ranked[1] if len(ranked) > 1 else None
        sweep_ = next((r for r in ranked if is_sweep(r.method)), None)
        out.append({"problem": pb.name, "n": n, "N": pb.N, "target": tgt,
                    "first": first, "second": second, "sweep": sweep_})
        f1 = f"{first.method} @{first.rtol:.0e}" if first else "not reached"
        f2 = f"{second.method} @{second.rtol:.0e}" if second else "-"
        ratio = f"{second.time / first.time:.1f}x" if first and second else ""
        f3 = f"{sweep_.method} @{sweep_.rtol:.0e}" if sweep_ else "not reached"
        ratio3 = f"{sweep_.time / first.time:.1f}x" if sweep_ else ""
        chk = checks[(pb.name, n)]
        flag = " (!)" if pb.exact is None and chk > tgt / 10 else ""
        chk_s = "exact" if pb.exact is not None else f"{chk:.0e}"
        print(f"{pb.name:<10} {n:>5} {pb.N:>3} {tgt:>7.0e}  {f1:<22} "
              f"{fmt_t(first.time) if first else '-':>9}  {f2:<22} "
              f"{fmt_t(second.time) if second else '-':>9} {ratio:>6}  {f3:<17} "
              f"{fmt_t(sweep_.time) if sweep_ else '-':>9} {ratio3:>6}  {chk_s}{flag}")
    return out


def sweep_floors(rows: list[Row], problems: list[Problem], plan: dict[str, list[int]],
                 ms: list[Method]) -> None:
    """The best accuracy each imbedding closure reached (over its rtol sweep)."""
    names = [m.name for m in ms if m.truncation_limited]
    head = f"{'problem':<10} {'n':>6}  " + " ".join(f"{k:>14}" for k in names)
    print(head)
    print("-" * len(head))
    for pb in problems:
        for n in plan[pb.name]:
            cells = []
            for k in names:
                errs = [r.err for r in rows if r.problem == pb.name and r.n == n
                        and r.method == k and math.isfinite(r.err)]
                cells.append(f"{min(errs):>14.1e}" if errs else f"{'-':>14}")
            print(f"{pb.name:<10} {n:>6}  " + " ".join(cells))
    print()


def fastest(rows: list[Row], target: float, among: Callable[[str], bool]) -> Row | None:
    """The fastest row meeting ``target`` among the methods ``among`` accepts, or None."""
    return next((r for r in best_for(rows, target) if among(r.method)), None)


def is_numba_sweep(method: str) -> bool:
    return method.startswith("nb jet")


# the speed targets: (problems, n, accuracy targets, least speed-up of the numba sweep over
# the fastest exact ensemble, numpy or numba backend)
SPEED_TARGETS = (
    (("lq4", "lq16"), 1024, TARGETS, 10.0),
    (("lq4", "lq16"), 128, TARGETS, 3.0),
    (("pendulums", "duffing"), 1024, (1e-3,), 3.0),
    (("lq4",), HUGE_N, TARGETS, 100.0),
)


def speedups(rows: list[Row], problems: list[Problem],
             plan: dict[str, list[int]]) -> dict[tuple, tuple]:
    """Per (problem, n, target): ``(numba sweep row, fastest ensemble row, speed-up)``,
    printed as a table; the speed-up is the ensemble's time over the sweep's (None where
    either did not meet the target)."""
    out = {}
    head = (f"{'problem':<10} {'n':>6} {'target':>7}  {'numba sweep':<20} {'time':>9}  "
            f"{'fastest ensemble':<24} {'time':>9}  {'speed-up':>8}  {'numpy sweep':>9}")
    for pb, n, sel, tgt in table_cells(rows, problems, plan, head):
        sw = fastest(sel, tgt, is_numba_sweep)
        en = fastest(sel, tgt, is_ensemble)
        npy = fastest(sel, tgt, lambda m: is_sweep(m) and not is_numba_sweep(m))
        ratio = en.time / sw.time if sw and en else None
        out[(pb.name, n, tgt)] = (sw, en, ratio)
        f1 = f"{sw.method} @{sw.rtol:.0e}" if sw else "not reached"
        f2 = f"{en.method} @{en.rtol:.0e}" if en else "not reached"
        r_s = f"{ratio:.1f}x" if ratio else "-"
        r_np = f"{npy.time / sw.time:.1f}x" if sw and npy else "-"
        print(f"{pb.name:<10} {n:>6} {tgt:>7.0e}  {f1:<20} "
              f"{fmt_t(sw.time) if sw else '-':>9}  {f2:<24} "
              f"{fmt_t(en.time) if en else '-':>9}  {r_s:>8}  {r_np:>9}")
    return out


def _targeted(key: tuple) -> bool:
    name, n, tgt = key
    return any(name in names and n == m and tgt in tgts for names, m, tgts, _ in SPEED_TARGETS)


#: how many configurations of each side `paired` times again: the fastest meeting the
#: target in the map (a configuration timed at a slow moment may not be the map's fastest)
PAIRED_CANDIDATES = 3


def paired(ups: dict[tuple, tuple], rows: list[Row], problems: list[Problem],
           ms: list[Method], rounds: int) -> dict[tuple, tuple]:
    """Each speed target below ``BIG_N`` depths timed again in alternation: the
    ``PAIRED_CANDIDATES`` fastest configurations of the map meeting the target on each
    side (numba sweeps; exact ensembles), each called once per round in turn, ``rounds``
    rounds, the best of each kept; per target ``(sweep row, its time, ensemble row, its
    time)`` of the fastest on each side. The map times each configuration at its own
    moment of the run, and this machine's speed drifts during a run (the same sweep took
    1.5x as long a few minutes later); in alternation both sides see the same machine."""
    by_name = {m.name: m for m in ms}
    by_pb = {pb.name: pb for pb in problems}
    out = {}
    for key, (_, _, ratio) in ups.items():
        name, n, tgt = key
        if ratio is None or n >= BIG_N or not _targeted(key):
            continue
        pb = by_pb[name]
        d = pb.depths(n)
        sides = []
        for among in (is_numba_sweep, is_ensemble):
            ok = [r for r in rows if r.problem == name and r.n == n and among(r.method)
                  and r.err <= tgt and math.isfinite(r.time)]
            sides.append(sorted(ok, key=lambda r: r.time)[:PAIRED_CANDIDATES])
        best = [[math.inf] * len(side) for side in sides]
        order = [(s, k) for k in range(max(len(side) for side in sides))
                 for s in range(len(sides)) if k < len(sides[s])]
        timed = interleaved([lambda r=sides[s][k]: by_name[r.method].run(pb, d, r.rtol)
                             for s, k in order], rounds, warmup=False)
        for (s, k), t in zip(order, timed):
            best[s][k] = t.best
        (i_sw, t_sw), (i_en, t_en) = (min(enumerate(t), key=lambda e: e[1]) for t in best)
        out[key] = (sides[0][i_sw], t_sw, sides[1][i_en], t_en)
    return out


def target_report(ups: dict[tuple, tuple], pairs: dict[tuple, tuple], rounds: int) -> None:
    """Each speed target: met, not met, or not measured in this run; where its two sides
    were timed again in alternation (`paired`), the fastest of each side decide."""
    for names, n, tgts, least in SPEED_TARGETS:
        for name in names:
            for tgt in tgts:
                key = (name, n, tgt)
                what = f"{name}, n = {n}, target {tgt:.0e}: numba sweep >= {least:g}x"
                if key not in ups:
                    print(f"  {what}: not measured in this run")
                    continue
                sw, en, ratio = ups[key]
                if ratio is None:
                    who = ("the numba sweep did not reach the target" if sw is None else
                           "no ensemble reached the target within the call cap")
                    print(f"  {what}: not measured ({who})")
                    continue
                how = (f"map: {ratio:.1f}x, {sw.method} @{sw.rtol:.0e} {fmt_t(sw.time)} "
                       f"against {en.method} @{en.rtol:.0e} {fmt_t(en.time)}")
                if key in pairs:
                    psw, t_sw, pen, t_en = pairs[key]
                    ratio = t_en / t_sw
                    how += (f"; in alternation, best of {rounds}: {ratio:.1f}x, {psw.method} "
                            f"@{psw.rtol:.0e} {fmt_t(t_sw)} against {pen.method} "
                            f"@{pen.rtol:.0e} {fmt_t(t_en)}")
                verdict = "met" if ratio >= least else "NOT met"
                print(f"  {what}: {ratio:.1f}x ({how}): {verdict}")


FAMILY_COLOURS = {"ensemble": "#1f77b4", "ensemble numba": "#17becf", "per_depth": "#7f7f7f",
                  "jet-1": "#2ca02c", "jet-1+est": "#98df8a", "jet-2": "#ff7f0e",
                  "jet-2+est": "#ffbb78", "jet-3": "#d62728", "jet-3+est": "#ff9896",
                  "jet-4": "#9467bd", "jet-4+est": "#c5b0d5", "stencil": "#8c564b",
                  "nb jet-1": "#006400", "nb jet-1+est": "#66aa66", "nb jet-2": "#b35900",
                  "nb jet-2+est": "#d99a5e", "nb jet-3": "#8b0000", "nb jet-3+est": "#c06060",
                  "nb jet-4": "#4b2a7b", "nb jet-4+est": "#8e7bb0"}


def plot(cells: list[dict], problems: list[Problem], ns: list[int], path: str,
         title: str) -> None:
    """The map: one panel per problem, a column per ``n`` in ``ns`` (grey where that
    problem did not run at that ``n``), a row per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    cols = 2
    rows_ = math.ceil(len(problems) / cols)
    width = 6.2 * max(1.0, len(ns) / 3)
    fig, axes = plt.subplots(rows_, cols, figsize=(width * cols, 4.0 * rows_ + 0.9),
                             squeeze=False)
    used = set()
    for ax, pb in zip(axes.ravel(), problems):
        for i, n in enumerate(ns):
            for j, tgt in enumerate(TARGETS):
                c = next((c for c in cells if c["problem"] == pb.name and c["n"] == n
                          and c["target"] == tgt), None)
                first, second = (c["first"], c["second"]) if c else (None, None)
                if c is None:
                    colour, text = "#f7f7f7", "not run"
                elif first is None:
                    colour, text = "#eeeeee", "not\nreached"
                else:
                    colour = FAMILY_COLOURS.get(first.method, "#bbbbbb")
                    used.add(first.method)
                    text = f"{first.method} @{first.rtol:.0e}\n{fmt_t(first.time)}"
                    if second is not None:
                        text += f"\nnext: {second.method}, {second.time / first.time:.1f}x"
                    sw = c["sweep"]
                    if sw is None:
                        text += "\nsweep: not reached"
                    elif sw is not first:
                        text += f"\nsweep: {sw.method}, {sw.time / first.time:.1f}x"
                ax.add_patch(Rectangle((i, j), 1, 1, facecolor=colour, edgecolor="white",
                                       linewidth=2))
                ax.text(i + 0.5, j + 0.5, text, ha="center", va="center", fontsize=6.8)
        ax.set_xlim(0, len(ns))
        ax.set_ylim(0, len(TARGETS))
        ax.set_xticks([i + 0.5 for i in range(len(ns))], [str(n) for n in ns])
        ax.set_yticks([j + 0.5 for j in range(len(TARGETS))], [f"{t:.0e}" for t in TARGETS])
        ax.set_xlabel("number of depths n")
        ax.set_ylabel("target worst rel. error")
        ax.set_title(f"{pb.name} (N = {pb.N})", fontsize=10)
        ax.tick_params(length=0)
        for s in ax.spines.values():
            s.set_visible(False)
    for ax in axes.ravel()[len(problems):]:
        ax.set_visible(False)
    handles = [Patch(facecolor=FAMILY_COLOURS.get(m, "#bbbbbb"), label=m)
               for m in FAMILY_COLOURS if m in used]
    handles.append(Patch(facecolor="#eeeeee", label="not reached"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.025))
    fig.text(0.5, 0.008, "cell: the fastest method @ its rtol and its time (colour); next: the "
             "runner-up (another method); sweep: the fastest imbedding closure (jet or "
             "stencil); Nx: their time over the fastest's", ha="center", fontsize=7.5)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else "?"


def parse_cells(specs: list[str], builders: dict) -> dict[str, list[int]]:
    """``["lq4:1024,100000", "duffing:8"]`` -> ``{"lq4": [1024, 100000], "duffing": [8]}``."""
    out: dict[str, list[int]] = {}
    for spec in specs:
        name, _, ns_ = spec.partition(":")
        if name not in builders or not ns_:
            raise ValueError(f"--cells expects PROBLEM:N[,N...] with PROBLEM one of "
                             f"{list(builders)}, but got {spec!r}")
        out.setdefault(name, [])
        out[name] += [int(float(v)) for v in ns_.split(",")]
    return {k: sorted(set(v)) for k, v in out.items()}


DEFAULT_PLAN = {"lq4": [8, 128, 1024, BIG_N, HUGE_N], "lq16": [8, 128, 1024, BIG_N],
                "pendulums": [8, 128, 1024], "duffing": [8, 128, 1024]}


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="n = 8, 128; rtol 1e-3, 1e-6, 1e-9, 1e-12 (under 2 "
                                      "minutes)",
                       repeats_help="timed calls per configuration, the best kept (default "
                                    "5, --quick 2)")
    parser.add_argument("--max-call-seconds", type=float, default=None,
                        help="stop a method's sweep past this call time (default 2, "
                             "--quick 1)")
    parser.add_argument("--big-call-seconds", type=float, default=120.0,
                        help=f"the same from n = {BIG_N} on (default 120)")
    parser.add_argument("--problems", nargs="+", default=None,
                        help="subset of lq4 lq16 pendulums duffing")
    parser.add_argument("--cells", nargs="+", default=None, metavar="PROBLEM:N[,N...]",
                        help="the (problem, n) cells to run, e.g. lq4:1024,100000 "
                             "pendulums:1024 (default: lq4 at 8 to 1e5, lq16 at 8 to 1e4, "
                             "the nonlinear problems at 8, 128, 1024)")
    parser.add_argument("--methods", nargs="+", default=None, metavar="NAME",
                        help="run only these methods (names as in the tables: 'ensemble', "
                             "'ensemble numba', 'nb jet-1', 'jet-2+est', 'stencil', "
                             "'per_depth', ...; a name ending in '*' is a prefix, e.g. "
                             "'nb*')")
    parser.add_argument("--no-numba-sweep", action="store_true",
                        help="leave out solve_imbedding(backend='numba')")
    parser.add_argument("--plot", metavar="FILE", default="docs/img/choosing-map.png",
                        help="figure of the fastest method per (n, target) and problem "
                             "(default docs/img/choosing-map.png; 'none' for no figure)")
    args = parser.parse_args(argv)
    args.repeats = repeats_of(args, full=5, quick=2)
    rtols = ([1e-3, 1e-6, 1e-9, 1e-12] if args.quick
             else [10.0 ** -k for k in range(3, 13)])
    big_rtols = [10.0 ** -k for k in range(3, 10)]
    cap = args.max_call_seconds or (1.0 if args.quick else 2.0)

    builders = {"lq4": lambda: lq_problem(4), "lq16": lambda: lq_problem(16),
                "pendulums": pendulum_problem, "duffing": duffing_problem}
    if args.cells:
        try:
            plan = parse_cells(args.cells, builders)
        except ValueError as exc:
            parser.error(str(exc))
    else:
        plan = {k: ([8, 128] if args.quick else v) for k, v in DEFAULT_PLAN.items()}
    names = [k for k in (args.problems or list(builders)) if k in plan]
    unknown = sorted(set(args.problems or []) - set(builders))
    if unknown:
        parser.error(f"unknown problem(s) {unknown}; choose from {list(builders)}")
    all_ns = sorted({n for k in names for n in plan[k]})

    t_start = time.perf_counter()
    start_load = load()
    print("invimbed benchmark: time to a target accuracy, per method, problem, n and N")
    print(f"date     : {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(header("sympy", "numba", "matplotlib", argv=argv))
    print(f"targets  : worst relative error over the five fields (_pendulums.worst_rel_error, "
          f"floor {P.REL_FLOOR:g}: field-normwise) <= {', '.join(f'{t:.0e}' for t in TARGETS)}")
    print(f"depths   : linspace({Q_END:g}, {P_MIN:g}, n); "
          + "; ".join(f"{k}: n = {plan[k]}" for k in names))
    print(f"sweep    : rtol = {', '.join(f'{r:.0e}' for r in rtols)} (from n = {BIG_N}: "
          f"{big_rtols[0]:.0e} to {big_rtols[-1]:.0e}), atol = rtol/100, RK45; best of "
          f"{args.repeats}; call cap {cap:g} s (from n = {BIG_N}: {args.big_call_seconds:g} s)")

    t0 = time.perf_counter()
    problems = [builders[k]() for k in names]
    print(f"problems : built in {time.perf_counter() - t0:.1f} s")
    for pb in problems:
        how = ("exact (matrix exponentials)" if pb.exact else
               f"per_depth DOP853 rtol {REF_TOL[0]:g}, atol {REF_TOL[1]:g}")
        print(f"  {pb.name:<10} {pb.note}; reference: {how}")
    numba_ok, why = probe_numba(problems[0])
    if why:
        print(f"  note: {why}")
    sweep_ok = False
    if not args.no_numba_sweep:
        sweep_ok, why, first = probe_sweep_numba(problems[0])
        if why:
            print(f"  note: {why}")
        if sweep_ok:
            t1 = time.perf_counter()
            probe_sweep_numba(problems[0])
            print(f"  numba sweep compilation: first call in this process {first:.2f} s "
                  f"(compiles the kernel, or loads it from numba's disk cache), second "
                  f"call {time.perf_counter() - t1:.3f} s (n = 2, jet-1); excluded from "
                  f"every time below")
    ms = methods(numba_ok, sweep_ok)
    if args.methods:
        def wanted(name: str) -> bool:
            return any(name == w or (w.endswith("*") and name.startswith(w[:-1]))
                       for w in args.methods)
        known = [m.name for m in ms]
        missing = [w for w in args.methods if not any(
            k == w or (w.endswith("*") and k.startswith(w[:-1])) for k in known)]
        if missing:
            parser.error(f"--methods: no method {missing}; this run has {known}")
        ms = [m for m in ms if wanted(m.name)]
    print(f"methods  : {', '.join(m.name for m in ms)}")
    print()
    for pb in problems:
        print(f"  {pb.name:<10} code generation / compilation (one call of each method at "
              f"n = 2): {prime(pb, ms):.1f} s", flush=True)

    rows: list[Row] = []
    checks: dict[tuple, float | None] = {}
    for pb in problems:
        for n in plan[pb.name]:
            if pb.exact is None and n >= BIG_N:
                print(f"  {pb.name:<10} n = {n:>6}: skipped (its per-depth DOP853 "
                      f"reference is too slow here)")
                continue
            ref, chk, spent = reference(pb, n, check_exact=n == plan[pb.name][0] and n < BIG_N)
            checks[(pb.name, n)] = chk
            faster = None
            if n >= HUGE_N:
                smaller = [r for r in rows if r.problem == pb.name and r.n < n
                           and is_ensemble(r.method) and math.isfinite(r.time)]
                if smaller:
                    top = max(r.n for r in smaller)
                    faster = min((r for r in smaller if r.n == top), key=lambda r: r.time).method
                else:
                    faster = "ensemble numba" if numba_ok else "ensemble"
            here_ms = methods_at(ms, n, faster)
            big = n >= BIG_N
            t1 = time.perf_counter()
            here: list[Row] = []
            for m in here_ms:
                here += sweep(pb, n, m, big_rtols if big else rtols, ref,
                              1 if big else args.repeats,
                              args.big_call_seconds if big else cap, here)
            rows += here
            if pb.exact is None:
                what = f"check: ensemble RK45 at the same tolerances, worst rel {chk:.1e}"
            elif chk is not None:
                what = f"exact; check: per_depth DOP853 rtol 1e-13 against it, worst rel {chk:.1e}"
            else:
                what = "exact"
            print(f"  {pb.name:<10} n = {n:>6}: reference {spent:.1f} s ({what}); sweeps "
                  f"{time.perf_counter() - t1:.1f} s ({len(here_ms)} methods); "
                  f"load {load()}", flush=True)
    plan = {k: [n for n in v if (k, n) in checks] for k, v in plan.items()}
    print()
    print("Every configuration (time: best wall time; worst rel: worst field-normwise "
          "relative error over the five fields, max|a - b| / max|b|, and the field it is in; "
          "entrywise: the same with every entry relative to itself (floor "
          f"{ENTRYWISE:g} max|b|), for information; est/err: jets with the estimate, "
          "estimated over actual error, field-normwise):")
    print()
    print_full(rows)
    print()
    print("Fastest configuration per target (runner-up: the fastest other method; fastest "
          "sweep: the fastest imbedding closure (jet on numpy or numba ('nb'), stencil); "
          "ratio: its time over the winner's; ref check: worst rel error of an independent "
          "solve against the reference, (!) where it exceeds target/10, so that the "
          "reference itself is uncertain at that target):")
    print()
    cells = summary(rows, problems, plan, checks)
    print("The numba sweep against the exact ensemble (numba sweep: the fastest "
          "solve_imbedding(backend='numba') configuration meeting the target; fastest "
          "ensemble: the fastest solve_adjoint(strategy='ensemble'), numpy or numba backend; "
          "speed-up: the ensemble's time over the numba sweep's; numpy sweep: the fastest "
          "numpy sweep's time over the numba sweep's):")
    print()
    ups = speedups(rows, problems, plan)
    rounds = max(args.repeats, 5)
    pairs = paired(ups, rows, problems, ms, rounds)
    print("Speed targets (ratios of this run; never asserted; below 10^4 depths the "
          f"{PAIRED_CANDIDATES} fastest configurations of each side timed again in "
          f"alternation, best of {rounds} rounds each, decide):")
    target_report(ups, pairs, rounds)
    print()
    print("Best accuracy each imbedding closure reached over its rtol sweep (worst relative "
          "error; '-': skipped or not run). On the nonlinear problems it is the closure's "
          "truncation floor; on the LQ problems, where the jets are exact, it is only the "
          "integration error at the tightest rtol the sweep ran:")
    print()
    sweep_floors(rows, problems, plan, ms)
    if args.plot and args.plot.lower() != "none":
        title = (f"Fastest method to a worst relative error (invimbed bench_accuracy.py, "
                 f"{datetime.date.today().isoformat()}, {os.cpu_count()} CPUs, "
                 f"load {start_load})")
        plot(cells, problems, all_ns, args.plot, title)
        print(f"figure saved to {args.plot}")
    print(f"load avg : {start_load} at the start, {load()} at the end (1, 5, 15 min)")
    print(f"total benchmark time {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
