"""Per-sample ``@numba.njit`` functions with some derivatives given, on ``backend="numba"``
against the same problem written vectorised on ``backend="numpy"``.

Problem: the coupled pendulums of ``_coupled_njit.py`` (``N = 4`` states, ``M = 2``
constant torques ``W``; the problem of ``bench_backends.py``), ``B`` inputs (default
1024), 64 depths on ``[-1, 0]``, fixed-step ``rk4`` with one step between depths (252
right-hand sides), the jet of order 1 with its error estimate (the default: the order-2
jet too, which needs third derivatives). Derivatives given up to the second order
(``f_z``, ``f_zz``, ``f_theta``, ``f_ztheta``, ``f_zztheta``, the same of ``R``, ``T_z``,
``T_zz``): per sample with ``numba.njit`` for numba, vectorised for numpy. The rest
(``f_zzz``, ``f_zzztheta``, ``R_zzz``, ``R_zzztheta``, ``T_zzz``) are traced from the
problem's functions in both (``res.derivatives`` says so; before, finite differences of
the given ones, nested inside the numba kernel). The given derivatives agree with the
trace, so numba runs the jet right-hand side generated for the problem from the traced
expressions (`invimbed._core.derivatives._jet_code`); the generic kernel of index tables
(``_numba.JET_CODE = False``, what problems without expressions run) is timed beside it.

Printed: the first call of each side (numba compilation, tracing, code generation), the
best of ``--repeats`` calls of each side timed in alternation (numpy, numba, numba's
generic kernel, numpy, ...), their ratio against the target (numba >= 20x numpy, never
asserted), the same for the process's CPU time (every numba thread counted: the ratio of
the work done, less sensitive to other jobs on a shared machine), numba's time per input
and right-hand side, the largest relative difference of the fields and of the error
estimate (target 1e-10), that of the generated code from the generic kernel, and where
the derivatives came from.

Run:  python benchmarks/bench_njit_derivatives.py [--B 1024] [--repeats 3]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import invimbed
from invimbed._backends import _numba
from _coupled_njit import (DEPTHS, NUMBA_DERIVATIVES, NUMPY_DERIVATIVES, STEP, W, R1, Rv, T1,
                           Tv, f1, fv, inputs)
from _machine import alternating, arguments, header

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
TARGET = 20.0
STAGES = 4 * (DEPTHS.size - 1)


def max_rel(a: invimbed.ImbeddingResult, b: invimbed.ImbeddingResult) -> tuple[float, float]:
    """The largest ``|a - b| / max(1, |b|)`` over the fields, and over the error estimate."""
    def rel(x, y):
        return float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y))))
    return (max(rel(a[k], b[k]) for k in FIELDS),
            max(rel(a.error_estimate[k], b.error_estimate[k]) for k in b.error_estimate))


def main() -> None:
    ap = arguments(__doc__, repeats=3, aliases=("--repeat",))
    ap.add_argument("--B", type=int, default=1024)
    args = ap.parse_args()
    import numba

    warnings.simplefilter("ignore", category=getattr(numba, "NumbaExperimentalFeatureWarning",
                                                     Warning))
    print(header("numba", "sympy", extra=(f"numba threads: {numba.get_num_threads()}",)))
    x = inputs(args.B)
    kw = dict(control=invimbed.Constant(W), method="rk4", step=STEP)
    sides = {"numpy": (invimbed.BolzaProblem(fv, Rv, Tv, vectorized=True,
                                             derivatives=NUMPY_DERIVATIVES), "numpy"),
             "numba": (invimbed.BolzaProblem(f1, R1, T1, derivatives=NUMBA_DERIVATIVES),
                       "numba")}
    res = {}
    for name, (problem, backend) in sides.items():
        t0 = time.perf_counter()
        invimbed.solve_imbedding(problem, x[:2], DEPTHS, backend=backend, **kw)
        print(f"{name}: first call (B = 2; compile, trace, generate code): "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        res[name] = invimbed.solve_imbedding(problem, x, DEPTHS, backend=backend, **kw)
        print(f"{name}: derivatives: {res[name].derivatives}")

    cpu: dict[str, float] = {}

    def run(name, generated=True):
        problem, backend = sides[name]
        label = name if generated else "generic"

        def solve():
            _numba.JET_CODE = generated
            c0 = time.process_time()
            try:
                return invimbed.solve_imbedding(problem, x, DEPTHS, backend=backend, **kw)
            finally:
                _numba.JET_CODE = True
                used = time.process_time() - c0
                cpu[label] = min(cpu.get(label, used), used)
        return solve

    t0 = time.perf_counter()
    res["generic"] = run("numba", generated=False)()
    print(f"numba, generic kernel: first call {time.perf_counter() - t0:.1f} s", flush=True)
    t_np, t_nb, t_gen = alternating([run("numpy"), run("numba"), run("numba", False)],
                                    [1, 1, 1], args.repeats)
    fields, estimate = max_rel(res["numba"], res["numpy"])
    gen_fields, gen_estimate = max_rel(res["numba"], res["generic"])
    ratio = t_np / t_nb
    print(f"\nB = {args.B}, 64 depths, rk4, jet 1 with its estimate; best of {args.repeats}, "
          f"alternating")
    print(f"numpy (vectorised): {t_np:.3f} s")
    print(f"numba (per-sample @njit): {t_nb:.3f} s, {1e6 * t_nb / (args.B * STAGES):.2f} us "
          f"per input and right-hand side (both jets)")
    print(f"numba, generic kernel (index tables): {t_gen:.3f} s, "
          f"{1e6 * t_gen / (args.B * STAGES):.2f} us per input and right-hand side, "
          f"{t_np / t_gen:.2f}x numpy")
    print(f"numba / numpy speed-up: {ratio:.2f}x (target >= {TARGET:g}x): "
          f"{'met' if ratio >= TARGET else 'NOT met'}")
    print(f"CPU time of the process, best of {args.repeats}: numpy {cpu['numpy']:.2f} s, numba "
          f"{cpu['numba']:.2f} s ({cpu['numpy'] / cpu['numba']:.2f}x), generic kernel "
          f"{cpu['generic']:.2f} s ({cpu['numpy'] / cpu['generic']:.2f}x); all numba threads "
          f"counted, so under load the wall ratio and this one differ")
    print(f"generated vs generic kernel: largest relative difference fields {gen_fields:.1e}, "
          f"error estimate {gen_estimate:.1e}")
    print(f"largest relative difference: fields {fields:.1e}, error estimate {estimate:.1e} "
          f"(target 1e-10): {'met' if max(fields, estimate) <= 1e-10 else 'NOT met'}")


if __name__ == "__main__":
    main()
