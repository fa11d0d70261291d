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
* ``stencil``: ``solve_imbedding(closure="stencil")`` (central differences);
* ``per_depth``: ``solve_adjoint(strategy="per_depth")``.

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
   runner-up -- and, for an imbedding closure, once another closure does too, so that
   they could not be the fastest sweep either (printed beside the winner).

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

Run:  python benchmarks/bench_accuracy.py [--quick] [--repeats R] [--plot FILE]
      [--max-call-seconds S] [--problems lq4 lq16 pendulums duffing]
      (about 4 to 7 minutes on 2 cores, by the load; --quick about 1 minute)
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
from scipy.linalg import expm  # noqa: E402

import invimbed  # noqa: E402
import _pendulums as P  # noqa: E402
from _machine import machine_info  # noqa: E402

TARGETS = (1e-3, 1e-6, 1e-9)
Q_END, P_MIN = 0.0, -1.0
REF_TOL = (1e-13, 1e-15)
MAX_JET_COEFFS = 500           # skip a jet whose Taylor state exceeds C(N + K', K') of this
SLOW_CALL = 0.5                # a call longer than this is timed once
FIELDS = P.FIELDS


# -- problems ---------------------------------------------------------------------------------
@dataclass
class Problem:
    name: str
    N: int
    problem: Any
    control: Any
    x: np.ndarray
    exact: Callable[[np.ndarray], dict] | None = None     # exact reference (LQ) or None
    note: str = ""

    def depths(self, n: int) -> np.ndarray:
        return np.linspace(Q_END, P_MIN, n)


def lq_problem(N: int, M: int = 2, seed: int = 0) -> Problem:
    """Random stable linear-quadratic problem with a piecewise-constant control, and its
    exact solution by matrix exponentials."""
    import sympy as sp

    rng = np.random.default_rng(seed)
    G = rng.standard_normal((N, N)) / np.sqrt(N)
    A = G - (np.max(np.linalg.eigvals(G).real) + 0.5) * np.eye(N)
    B = rng.standard_normal((N, M)) / np.sqrt(M)
    C = rng.standard_normal((N, N)) / np.sqrt(N)
    Qm = C @ C.T / N + 0.1 * np.eye(N)
    Rm = 0.1 * np.eye(M)
    D = rng.standard_normal((N, N)) / np.sqrt(N)
    Pm = D @ D.T + np.eye(N)
    x0 = rng.standard_normal(N)
    knots = np.linspace(P_MIN, Q_END, 5)
    values = 0.5 * rng.standard_normal((len(knots) - 1, M))
    control = invimbed.PiecewiseConstant(knots, values)

    t = sp.Symbol("t")
    z = list(sp.symbols(f"z0:{N}"))
    u = list(sp.symbols(f"u0:{M}"))
    Z, U = sp.Matrix(z), sp.Matrix(u)
    f = sp.Matrix(A) * Z + sp.Matrix(B) * U
    running = ((Z.T * sp.Matrix(Qm) * Z)[0] + (U.T * sp.Matrix(Rm) * U)[0]) / 2
    terminal = (Z.T * sp.Matrix(Pm) * Z)[0] / 2
    problem = invimbed.from_sympy(t, z, u, list(f), running, terminal, q=Q_END)

    # exact fields: y = [z; w] (w = values.ravel()), dy/dt = F_k y on piece k, running loss
    # y' W_k y / 2; J(p) = v' H(p) v / 2 with v = [x; w], z(q) = (Phi(p) v)[:N]
    K = len(knots) - 1
    nw = K * M
    D_ = N + nw
    w = values.ravel()
    v = np.concatenate([x0, w])
    Fs, Ws = [], []
    for k in range(K):
        S = np.zeros((M, nw))
        S[:, k * M:(k + 1) * M] = np.eye(M)
        F = np.zeros((D_, D_))
        F[:N, :N], F[:N, N:] = A, B @ S
        W = np.zeros((D_, D_))
        W[:N, :N], W[N:, N:] = Qm, S.T @ Rm @ S
        Fs.append(F)
        Ws.append(W)

    def piece_map(k: int, h: float) -> tuple[np.ndarray, np.ndarray]:
        """(e^{F h}, int_0^h e^{F' s} W e^{F s} ds) for piece k (Van Loan)."""
        F, W = Fs[k], Ws[k]
        big = np.zeros((2 * D_, 2 * D_))
        big[:D_, :D_], big[:D_, D_:], big[D_:, D_:] = -F.T, W, F
        E = expm(big * h)
        G22, G12 = E[D_:, D_:], E[:D_, D_:]
        return G22, G22.T @ G12

    # suffix maps from knot k to q (terminal loss included in H)
    Pt = np.zeros((D_, D_))
    Pt[:N, :N] = Pm
    suffix_phi = [None] * (K + 1)
    suffix_H = [None] * (K + 1)
    suffix_phi[K], suffix_H[K] = np.eye(D_), Pt
    for k in range(K - 1, -1, -1):
        E, I_ = piece_map(k, knots[k + 1] - knots[k])
        suffix_phi[k] = suffix_phi[k + 1] @ E
        suffix_H[k] = I_ + E.T @ suffix_H[k + 1] @ E

    def exact(depths: np.ndarray) -> dict:
        out = {name: [] for name in FIELDS}
        for p in depths:
            k = int(np.clip(np.searchsorted(knots, p, side="right") - 1, 0, K - 1))
            h = knots[k + 1] - p
            if h > 0:
                E, I_ = piece_map(k, h)
                phi = suffix_phi[k + 1] @ E
                H = I_ + E.T @ suffix_H[k + 1] @ E
            else:                                   # p = q
                phi, H = suffix_phi[K], suffix_H[K]
            H = 0.5 * (H + H.T)
            g = H @ v
            th = values[k]
            out["z"].append((phi @ v)[:N])
            out["value"].append(0.5 * v @ g)
            out["adjoint"].append(g[:N])
            out["param_grad"].append(g[N:])
            out["depth_grad"].append(-(g[:N] @ (A @ x0 + B @ th)
                                       + 0.5 * (x0 @ Qm @ x0 + th @ Rm @ th)))
        return {k_: np.array(v_) for k_, v_ in out.items()}

    return Problem(f"lq{N}", N, problem, control, x0, exact,
                   note=f"linear-quadratic, N = {N}, M = {M}, n_w = {nw}")


