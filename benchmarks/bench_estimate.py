"""How far the jet's error estimate can be trusted: true error over estimate, per field
and depth, and the verdict of `solve_imbedding` with and without the ratio test.

For each problem, jet order ``K`` and depth ``s = q - p`` the script compares

* the **true error** of the sweep's fields (``solve_imbedding(order=K, rtol=1e-12,
  atol=1e-14)``) against ``solve_adjoint(rtol=1e-12, atol=1e-14)`` (the exact ensemble,
  which shares nothing with the jet), per field: the largest absolute difference over the
  field's components (``z``, ``value``, ``adjoint``, ``param_grad``);
* the **estimate** ``error_estimate`` (``|F_(K+1) - F_K|``, the difference with the jet
  one order higher), its largest component per field;
* their ratio, true / estimate (1: exact; above 1: the estimate understates the error);
* the verdicts at each ``tol`` (numpy.isclose semantics per field and component,
  ``|err| <= atol + rtol |field|``; default ``0.1``, ``1e-3``, ``1e-6`` meaning
  ``(rtol, atol) = (t, t)``, and ``(0, 0.1)``, absolute only), per depth over every
  field the estimate covers (the four and ``depth_grad``, as ``solve_imbedding``'s
  verdict): **without** the ratio test (the estimate alone against ``tol``, computed from
  ``error_estimate`` and checked against ``solve_imbedding(..., tol=t,
  ratio_test=False)``'s ``converged`` at the first ``tol``) and **with** it
  (``solve_imbedding(..., tol=t)``'s ``converged``, the default: one sweep per ``tol``).
  ``order=K, max_order=K`` keep the order fixed.

Rows are flagged

* ``U`` where the estimate understates the true error by more than 2x and the depth was
  still accepted (with the ratio test at the loosest ``tol`` that accepted it; ``u``:
  accepted only without the ratio test) -- the failures the ratio test is there to
  prevent;
* ``MISS`` where a depth accepted with the ratio test has a field whose true error
  exceeds the tolerance (``miss``: accepted without the ratio test only).

Problems (all built with ``invimbed.from_sympy``, so every jet order is available):

* ``pendulum``: ``tests/problems.py``'s ``pendulum_functions()`` (its defaults; the
  script checks that the sympy version evaluates to the same ``f``, ``R``, ``T``): a
  forced, damped pendulum, ``theta = (u, b)`` (torque and damping), non-quadratic
  terminal loss; ``x = (1, 0.5)``, ``w = (0.2, 0.3)``;
* ``vanderpol``: ``vanderpol_functions()`` likewise, ``theta = (mu, u)``,
  ``T = log(1 + |z - z*|^2)``; ``x = (1.5, -0.5)``, ``w = (1, 0.2)``;
* ``lorenz``: Lorenz-63, ``theta = (sigma, rho, beta) = (10, 28, 8/3)``, from
  ``x = (1, 1, 20)``, ``T = |z - (0, 0, 25)|^2 / 200``, no running loss; its time scale
  is about 0.1, so its depths are 0.01 to 0.5 (from 0.6 to 1 every order's true error
  is above 1 and every depth is refused; they cost most of the time);
* ``double``: a damped double pendulum (unit masses, lengths and gravity, damping 0.1)
  driven by a torque ``u sin(2 t)`` on the first joint, ``w = u = 0.5``,
  ``R = 0.05 u^2 / 2 + 0.1 (2 - cos phi1 - cos phi2)``,
  ``T = 2 - cos(phi1 - 1) - cos(phi2 + 0.5) + (v1^2 + v2^2) / 4``;
  ``x = (0.8, -0.3, 0.2, 0.1)``.

Ratios are printed only where the true error is above the reference's own noise
(``1e-9 max(1, |field|)``; ``-`` otherwise). Depths: 0.1 to 2 (pendulum), 0.1 to 1.5
(Van der Pol, double pendulum: at 2 every order is off by more than 1), 0.01 to 0.5
(Lorenz).

Usage::

    python benchmarks/bench_estimate.py            # every problem, K = 1..3 (< 5 min)
    python benchmarks/bench_estimate.py --quick    # pendulum and Lorenz, K = 1, 2 (< 1 min)
    python benchmarks/bench_estimate.py --tol 1e-2 0,1e-4 --orders 1 2 3 --problems lorenz
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import invimbed  # noqa: E402
from _machine import arguments, header  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad")
RTOL, ATOL = 1e-12, 1e-14        # every solve: the jet sweeps and the reference
NOISE = 1e-9                      # reference noise, relative to max(1, |field|)
UNDERSTATE = 2.0                  # flag: true / estimate above this and accepted


# -- problems ------------------------------------------------------------------------
def _pendulum(sp):
    t = sp.Symbol("t")
    phi, v, u, b = sp.symbols("phi v u b")
    a, eps, om, c, kv, rho, sig, kT = 1.0, 0.3, 1.3, 0.4, 0.2, 0.1, 0.15, 1.0
    phs, vs = 0.5, -0.2
    f = [v, -a * sp.sin(phi) - b * v + u + eps * sp.cos(om * t)]
    R = c * (1 - sp.cos(phi)) + kv / 2 * v**2 + rho / 2 * (u**2 + b**2) + sig * v * u
    T = kT * (1 - sp.cos(phi - phs)) + (v - vs)**4 / 4
    pb = invimbed.from_sympy(t, [phi, v], [u, b], f, R, T)
    return pb, np.array([1.0, 0.5]), invimbed.Constant([0.2, 0.3]), "pendulum_functions"


def _vanderpol(sp):
    t = sp.Symbol("t")
    x, v, mu, u = sp.symbols("x v mu u")
    al, be, ka, ga = 0.3, 0.1, 0.2, 0.25
    f = [v, mu * (1 - x**2) * v - x + u]
    R = al / 2 * (x**2 + v**2) + be / 4 * x**4 + ka / 2 * u**2 + ga * mu * x * v
    T = sp.log(1 + (x - 1.0)**2 + (v + 0.5)**2)
    pb = invimbed.from_sympy(t, [x, v], [mu, u], f, R, T)
    return pb, np.array([1.5, -0.5]), invimbed.Constant([1.0, 0.2]), "vanderpol_functions"


def _lorenz(sp):
    t = sp.Symbol("t")
    x, y, z, sig, rho, beta = sp.symbols("x y z sigma rho beta")
    f = [sig * (y - x), x * (rho - z) - y, x * y - beta * z]
    T = (x**2 + y**2 + (z - 25)**2) / 200
    pb = invimbed.from_sympy(t, [x, y, z], [sig, rho, beta], f, None, T)
    return pb, np.array([1.0, 1.0, 20.0]), invimbed.Constant([10.0, 28.0, 8.0 / 3.0]), None


def _double(sp):
    t = sp.Symbol("t")
    p1, p2, v1, v2, u = sp.symbols("phi1 phi2 v1 v2 u")
    d = p1 - p2
    tau = u * sp.sin(2 * t)
    # mass matrix [[2, cos d], [cos d, 1]] (unit masses, lengths, gravity), damping 0.1
    r1 = -sp.sin(d) * v2**2 - 2 * sp.sin(p1) - 0.1 * v1 + tau
    r2 = sp.sin(d) * v1**2 - sp.sin(p2) - 0.1 * v2
    det = 2 - sp.cos(d)**2
    f = [v1, v2, (r1 - sp.cos(d) * r2) / det, (2 * r2 - sp.cos(d) * r1) / det]
    R = 0.05 * u**2 / 2 + 0.1 * (2 - sp.cos(p1) - sp.cos(p2))
    T = 2 - sp.cos(p1 - 1) - sp.cos(p2 + 0.5) + (v1**2 + v2**2) / 4
    pb = invimbed.from_sympy(t, [p1, p2, v1, v2], [u], f, R, T)
    return pb, np.array([0.8, -0.3, 0.2, 0.1]), invimbed.Constant([0.5]), None


PROBLEMS = {"pendulum": _pendulum, "vanderpol": _vanderpol, "lorenz": _lorenz,
            "double": _double}
DEPTHS = {
    "pendulum": [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0],
    "vanderpol": [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5],
    "lorenz": [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5],
    "double": [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5],
}
QUICK_DEPTHS = {
    "pendulum": [0.1, 0.4, 1.0, 2.0],
    "vanderpol": [0.1, 0.4, 1.0, 2.0],
    "lorenz": [0.02, 0.1, 0.3, 0.5],
    "double": [0.1, 0.4, 1.0, 2.0],
}


def check_against_tests(name: str, pb, control, functions: str | None) -> str:
    """The largest difference between the sympy problem and the test problem of
    ``tests/problems.py`` at a few random points (``f``, ``R``, ``T``)."""
    if functions is None:
        return ""
    try:
        import problems
    except ImportError as exc:               # pragma: no cover - tests/ missing
        return f"(tests/problems.py not importable: {exc})"
    fn = getattr(problems, functions)()
    rng = np.random.default_rng(0)
    z = rng.normal(size=(5, 2))
    th = rng.normal(size=(5, 2))
    prov = pb.provider(2, 2)
    worst = 0.0
    for t in (-0.7, 0.0):
        for key in ("f", "R"):
            a = prov.derivative(key, t, z, th)
            worst = max(worst, float(np.max(np.abs(a - fn.evaluate(key, t, z, th)))))
    a = prov.derivative("T", 0.0, z, None)
    worst = max(worst, float(np.max(np.abs(a - fn.evaluate("T", 0.0, z, th)))))
    if worst > 1e-12:
        raise AssertionError(f"{name}: the sympy problem differs from tests/problems.py's "
                             f"{functions}() by {worst:.2g}")
    return f"same f, R, T as tests/problems.py {functions}() (max diff {worst:.1g})"


# -- measurement ---------------------------------------------------------------------
def field_max(a: np.ndarray) -> np.ndarray:
    """Largest |entry| per depth (axis 0)."""
    a = np.abs(np.asarray(a, float))
    return a.reshape(a.shape[0], -1).max(axis=1) if a.ndim > 1 else a


def measure(name: str, pb, x, control, s_list, orders, tols):
    depths = -np.asarray(s_list, float)
    t0 = time.perf_counter()
    ref = invimbed.solve_adjoint(pb, x, depths, control=control, rtol=RTOL, atol=ATOL)
    t_ref = time.perf_counter() - t0
    if not ref.success:
        raise RuntimeError(f"{name}: the reference failed: {ref.message}")
    rows, info = [], []
    for K in orders:
        t0 = time.perf_counter()
        plain, verdicts, n_sweeps = None, {}, 0
        # without the ratio test: one sweep (at the first tol, whose `converged` checks the
        # hand-made verdict below); with it: one sweep per tol
        for t, ratio in [(tols[0], False)] + [(t, True) for t in tols]:
            try:
                res = invimbed.solve_imbedding(pb, x, depths, control=control, order=K,
                                               max_order=K, tol=t, ratio_test=ratio,
                                               rtol=RTOL, atol=ATOL)
                n_sweeps += 1
            except Exception as exc:    # an order the problem cannot run: say so
                info.append(f"{name} K={K} tol={tol_text(t)} ratio_test={ratio}: "
                            f"{type(exc).__name__}: {exc}")
                res = None
            if res is not None and res.status == -1:
                info.append(f"{name} K={K} tol={tol_text(t)} ratio_test={ratio}: "
                            f"{res.message}")
            if not ratio:
                plain = res
                if res is None:
                    break
                for tt in tols:     # the estimate alone against tt, every estimated field
                    ok = np.isfinite(field_max(res.z))
                    for f in [k for k in (*FIELDS, "depth_grad") if k in res.error_estimate]:
                        e = np.asarray(res.error_estimate[f], float)
                        F = np.abs(np.asarray(res[f], float))
                        w = (e <= tt[1] + tt[0] * F).reshape(depths.size, -1)
                        ok &= np.all(w, axis=1)
                    verdicts[(tt, False)] = ok
                if not np.array_equal(verdicts[(t, False)], np.asarray(res.converged, bool)):
                    raise AssertionError(f"{name} K={K}: the estimate-alone verdict differs "
                                         f"from solve_imbedding(ratio_test=False)'s")
            else:
                verdicts[(t, True)] = (np.zeros(depths.size, bool) if res is None
                                       or res.converged is None
                                       else np.asarray(res.converged, bool))
        elapsed = time.perf_counter() - t0
        if plain is None:
            continue
        info.append(f"{name} K={K}: {n_sweeps} sweeps in {elapsed:.1f} s")
        for f in FIELDS:
            true = field_max(plain[f] - ref[f])
            est = field_max(plain.error_estimate[f])
            size = np.maximum(1.0, field_max(ref[f]))
            # numpy.isclose per component: |a - b| <= t + t |b|, the worst component
            scale = lambda t: t[1] + t[0] * np.abs(np.asarray(ref[f], float))  # noqa: E731
            for i, s in enumerate(s_list):
                above_noise = true[i] > NOISE * size[i]
                ratio_te = true[i] / est[i] if (above_noise and est[i] > 0) else np.nan
                within = {}
                for t in tols:
                    err = np.abs(np.asarray(plain[f] - ref[f], float))[i]
                    within[t] = bool(np.all(err <= scale(t)[i]))
                rows.append(dict(problem=name, K=K, s=s, field=f, true=true[i], est=est[i],
                                 ratio=ratio_te,
                                 acc={t: bool(verdicts[(t, False)][i]) for t in tols},
                                 conv={t: bool(verdicts[(t, True)][i]) for t in tols},
                                 within=within))
    return rows, info, t_ref


def flags(row, tols) -> str:
    out = []
    r = row["ratio"]
    if np.isfinite(r) and r > UNDERSTATE:
        if any(row["conv"][t] for t in tols):
            out.append("U")
        elif any(row["acc"][t] for t in tols):
            out.append("u")
    if any(row["conv"][t] and not row["within"][t] for t in tols):
        out.append("MISS")
    elif any(row["acc"][t] and not row["within"][t] for t in tols):
        out.append("miss")
    return " ".join(out)


def parse_tol(text: str) -> tuple[float, float]:
    """``"T"`` -> ``(T, T)``, ``"R,A"`` -> ``(R, A)``: solve_imbedding's ``tol``."""
    parts = [float(v) for v in str(text).split(",")]
    if len(parts) == 1:
        return (parts[0], parts[0])
    if len(parts) == 2:
        return (parts[0], parts[1])
    raise argparse.ArgumentTypeError(f"--tol takes T or R,A, not {text!r}")


