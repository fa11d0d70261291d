"""The compiled adaptive sweep against the numpy sweep: jet orders 1 to 3 at one input.

Problem: the coupled pendulums of ``_pendulums.py`` (``from_sympy``, ``N = 4`` states,
``M = 2`` torques) under two controls: ``piecewise``, the piecewise-constant control on
four pieces of ``[-1, 0]`` (``n_w = 8``, three restarts of the solver), and
``constant``, its first piece's torque throughout (``n_w = 2``); one input (``B = 1``), 64 depths from 0 to -1,
``solve_imbedding(problem, x, depths, control=..., order=K)`` with its defaults (RK45,
``rtol=1e-6``, ``atol=1e-9``, the error estimate), ``backend="numpy"`` and
``backend="numba"``.

Columns, per jet order ``K``: the best of ``--repeats`` solves on numpy and of twice as
many on numba (warm: the numba kernel loaded, the numpy provider's generated code
built), timed in alternation (each round one numpy solve, then two numba solves: the
speed of the shared machine drifts during a run, and both backends should see the same
machine), their ratio, the largest difference of the fields (relative to
``max(1, |field|)``) and the steps taken (``nfev``, the same on both).

Compilation, reported separately: ``first call`` is this process's first numba solve
(it loads the kernel from numba's on-disk cache, or compiles it if the cache is empty);
``--cold`` also runs one solve in a fresh process with an empty cache
(``NUMBA_CACHE_DIR`` set to a new folder): the one-time compilation on a new machine.

Run:  python benchmarks/bench_sweep_numba.py [--repeats 5] [--cold]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _machine import alternating, arguments, header
import _pendulums as pend

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


CONTROLS = {"piecewise": pend.CONTROL}


def solve(problem, K: int, backend: str, control: str = "piecewise"):
    import invimbed

    return invimbed.solve_imbedding(problem, pend.X0, pend.depths(64),
                                    control=CONTROLS[control], order=K, backend=backend)


def cold() -> float:
    """One numba solve in a fresh process with an empty numba cache (seconds)."""
    code = ("import sys, time; sys.path.insert(0, %r); import _pendulums as pend; "
            "import invimbed; p = pend.make_problem(); t = time.perf_counter(); "
            "invimbed.solve_imbedding(p, pend.X0, pend.depths(64), control=pend.CONTROL, "
            "backend='numba'); print(time.perf_counter() - t)"
            % os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = arguments(__doc__, repeats=5, aliases=("--repeat",))
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    print(header("numba", "sympy"))
    import invimbed

    CONTROLS["constant"] = invimbed.Constant(pend.VALUES[0])
    problem = pend.make_problem()
    t0 = time.perf_counter()
    solve(problem, 1, "numba")
    first = time.perf_counter() - t0
    print(f"numba first call in this process (cache load, or compile): {first:.2f} s")
    if args.cold:
        print(f"numba cold compile (fresh process, empty cache, one solve): {cold():.1f} s")
    print(f"\n{'control':>9} {'K':>2} {'numpy [ms]':>11} {'numba [ms]':>11} "
          f"{'numba/numpy':>12} {'max |diff|':>11} {'nfev':>6}")
    for ctrl in CONTROLS:
        for K in (1, 2, 3):
            ref, res = solve(problem, K, "numpy", ctrl), solve(problem, K, "numba", ctrl)
            diff = max(float(np.max(np.abs(res[k] - ref[k]) / np.maximum(1, np.abs(ref[k]))))
                       for k in FIELDS)
            t_np, t_nb = alternating([lambda: solve(problem, K, "numpy", ctrl),
                                      lambda: solve(problem, K, "numba", ctrl)], [1, 2],
                                     args.repeats)
            print(f"{ctrl:>9} {K:>2} {1e3 * t_np:>11.2f} {1e3 * t_nb:>11.3f} "
                  f"{t_np / t_nb:>11.1f}x {diff:>11.1e} {res.nfev:>6}", flush=True)


if __name__ == "__main__":
    main()