def pendulum_problem() -> Problem:
    return Problem("pendulums", P.N, P.problem(), P.CONTROL, P.X0,
                   note=f"coupled pendulums (_pendulums.py), N = {P.N}, n_w = {P.N_W}")


def duffing_problem() -> Problem:
    import sympy as sp

    t = sp.Symbol("t")
    x, v = z = list(sp.symbols("x v"))
    u = sp.Symbol("u")
    f = [v, -0.2 * v - x - x ** 3 + 0.5 * sp.sin(2 * sp.pi * t) + u]
    running = (x ** 2 + 0.1 * v ** 2 + 0.05 * u ** 2) / 2
    terminal = ((x - 1) ** 2 + v ** 2) / 2
    problem = invimbed.from_sympy(t, z, [u], f, running, terminal, q=Q_END)
    return Problem("duffing", 2, problem, invimbed.Constant([0.3]), np.array([0.5, 0.0]),
                   note="forced Duffing, N = 2, 0.5 sin(2 pi t) forcing, n_w = 1")


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


def _stencil(pb: Problem, d: np.ndarray, rtol: float) -> Any:
    return invimbed.solve_imbedding(pb.problem, pb.x, d, control=pb.control,
                                    closure="stencil", rtol=rtol, atol=rtol / 100)


def methods(numba_ok: bool) -> list[Method]:
    out = []
    if numba_ok:
        out.append(Method("ensemble numba", _adjoint("ensemble", "numba")))
    out.append(Method("ensemble", _adjoint("ensemble")))
    for K in (1, 2, 3, 4):
        out.append(Method(f"jet-{K}", _jet(K, False), True, K))
        out.append(Method(f"jet-{K}+est", _jet(K, True), True, K + 1))
    out.append(Method("stencil", _stencil, True))
    out.append(Method("per_depth", _adjoint("per_depth")))
    return out


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
    return method.startswith("jet") or method == "stencil"


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
        if times and dominated(times[-1], met, others, m.name) and (
                not m.truncation_limited
                or dominated(times[-1], met, others, m.name, is_sweep, 1)):
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


