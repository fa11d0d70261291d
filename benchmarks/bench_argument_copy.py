"""What it costs to pass the user's functions copies of their arguments.

The solvers call the user's ``dynamics``, losses and derivatives on copies of ``z`` and
``theta`` (`invimbed._core.inputs.probe`), so that a function writing into its arguments cannot
change the solution. This script measures that copy against the two alternatives, on
the driven pendulum (``N = 2``, ``M = 1``: ``f = [z1, -sin z0 + theta0]``) at
``B = 1024`` rows:

* ``bare``: the function called on the solver's own arrays (the code before the copy);
* ``copy``: called on copies (what the solvers do);
* ``copy + compare``: called on copies, which are then compared with the originals
  (what refusing every write at every call would cost).

On numba the kernels call a per-sample function bare where it also compiles with
read-only ``z`` and ``theta`` (numba then proves it writes into neither), else through a
compiled wrapper that copies them: the row prints the wrapper's cost per call and the
time of the read-only compilation (the proof's one-off cost) next to the function's own.

Rows: a vectorised function (one call per batch), a per-sample function (one Python
call per row: the copy is made once per batch), and a per-sample ``numba.njit``
function called from a compiled loop over the rows (the ``backend="numba"`` kernels'
way), bare and through the copying wrapper of `invimbed._backends._numba`, if numba is
installed. Each cell: the best of ``--repeats`` timings of ``--calls`` calls, the three
sides timed in alternation in one process; the ratios to ``bare`` are printed. On a
loaded machine the differences of whole calls are within the noise; the ``alone`` row
times the copies and the comparison by themselves. Last, the
share of a whole solve: ``solve_adjoint`` (ensemble, finite differences, vectorised) at
``B = 1024`` and one depth, with the number of batched calls it makes and the copy's
measured cost per call.

Run:  python benchmarks/bench_argument_copy.py [--repeats 7] [--calls 200]
"""

from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np

import invimbed
from _machine import arguments, best_of, header, interleaved, repeats_of

B = 1024


def f_vec(t, z, th):
    return np.stack([z[:, 1], -np.sin(z[:, 0]) + th[:, 0]], axis=1)


def f_one(t, z, th):
    return np.array([z[1], -np.sin(z[0]) + th[0]])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """``a == b`` everywhere, NaN equal to NaN (the fast test first)."""
    return bool(np.array_equal(a, b) or np.array_equal(a, b, equal_nan=True))


def _per_sample(copy: bool, compare: bool) -> Callable:
    def g(t, z, th):
        zc, tc = (z.copy(), th.copy()) if copy else (z, th)
        out = np.stack([f_one(t, zc[b], tc[b]) for b in range(zc.shape[0])])
        if compare and not (_same(zc, z) and _same(tc, th)):
            raise ValueError("written")
        return out
    return g


def _vectorised(copy: bool, compare: bool) -> Callable:
    def g(t, z, th):
        zc, tc = (z.copy(), th.copy()) if copy else (z, th)
        out = f_vec(t, zc, tc)
        if compare and not (_same(zc, z) and _same(tc, th)):
            raise ValueError("written")
        return out
    return g


def _best(sides: dict[str, Callable], args: tuple, calls: int, repeats: int) -> dict:
    """Per call, the best of ``repeats`` runs of ``calls`` calls of each side, in
    alternation (load falls on every side)."""
    timed = interleaved([lambda g=g: g(*args) for g in sides.values()], repeats,
                        warmup=False, number=calls)
    return {k: t.best for k, t in zip(sides, timed)}


def _row(name: str, best: dict) -> None:
    bare = best["bare"]
    cells = "  ".join(f"{k} {v * 1e6:9.2f} us ({v / bare:5.3f}x)" for k, v in best.items())
    print(f"{name:<28} {cells}")


