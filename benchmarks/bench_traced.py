"""Per-sample ``numba.njit`` functions without derivatives on the numba ensemble, against
diffrax's jitted ``vmap``: what tracing the functions into sympy (docs/derivatives.md)
buys over finite differences.

Problem: the coupled pendulums of ``_pendulums.py`` (``N = 4``, ``M = 2``, a
piecewise-constant torque on four pieces, ``n_w = 8``), ``n`` depths ``linspace(0, -1,
n)``, one input, ``rtol = 1e-8``, ``atol = 1e-10``. Rows, all ``solve_adjoint(...,
backend="numba")`` (the ensemble) except diffrax:

* ``njit, traced``: ``BolzaProblem(f, R, T)`` with per-sample ``@njit`` functions and no
  derivatives: the default ``derivatives="auto"`` traces them (their ``py_func``) into
  sympy, and the kernel runs the symbolic provider's generated code;
* ``njit, finite differences``: the same functions with
  ``derivatives="finite-differences"`` (nested central differences in the kernel);
* ``njit + exact derivatives``: the same functions and hand-written ``@njit``
  derivatives (``f_z``, ``f_theta``, ``R_z``, ``R_theta``, ``T_z``);
* ``from_sympy``: ``_pendulums.make_problem()``;
* ``diffrax vmap jit``: ``bench_ensemble.diffrax_compiled`` (Tsit5, ``jump_ts`` at the
  knots, reverse-mode gradients, float64).

Times are the best of ``R`` calls after one warm-up (``bench_ensemble.time_cases``: the
calls of one ``n`` interleaved round-robin), one thread everywhere (set before numpy
and jax are imported). Every row's fields are compared with the per-depth reference of
``_pendulums.reference`` up to ``--reference-max-n`` depths, with the last row's
(diffrax's) beyond (``norm``: max |a - b| / max |b| per field, the worst field).
Also printed: the one-time cost of tracing (trace, verification) and of the numba code
generation of a fresh problem (its first solve minus its second).

Run:  python benchmarks/bench_traced.py [--n 128 1024] [--repeats 5] [--reference-max-n 128]
"""

from __future__ import annotations

import _ensemble_cases as E    # first: one thread per tool, before numpy / jax load
import time

import _pendulums as P
import invimbed
from _machine import arguments, header, repeats_of

# the per-sample @njit pendulum of bench_backends.py, from _coupled_njit.py (the constants of _pendulums.py)
from _coupled_njit import R1 as R, T1 as T, f1 as f  # noqa: E402
from _coupled_njit import R1_theta as R_theta, R1_z as R_z, T1_z as T_z  # noqa: E402
from _coupled_njit import f1_theta as f_theta, f1_z as f_z  # noqa: E402


def problems() -> dict[str, invimbed.BolzaProblem]:
    derivs = dict(f_z=f_z, f_theta=f_theta, R_z=R_z, R_theta=R_theta, T_z=T_z)
    return {"njit, traced": invimbed.BolzaProblem(f, R, T, q=P.Q),
            "njit, finite differences": invimbed.BolzaProblem(
                f, R, T, q=P.Q, derivatives="finite-differences"),
            "njit + exact derivatives": invimbed.BolzaProblem(f, R, T, q=P.Q,
                                                              derivatives=derivs),
            "from_sympy": P.make_problem()}


def one_time_costs() -> str:
    """Tracing and code generation of a fresh problem (the functions are compiled)."""
    invimbed.solve_adjoint(invimbed.BolzaProblem(f, R, T, q=P.Q), P.X0, P.depths(2),
                           control=P.CONTROL, backend="numba")   # kernels and sympy loaded
    pb = invimbed.BolzaProblem(f, R, T, q=P.Q)
    t0 = time.perf_counter()
    prov = pb.provider(P.N, P.M)
    trace_s = time.perf_counter() - t0
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        invimbed.solve_adjoint(pb, P.X0, P.depths(8), control=P.CONTROL, backend="numba")
        times.append(time.perf_counter() - t0)
    return (f"one-time cost of a fresh problem: trace + verification {trace_s * 1e3:.0f} ms "
            f"({prov.name}); generated numba code, first solve - second "
            f"{(times[0] - times[1]) * 1e3:.0f} ms (loaded from the on-disk cache when "
            f"an earlier process generated it)")


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="n = 128 only, one timed repeat",
                   repeats_help="timed repeats, best taken (default 5, 1 with --quick)")
    ap.add_argument("--n", type=int, nargs="+", default=None,
                    help="depth counts (default 128 1024; 128 with --quick)")
    ap.add_argument("--reference-max-n", type=int, default=128)
    args = ap.parse_args(argv)
    args.n = args.n or ([128] if args.quick else [128, 1024])
    args.repeats = repeats_of(args, full=5)
    print("invimbed benchmark: per-sample @njit functions on the numba ensemble vs diffrax")
    print(header("sympy", "numba", "jax", "diffrax", argv=argv))
    have_diffrax = E.have("diffrax") and E.have("jax")
    print(one_time_costs())
    pbs = problems()
    rows = []
    for n in args.n:
        cases = [E.Case(name, E.BENCH, E.ensemble_call(n, E.BENCH, "numba", problem=pb))
                 for name, pb in pbs.items()]
        if have_diffrax:
            call, compile_s = E.diffrax_compiled(n, E.BENCH)
            cases.append(E.Case("diffrax vmap jit", E.BENCH, call, setup_s=compile_s))
        E.time_cases(cases, args.repeats)
        # the per-depth reference costs a scipy solve per depth: up to --reference-max-n,
        # beyond that the rows are compared with diffrax's (or from_sympy's) fields
        ref = P.reference(n) if n <= args.reference_max_n else cases[-1].result
        base = cases[-1].best_s if have_diffrax else None
        print(f"\nn = {n}, rtol 1e-8 (best of {args.repeats}; ratio = time / diffrax's)")
        print(f"  {'row':<28} {'time [ms]':>10} {'ratio':>7} {'norm err':>9}  derivatives")
        for c in cases:
            err = P.worst_rel_error(c.result, ref)
            ratio = f"{c.best_s / base:.2f}x" if base else "-"
            src = c.result.get("derivatives", "") if hasattr(c.result, "get") else ""
            print(f"  {c.tool:<28} {c.best_s * 1e3:>10.2f} {ratio:>7} {err:>9.1e}  "
                  f"{str(src)[:60]}")
            rows.append((n, c.tool, c.best_s, ratio))
    if have_diffrax:
        print("\ntargets: per-sample @njit without derivatives within 3x of diffrax; the "
              "fastest way to write it within 1.5x")
        for n in args.n:
            got = {tool: r for m, tool, _, r in rows if m == n}
            print(f"  n = {n}: njit traced {got['njit, traced']}, from_sympy "
                  f"{got['from_sympy']}, njit + exact derivatives "
                  f"{got['njit + exact derivatives']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