def tol_text(t: tuple[float, float]) -> str:
    return format(t[0], "g") if t[0] == t[1] else f"{t[0]:g},{t[1]:g}"


def yn(b: bool) -> str:
    return "y" if b else "n"


def print_table(rows, tols) -> None:
    head = (f"{'problem':<9} {'K':>1} {'s':>5} {'field':<10} {'true err':>9} "
            f"{'estimate':>9} {'true/est':>8}  " +
            "  ".join(f"{'tol ' + tol_text(t):>9}" for t in tols) + "  flag")
    print(head)
    print("-" * len(head))
    last = None
    for r in rows:
        key = (r["problem"], r["K"])
        if last is not None and key != last:
            print()
        last = key
        ratio = "-" if not np.isfinite(r["ratio"]) else f"{r['ratio']:.3g}"
        verd = "  ".join(f"{yn(r['acc'][t]) + '/' + yn(r['conv'][t]):>9}" for t in tols)
        print(f"{r['problem']:<9} {r['K']:>1} {r['s']:>5g} {r['field']:<10} "
              f"{r['true']:>9.2e} {r['est']:>9.2e} {ratio:>8}  {verd}  {flags(r, tols)}")


def summary(rows, tols) -> None:
    print("\nSummary (ratio true / estimate over the rows above the reference noise):")
    probs = sorted({r["problem"] for r in rows}, key=list(PROBLEMS).index)
    for p in probs + ["all"]:
        sel = [r for r in rows if (p == "all" or r["problem"] == p) and np.isfinite(r["ratio"])]
        if not sel:
            continue
        rat = np.array([r["ratio"] for r in sel])
        def accepted(key):
            got = [r["ratio"] for r in sel if any(r[key][t] for t in tols)]
            if not got:
                return "0 rows"
            return f"{len(got)} rows, in [{min(got):.3g}, {max(got):.3g}]"

        print(f"  {p:<9}: {len(sel):>3} rows, true/est in [{rat.min():.3g}, {rat.max():.3g}], "
              f"median {np.median(rat):.3g}, > {UNDERSTATE:g}: {int(np.sum(rat > UNDERSTATE))}; "
              f"at depths accepted (at some tol) without the ratio test: {accepted('acc')}; "
              f"with it: {accepted('conv')}")
    print("\nVerdicts per (problem, K, depth) at each tol (depths, not field rows):")
    seen = {}
    for r in rows:
        seen.setdefault((r["problem"], r["K"], r["s"]), []).append(r)
    for t in tols:
        n = len(seen)
        acc = sum(all(r["acc"][t] for r in g) for g in seen.values())
        conv = sum(all(r["conv"][t] for r in g) for g in seen.values())
        ok = sum(all(r["within"][t] for r in g) for g in seen.values())
        miss_acc = sum(all(r["acc"][t] for r in g) and not all(r["within"][t] for r in g)
                       for g in seen.values())
        miss_conv = sum(all(r["conv"][t] for r in g) and not all(r["within"][t] for r in g)
                        for g in seen.values())
        refused_ok = sum(all(r["acc"][t] for r in g) and not all(r["conv"][t] for r in g)
                         and all(r["within"][t] for r in g) for g in seen.values())
        print(f"  tol {tol_text(t)}: {n} depths, truly within tol {ok}; accepted without ratio test "
              f"{acc} ({miss_acc} of them not within tol), with it {conv} ({miss_conv} not "
              f"within tol); refused by the ratio test although within tol: {refused_ok}")
    flagged = [r for r in rows if flags(r, tols)]
    print(f"\nFlagged rows: {len(flagged)} "
          f"({sum('U' in flags(r, tols).split() for r in flagged)} U, "
          f"{sum('u' in flags(r, tols).split() for r in flagged)} u, "
          f"{sum('MISS' in flags(r, tols).split() for r in flagged)} MISS, "
          f"{sum('miss' in flags(r, tols).split() for r in flagged)} miss)")


