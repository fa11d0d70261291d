"""Peak memory: an accelerated sweep's result assembly, and the exact ensemble under a
hard address-space limit.

``python benchmarks/bench_memory.py [B]`` (default B = 16384): the numba jet-1 sweep of
``bench_backends.py``'s coupled pendulums (exact derivatives, ``rk4``, 64 depths given
deepest last) at a large batch: the numpy allocations made while the result is
assembled (`tracemalloc`, after compilation), divided by the bytes of the five result
fields.

``python benchmarks/bench_memory.py ensemble [--rows R] [--backend numpy|numba]
[--limit 1GiB] [--check all|sample]``: ``solve_adjoint`` (ensemble, default
``memory_budget``) on ``R`` rows (default 10^6: 1000 depths in [-1, 0] x 1000 inputs)
of a cubic oscillator (N = 2, `from_sympy`, no control, rtol 1e-6), run in a child
process under ``ulimit -v`` (``RLIMIT_AS``) of ``--limit``. The child reports its time,
its default budget, its peak virtual size (``VmPeak``) and peak resident size; the
parent then solves the same rows as separate calls of 100 depths each (all of them, or
the deepest, a middle and the shallowest with ``--check sample``) and checks that the
child's fields are bit for bit theirs. First it prints the virtual size of bare imports
under no limit (``ulimit -v`` counts reserved address space, not memory used).

``python benchmarks/bench_memory.py peaks``: the numpy ensemble's `tracemalloc` peak
against ``memory_budget`` (1 MB and 4 MB; 1200 rows of an N = 2 pendulum with a
four-piece control, and of ``_pendulums.py``, N = 4, at rtol 1e-9), and the peak of one
chunk of every row against the cost model of `invimbed._core.reference.adjoint._row_cost`.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad", "nsteps")
INPUTS = 1000
SLICE = 100          # depths per separate call of the check


def sweep(B: int = 16384) -> None:
    import _coupled_njit as bb
    import invimbed

    problem, _ = bb.problems(True)
    X = 0.3 * np.random.default_rng(0).standard_normal((B, 4))
    kw = dict(method="rk4", step=bb.STEP, estimate_error=False, backend="numba",
              control=invimbed.Constant(bb.W))
    invimbed.solve_imbedding(problem, X[:2], bb.DEPTHS, **kw)        # compile first
    tracemalloc.start()
    res = invimbed.solve_imbedding(problem, X, bb.DEPTHS, **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = sum(np.asarray(res[k]).nbytes
              for k in ("z", "value", "adjoint", "param_grad", "depth_grad"))
    print(f"B = {B}, {bb.DEPTHS.size} depths: outputs {out / 2**20:.1f} MiB, peak "
          f"{peak / 2**20:.1f} MiB of numpy allocations, ratio {peak / out:.2f} "
          f"(success={res.success})")


# -- the ensemble under ulimit -v ---------------------------------------------------------
def oscillator():
    import sympy as sp

    import invimbed

    t = sp.Symbol("t")
    z1, z2 = sp.symbols("z1 z2")
    return invimbed.from_sympy(t, [z1, z2], [], [z2, -z1 - 0.1 * z2 + 0.1 * z1 ** 3],
                               (z1 ** 2 + z2 ** 2) / 2, (z1 ** 2 + z2 ** 2) / 2)


def rows_of(R: int) -> tuple[np.ndarray, np.ndarray]:
    X = 0.3 * np.random.default_rng(0).standard_normal((INPUTS, 2))
    return X, np.linspace(0.0, -1.0, max(1, R // INPUTS))


def vm(key: str) -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(key + r":\s+(\d+) kB", fh.read()).group(1)) * 1024


def child(R: int, backend: str, out: str) -> None:
    """Run under the limit: one solve_adjoint of every row, default memory_budget."""
    import invimbed
    from invimbed._core.reference.row_chunks import default_memory_budget

    problem = oscillator()
    X, depths = rows_of(R)
    invimbed.solve_adjoint(problem, X[:2], depths[:2], backend=backend)   # codegen, compile
    budget = default_memory_budget(int(X.shape[0] * depths.size * 8 * 7))   # the outputs
    t0 = time.perf_counter()
    res = invimbed.solve_adjoint(problem, X, depths, backend=backend)
    secs = time.perf_counter() - t0
    np.savez(out, **{k: res[k] for k in FIELDS})
    print(json.dumps({"secs": secs, "budget": budget, "success": bool(res.success),
                      "vm_peak": vm("VmPeak"), "rss_peak": vm("VmHWM"),
                      "rows": int(X.shape[0] * depths.size)}))


def bare_imports() -> None:
    for mods in ("numpy", "numpy, scipy.integrate", "invimbed", "invimbed, sympy", "numba",
                 "torch"):
        code = (f"import {mods}, re; s = open('/proc/self/status').read(); "
                f"print(re.search(r'VmSize:\\s+(\\d+)', s).group(1))")
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        size = (f"{int(got.stdout) / 1024:.0f} MiB" if got.returncode == 0 else
                "not importable")
        print(f"  virtual size after `import {mods}`: {size}")


def ensemble(R: int, backend: str, limit: str, check: str) -> None:
    from invimbed._core.inputs.validation import as_memory_budget

    import invimbed

    cap = as_memory_budget(limit)
    print(f"ensemble: {R} rows (N = 2), backend={backend}, ulimit -v {limit} ({cap} bytes)")
    bare_imports()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fields.npz")

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
        got = subprocess.run([sys.executable, os.path.abspath(__file__), "child", str(R),
                              backend, out], capture_output=True, text=True,
                             preexec_fn=limited, env=env)
        if got.returncode != 0:
            print(f"  the limited child failed (exit {got.returncode}):\n{got.stderr[-2000:]}")
            return
        rep = json.loads(got.stdout.strip().splitlines()[-1])
        print(f"  under the limit: {rep['rows']} rows in {rep['secs']:.1f} s, "
              f"success={rep['success']}, default memory_budget "
              f"{rep['budget'] / 2**20:.0f} MiB, peak virtual size "
              f"{rep['vm_peak'] / 2**20:.0f} MiB, peak resident {rep['rss_peak'] / 2**20:.0f} MiB")
        big = dict(np.load(out))
    problem = oscillator()
    X, depths = rows_of(R)
    starts = list(range(0, depths.size, SLICE))
    if check == "sample" and len(starts) > 3:
        starts = [starts[0], starts[len(starts) // 2], starts[-1]]
    same = True
    t0 = time.perf_counter()
    for a in starts:
        part = invimbed.solve_adjoint(problem, X, depths[a:a + SLICE], backend=backend,
                                      memory_budget="8GiB")
        same &= all(np.array_equal(part[k], big[k][a:a + SLICE]) for k in FIELDS)
    print(f"  {len(starts)} separate calls of {SLICE} depths x {INPUTS} inputs "
          f"({time.perf_counter() - t0:.1f} s): fields bit for bit equal: {same}")


def peaks() -> None:
    sys.path.insert(0, HERE)
    import sympy as sp

    import _pendulums as P
    import invimbed
    from invimbed._core.reference.adjoint import _row_cost
    from invimbed._core.setup.arguments import prepare
    from invimbed._core.integrators import SCIPY_METHODS

    t = sp.Symbol("t")
    z1, z2, u = sp.symbols("z1 z2 u")
    pend = invimbed.from_sympy(t, [z1, z2], [u], [z2, -sp.sin(z1) - 0.1 * z2 + u],
                               (z1 ** 2 + z2 ** 2 + u ** 2) / 2, (z1 ** 2 + z2 ** 2) / 2)
    pwc = invimbed.PiecewiseConstant(np.linspace(-1, 0, 5), [[0.2], [0.5], [-0.1], [0.3]])
    cases = {"N = 2 pendulum, 4 pieces": (pend, pwc, 2),
             "N = 4 _pendulums.py": (P.make_problem(), P.CONTROL, 4)}
    for name, (pb, ctrl, N) in cases.items():
        X = 0.3 * np.random.default_rng(0).standard_normal((40, N))
        d = np.linspace(0, -1, 30)
        kw = dict(control=ctrl, rtol=1e-9, atol=1e-11)
        invimbed.solve_adjoint(pb, X[:2], d[:3], **kw)
        for budget in (None, 1_000_000, 4_000_000):
            tracemalloc.start()
            res = invimbed.solve_adjoint(pb, X, d, memory_budget=budget or "8GiB", **kw)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            if budget is None:
                c = _row_cost(prepare(pb, X, d, ctrl, "RK45", 1e-9, 1e-11, None,
                                      SCIPY_METHODS), "RK45")
                R = X.shape[0] * d.size
                model = R * (c.held + c.work + res.nsteps.mean() * c.step)
                print(f"{name}: {R} rows, {res.nsteps.mean():.1f} steps a row; one chunk: "
                      f"peak {peak / R:.0f} bytes a row, model {model / R:.0f} "
                      f"(peak / model {peak / model:.2f})")
            else:
                print(f"  memory_budget {budget}: peak {peak} bytes ({peak / budget:.2f} of "
                      f"the budget), success={res.success}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        from _machine import arguments

        arguments(__doc__, timed=False,
                  prog="bench_memory.py [B | peaks | ensemble [options]]").print_help()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "peaks":
        peaks()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "ensemble":
        from _machine import arguments, header   # not in the measured children

        ap = arguments(None, timed=False, prog="bench_memory.py ensemble")
        ap.add_argument("--rows", type=int, default=10 ** 6)
        ap.add_argument("--backend", default="numpy", choices=("numpy", "numba"))
        ap.add_argument("--limit", default="1GiB")
        ap.add_argument("--check", default="all", choices=("all", "sample"))
        a = ap.parse_args(sys.argv[2:])
        print(header("numba"))
        ensemble(a.rows, a.backend, a.limit, a.check)
        return
    sweep(int(sys.argv[1]) if len(sys.argv) > 1 else 16384)


if __name__ == "__main__":
    main()
