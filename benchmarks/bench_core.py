"""Cost of the imbedding sweep against the per-depth adjoint reference.

Problem (``_pendulums.py``, shared with the other benchmarks): two pendulums coupled by a
spring, each driven by a constant torque,

    z = [phi1, phi2, omega1, omega2],   theta = u = [u1, u2] (invimbed.Constant),
    d phi_i / dt   = omega_i,
    d omega_1 / dt = -sin(phi1) - k (phi1 - phi2) - c omega1 + u1,
    d omega_2 / dt = -sin(phi2) - k (phi2 - phi1) - c omega2 + u2,
    R = a (2 - cos phi1 - cos phi2) + rho |u|^2 / 2,
    T = |z - z_target|^2 / 2,

with every derivative up to order three written by hand and vectorised (batch axis
first, then the output axes, then the ``z`` axes, then the ``theta`` axes).

For ``n`` requested depths evenly spaced in ``[p_min, q]`` it measures, in one run,
the wall time (best of a few repeats, ``time.perf_counter``) and the number of
right-hand-side evaluations (``nfev``) of

* ``solve_imbedding`` (jet, order 1) with ``estimate_error=True`` and ``False``;
* the same with finite-difference derivatives only (``derivatives="finite-differences"``; with no ``derivatives=`` the functions are traced into exact derivatives);
* ``solve_adjoint`` (a forward and a backward solve per depth),

all at the same ``rtol``/``atol``, and prints a table with the ratios. The imbedding
sweep's ``nfev`` does not grow with ``n`` (the depths come from dense output); the
reference's grows linearly. Note that one ``nfev`` is not the same work for both: an
imbedding evaluation computes derivative tensors of ``f`` and ``R`` up to order 2 (3
with the error estimate) and carries ``N^2``-sized Jacobians, an adjoint evaluation
needs ``f`` or ``f_z`` only; hence the wall time as well.

The last columns say how accurate the sweep is: the jet of order 1 is exact only for
affine dynamics, so on this nonlinear problem it differs from the reference by its
truncation error ``O((q - p)^3)`` (docs/theory.md, "The closures"), which the error estimate
reports.

Run:  python benchmarks/bench_core.py [--quick] [--rtol 1e-8] [--atol 1e-10]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import invimbed
from _machine import arguments, header, interleaved, repeats_of, write_json
from _pendulums import (M, N, P_MIN, Q, U0, X0,  # the problem (shared with the others)
                        check_derivatives, vectorised_problem as make_problem)


def run(ns: list[int], repeats: int, rtol: float, atol: float) -> list[dict[str, Any]]:
    control = invimbed.Constant(U0)
    exact = make_problem(True)
    fd = make_problem(False)
    tol = dict(rtol=rtol, atol=atol)
    cases = [
        ("imbedding jet-1 + estimate", "exact",
         lambda pb, d: invimbed.solve_imbedding(pb, X0, d, control=control, estimate_error=True,
                                                **tol), exact),
        ("imbedding jet-1", "exact",
         lambda pb, d: invimbed.solve_imbedding(pb, X0, d, control=control, estimate_error=False,
                                                **tol), exact),
        ("imbedding jet-1", "fin. diff.",
         lambda pb, d: invimbed.solve_imbedding(pb, X0, d, control=control, estimate_error=False,
                                                **tol), fd),
        ("adjoint (per depth)", "exact",
         lambda pb, d: invimbed.solve_adjoint(pb, X0, d, control=control, **tol), exact),
    ]
    rows = []
    for n in ns:
        depths = np.linspace(Q, P_MIN, n)
        calls = [lambda solve=solve, pb=pb: solve(pb, depths) for _, _, solve, pb in cases]
        results = []
        for (name, deriv, _, _), timed in zip(cases, interleaved(calls, repeats)):
            seconds, res = timed.best, timed.result
            if not res.success:
                raise RuntimeError(f"{name} ({deriv}) failed for n = {n}: {res.message}")
            results.append((name, deriv, seconds, res))
        ref_time, ref = results[-1][2], results[-1][3]
        for name, deriv, seconds, res in results:
            est = res.get("error_estimate")
            rows.append({
                "n": n, "method": name, "derivatives": deriv, "nfev": res.nfev,
                "time": seconds, "nfev_ratio": ref.nfev / res.nfev,
                "time_ratio": ref_time / seconds,
                "err_z": float(np.max(np.abs(res.z - ref.z))),
                "err_grad": float(np.max(np.abs(res.param_grad - ref.param_grad))),
                "est_z": None if est is None else float(np.max(est.z)),
            })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'n':>4}  {'method':<27} {'derivs':<10} {'nfev':>7} {'time [ms]':>10} "
            f"{'adj/this nfev':>13} {'adj/this time':>13}  {'max|dz|':>8} {'max|dJ/du|':>10} "
            f"{'est z':>8}")
    lines = [head, "-" * len(head)]
    last_n = None
    for r in rows:
        if last_n is not None and r["n"] != last_n:
            lines.append("")
        last_n = r["n"]
        is_ref = r["method"].startswith("adjoint")
        err = "(ref)" if is_ref else f"{r['err_z']:.1e}"
        errg = "(ref)" if is_ref else f"{r['err_grad']:.1e}"
        est = "-" if r["est_z"] is None else f"{r['est_z']:.1e}"
        lines.append(
            f"{r['n']:>4}  {r['method']:<27} {r['derivatives']:<10} {r['nfev']:>7} "
            f"{1e3 * r['time']:>10.2f} {r['nfev_ratio']:>13.1f} {r['time_ratio']:>13.1f}  "
            f"{err:>8} {errg:>10} {est:>8}"
        )
    return "\n".join(lines)


def growth(rows: list[dict[str, Any]]) -> str:
    """nfev and time at the largest n over those at the smallest, per method."""
    ns = sorted({r["n"] for r in rows})
    lo, hi = ns[0], ns[-1]
    out = [f"growth from n = {lo} to n = {hi} ({hi / lo:g} x the depths):"]
    for key in dict.fromkeys((r["method"], r["derivatives"]) for r in rows):
        a = next(r for r in rows if (r["method"], r["derivatives"]) == key and r["n"] == lo)
        b = next(r for r in rows if (r["method"], r["derivatives"]) == key and r["n"] == hi)
        out.append(f"  {key[0]:<27} {key[1]:<10} nfev x {b['nfev'] / a['nfev']:5.2f}   "
                   f"time x {b['time'] / a['time']:5.2f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="n = 8 and 32 only, one timed repeat (a smoke test)",
                       repeats_help="timed repeats per case, best taken (default 5, 1 with "
                                    "--quick)", json_out=True)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    args = parser.parse_args(argv)
    ns = [8, 32] if args.quick else [8, 32, 128]
    repeats = repeats_of(args, full=5)

    print("invimbed benchmark: imbedding sweep vs per-depth adjoint")
    print(header(argv=argv))
    print(f"problem  : two coupled pendulums, N = {N}, constant control M = {M}, running + "
          f"terminal loss, vectorized=True")
    print(f"depths   : n evenly spaced in [p_min, q] = [{P_MIN:g}, {Q:g}]; method RK45, "
          f"rtol = {args.rtol:g}, atol = {args.atol:g}; best of {repeats} timed repeat(s)")
    print(f"check    : max |exact - finite-difference derivative| = {check_derivatives():.1e} "
          f"(difference noise; a wrong tensor would show O(1))")
    print()
    t0 = time.perf_counter()
    rows = run(ns, repeats, args.rtol, args.atol)
    print(format_table(rows))
    print()
    print(growth(rows))
    print()
    print("nfev: right-hand-side evaluations. 'adj/this': the adjoint reference's nfev or time")
    print("over this row's (> 1: this row is cheaper). max|dz|, max|dJ/du|: largest difference")
    print("from the adjoint reference over all depths (the jet-1 truncation error, O((q-p)^3));")
    print("est z: the jet's own error estimate (order 1 vs 2).")
    print(f"total benchmark time {time.perf_counter() - t0:.1f} s")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