def main(argv=None) -> None:
    ap = arguments(__doc__, quick="pendulum and Lorenz, K = 1, 2, four depths (< 1 min)",
                   timed=False)
    ap.add_argument("--problems", nargs="+", choices=list(PROBLEMS))
    ap.add_argument("--orders", nargs="+", type=int)
    ap.add_argument("--tol", nargs="+", type=parse_tol, default=None,
                    help="tolerances of the verdicts: T for (rtol, atol) = (T, T), or R,A "
                         "(default 0.1 1e-3 1e-6 0,0.1)")
    args = ap.parse_args(argv)
    import sympy as sp

    start = time.perf_counter()
    print(f"date     : {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(header("sympy", argv=argv))
    names = args.problems or (["pendulum", "lorenz"] if args.quick else list(PROBLEMS))
    orders = args.orders or ([1, 2] if args.quick else [1, 2, 3])
    tols = list(args.tol or [parse_tol(v) for v in ("0.1", "1e-3", "1e-6", "0,0.1")])
    print(f"settings : orders {orders}, tol {', '.join(map(tol_text, tols))} (T: numpy.isclose "
          f"rtol = atol = T; R,A: rtol = R, atol = A), every "
          f"solve rtol={RTOL:g}, atol={ATOL:g}\n")
    rows, info = [], []
    for name in names:
        t0 = time.perf_counter()
        pb, x, control, functions = PROBLEMS[name](sp)
        note = check_against_tests(name, pb, control, functions)
        s_list = (QUICK_DEPTHS if args.quick else DEPTHS)[name]
        r, i, t_ref = measure(name, pb, x, control, s_list, orders, tols)
        rows += r
        info += ([f"{name}: {note}"] if note else []) + i
        info.append(f"{name}: reference (solve_adjoint ensemble) {t_ref:.1f} s; total "
                    f"{time.perf_counter() - t0:.1f} s (with sympy code generation)")
    print("Columns: true err = max |sweep - solve_adjoint| over the field's components; "
          "estimate = max error_estimate;\n"
          "tol t: verdict of the depth (all four fields) without / with the ratio test "
          "(y accepted, n refused);\n"
          f"flag U: true/est > {UNDERSTATE:g} and accepted with the ratio test (u: without "
          "only); MISS: accepted with the ratio test\nbut this field's true error exceeds "
          "tol (miss: accepted without the ratio test only).\n")
    print_table(rows, tols)
    summary(rows, tols)
    print()
    for line in info:
        print(line)
    if hasattr(os, "getloadavg"):
        print("load avg : %.2f %.2f %.2f (1, 5, 15 min) at the end" % os.getloadavg())
    print(f"total benchmark time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