def _numba_row(calls: int, repeats: int) -> None:
    try:
        import numba
    except ImportError:
        print("numba per-sample: numba is not installed")
        return
    from invimbed._backends._numba_functions import _copying, _types

    key = ("f", 0, 0)
    sig = _types()["sigs"][key]
    user = numba.njit(f_one)
    start = time.perf_counter()
    user.compile(sig.args)
    own = time.perf_counter() - start
    from numba import types
    readonly = tuple(types.Array(a.dtype, a.ndim, a.layout, readonly=True)
                     if isinstance(a, types.Array) else a for a in sig.args)
    start = time.perf_counter()
    user.compile(readonly)                           # the proof that it cannot write
    proof = time.perf_counter() - start
    wrapped = _copying(user, key)                    # what a function that writes gets
    wrapped.compile(sig.args)

    @numba.njit
    def rows(fn, Z, TH, out):
        for b in range(Z.shape[0]):
            r = fn(0.0, Z[b], TH[b])
            out[b, 0] = r[0]
            out[b, 1] = r[1]

    rng = np.random.default_rng(0)
    Z, TH, out = rng.normal(size=(B, 2)), rng.normal(size=(B, 1)), np.empty((B, 2))
    sides = {"bare": lambda: rows(user, Z, TH, out), "copy": lambda: rows(wrapped, Z, TH, out)}
    for g in sides.values():
        g()                                          # compile
    best = _best({k: (lambda g=g: g()) for k, g in sides.items()}, (), calls, repeats)
    _row(f"numba per-sample, B={B}", best)
    print(f"{'':<28} per call of the function: copy adds "
          f"{(best['copy'] - best['bare']) / B * 1e9:.0f} ns (a function that cannot write "
          f"is called bare: its read-only compilation took {proof:.2f} s, its own "
          f"{own:.2f} s)")


def _solve_share(repeats: int, whole: dict) -> None:
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.uniform(-1, 1, B), rng.uniform(-0.5, 0.5, B)])
    count = [0]

    def counted(t, z, th):
        count[0] += 1
        return f_vec(t, z, th)

    problem = invimbed.BolzaProblem(counted, lambda t, z, th: 0.5 * th[:, 0] ** 2,
                                    lambda z: 0.5 * z[:, 0] ** 2, q=1.0, vectorized=True,
                                    autonomous=True, derivatives="finite-differences")
    ctrl = invimbed.Constant([0.2])
    invimbed.solve_adjoint(problem, x, [0.0], control=ctrl)
    def once() -> None:
        count[0] = 0        # the calls of `dynamics` in the last solve
        invimbed.solve_adjoint(problem, x, [0.0], control=ctrl)
    best = best_of(once, repeats)[0]
    z, th = x.copy(), np.full((B, 1), 0.2)
    copy = _best({"bare": lambda: None, "copy": lambda: (z.copy(), th.copy())}, (), 2000,
                 repeats)["copy"]
    extra = max(0.0, whole["copy"] - whole["bare"])
    print(f"solve_adjoint (ensemble, finite differences, vectorised, B={B}, one depth): "
          f"{best * 1e3:.1f} ms, {count[0]} calls of `dynamics`; the copies "
          f"{count[0] * copy * 1e3:.2f} ms ({count[0] * copy / best:.2%} of the solve) timed "
          f"alone, {count[0] * extra * 1e3:.2f} ms ({count[0] * extra / best:.2%}) from the "
          f"whole calls' difference (an upper bound: it holds the noise)")


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, quick="a tenth of the calls, three repeats", repeats_help=
                   "timed repeats, best taken (default 7, 3 with --quick)")
    ap.add_argument("--calls", type=int, default=None,
                    help="calls per timed run (default 200, 20 with --quick)")
    args = ap.parse_args(argv)
    args.repeats = repeats_of(args, full=7, quick=3)
    args.calls = args.calls or (20 if args.quick else 200)
    print(header("numba", argv=argv))
    rng = np.random.default_rng(0)
    z, th = rng.normal(size=(B, 2)), rng.normal(size=(B, 1))
    whole: dict = {}
    for name, make, calls in (("vectorised, B=1024", _vectorised, args.calls),
                              ("per-sample, B=1024", _per_sample, max(1, args.calls // 50))):
        sides = {"bare": make(False, False), "copy": make(True, False),
                 "copy + compare": make(True, True)}
        best = _best(sides, (0.0, z, th), calls, args.repeats)
        whole = whole if make is _per_sample else best
        _row(name, best)
    zc, tc = z.copy(), th.copy()
    alone = _best({"copies": lambda: (z.copy(), th.copy()),
                   "compare": lambda: _same(zc, z) and _same(tc, th)}, (), 20 * args.calls,
                  args.repeats)
    print(f"{'alone, B=1024':<28} the two copies {alone['copies'] * 1e6:.2f} us, the "
          f"comparison {alone['compare'] * 1e6:.2f} us per batched call (the least "
          f"noisy measure of each side's extra cost)")
    _numba_row(args.calls, args.repeats)
    _solve_share(args.repeats, whole)


if __name__ == "__main__":
    sys.exit(main())