def summary(rows: list[Row], problems: list[Problem], ns: list[int],
            checks: dict) -> list[dict]:
    out = []
    head = (f"{'problem':<10} {'n':>5} {'N':>3} {'target':>7}  {'fastest':<22} {'time':>9}  "
            f"{'runner-up':<22} {'time':>9} {'ratio':>6}  {'fastest sweep':<17} {'time':>9} "
            f"{'ratio':>6}  ref check")
    print(head)
    print("-" * len(head))
    for pb in problems:
        for n in ns:
            sel = [r for r in rows if r.problem == pb.name and r.n == n]
            for tgt in TARGETS:
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
        print()
    return out


def sweep_floors(rows: list[Row], problems: list[Problem], ns: list[int],
                 ms: list[Method]) -> None:
    """The best accuracy each imbedding closure reached (over its rtol sweep)."""
    names = [m.name for m in ms if m.truncation_limited]
    head = f"{'problem':<10} {'n':>5}  " + " ".join(f"{k:>10}" for k in names)
    print(head)
    print("-" * len(head))
    for pb in problems:
        for n in ns:
            cells = []
            for k in names:
                errs = [r.err for r in rows if r.problem == pb.name and r.n == n
                        and r.method == k and math.isfinite(r.err)]
                cells.append(f"{min(errs):>10.1e}" if errs else f"{'-':>10}")
            print(f"{pb.name:<10} {n:>5}  " + " ".join(cells))
    print()


FAMILY_COLOURS = {"ensemble": "#1f77b4", "ensemble numba": "#17becf", "per_depth": "#7f7f7f",
                  "jet-1": "#2ca02c", "jet-1+est": "#98df8a", "jet-2": "#ff7f0e",
                  "jet-2+est": "#ffbb78", "jet-3": "#d62728", "jet-3+est": "#ff9896",
                  "jet-4": "#9467bd", "jet-4+est": "#c5b0d5", "stencil": "#8c564b"}


def plot(cells: list[dict], problems: list[Problem], ns: list[int], path: str,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    cols = 2
    rows_ = math.ceil(len(problems) / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(6.2 * cols, 4.0 * rows_ + 0.9),
                             squeeze=False)
    used = set()
    for ax, pb in zip(axes.ravel(), problems):
        for i, n in enumerate(ns):
            for j, tgt in enumerate(TARGETS):
                c = next(c for c in cells if c["problem"] == pb.name and c["n"] == n
                         and c["target"] == tgt)
                first, second = c["first"], c["second"]
                if first is None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="n = 8, 128; rtol 1e-3, 1e-6, 1e-9, 1e-12 (under 2 minutes)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed calls per configuration, the best kept (default 5, "
                             "--quick 2)")
    parser.add_argument("--max-call-seconds", type=float, default=None,
                        help="stop a method's sweep past this call time (default 2, "
                             "--quick 1)")
    parser.add_argument("--problems", nargs="+", default=None,
                        help="subset of lq4 lq16 pendulums duffing")
    parser.add_argument("--plot", metavar="FILE", default="docs/img/choosing-map.png",
                        help="figure of the fastest method per (n, target) and problem "
                             "(default docs/img/choosing-map.png; 'none' for no figure)")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    ns = [8, 128] if args.quick else [8, 128, 1024]
    rtols = ([1e-3, 1e-6, 1e-9, 1e-12] if args.quick
             else [10.0 ** -k for k in range(3, 13)])
    cap = args.max_call_seconds or (1.0 if args.quick else 2.0)

    t_start = time.perf_counter()
    start_load = load()
    print("invimbed benchmark: time to a target accuracy, per method, problem, n and N")
    print(f"date     : {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(machine_info("sympy", "numba", "matplotlib"))
    print(f"command  : python benchmarks/bench_accuracy.py {' '.join(argv or sys.argv[1:])}")
    print(f"targets  : worst relative error over the five fields (_pendulums.worst_rel_error, "
          f"floor {P.REL_FLOOR:g}: field-normwise) <= {', '.join(f'{t:.0e}' for t in TARGETS)}")
    print(f"depths   : n = {ns}, linspace({Q_END:g}, {P_MIN:g}, n)")
    print(f"sweep    : rtol = {', '.join(f'{r:.0e}' for r in rtols)}, atol = rtol/100, RK45; "
          f"best of {args.repeats}; call cap {cap:g} s")

    t0 = time.perf_counter()
    builders = {"lq4": lambda: lq_problem(4), "lq16": lambda: lq_problem(16),
                "pendulums": pendulum_problem, "duffing": duffing_problem}
    names = args.problems or list(builders)
    unknown = sorted(set(names) - set(builders))
    if unknown:
        parser.error(f"unknown problem(s) {unknown}; choose from {list(builders)}")
    problems = [builders[k]() for k in names]
    print(f"problems : built in {time.perf_counter() - t0:.1f} s")
    for pb in problems:
        how = ("exact (matrix exponentials)" if pb.exact else
               f"per_depth DOP853 rtol {REF_TOL[0]:g}, atol {REF_TOL[1]:g}")
        print(f"  {pb.name:<10} {pb.note}; reference: {how}")
    numba_ok, why = probe_numba(problems[0])
    if why:
        print(f"  note: {why}")
    ms = methods(numba_ok)
    print()
    for pb in problems:
        print(f"  {pb.name:<10} code generation / compilation (one call of each method at "
              f"n = 2): {prime(pb, ms):.1f} s", flush=True)

    rows: list[Row] = []
    checks: dict[tuple, float | None] = {}
    for pb in problems:
        for n in ns:
            ref, chk, spent = reference(pb, n, check_exact=n == ns[0])
            checks[(pb.name, n)] = chk
            t1 = time.perf_counter()
            here: list[Row] = []
            for m in ms:
                here += sweep(pb, n, m, rtols, ref, args.repeats, cap, here)
            rows += here
            if pb.exact is None:
                what = f"check: ensemble RK45 at the same tolerances, worst rel {chk:.1e}"
            elif chk is not None:
                what = f"exact; check: per_depth DOP853 rtol 1e-13 against it, worst rel {chk:.1e}"
            else:
                what = "exact"
            print(f"  {pb.name:<10} n = {n:>5}: reference {spent:.1f} s ({what}); sweeps "
                  f"{time.perf_counter() - t1:.1f} s; load {load()}", flush=True)
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
          "sweep: the fastest imbedding closure (jet, stencil); ratio: its time over the "
          "winner's; ref check: worst rel error of an independent solve against the "
          "reference, (!) where it exceeds target/10, so that the reference itself is "
          "uncertain at that target):")
    print()
    cells = summary(rows, problems, ns, checks)
    print("Best accuracy each imbedding closure reached over its rtol sweep (worst relative "
          "error; '-': skipped). On the nonlinear problems it is the closure's truncation "
          "floor; on the LQ problems, where the jets are exact, it is only the integration "
          "error at the tightest rtol the sweep ran:")
    print()
    sweep_floors(rows, problems, ns, ms)
    if args.plot and args.plot.lower() != "none":
        title = (f"Fastest method to a worst relative error (invimbed bench_accuracy.py, "
                 f"{datetime.date.today().isoformat()}, {os.cpu_count()} CPUs, "
                 f"load {start_load})")
        plot(cells, problems, ns, args.plot, title)
        print(f"figure saved to {args.plot}")
    print(f"load avg : {start_load} at the start, {load()} at the end (1, 5, 15 min)")
    print(f"total benchmark time {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
