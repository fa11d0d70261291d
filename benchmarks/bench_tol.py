"""How long `solve_imbedding(..., tol=1e-5)` takes from a fresh process, and whether its
answer is within `tol` (docs/accuracy.md, "How the sweep picks the jet order").

The case: a 4-state forced double pendulum written with `invimbed.from_sympy` (two links,
unit masses and lengths, a torque `2 sin(3t)` on the first link plus the constant control
`u = 0.3`), input `x = (1, -0.5, 0.5, 0)`, 9 depths `s = q - p` from 0.1 to 1. Each run
is a fresh `python` process (import, sympy's code generation and the solve, all timed
from the parent), run twice: first with empty on-disk caches (numba's
``NUMBA_CACHE_DIR`` and the generated code's ``INVIMBED_CACHE`` pointing at new empty
folders: the first run on a machine, every compilation included), then again with the
caches that first run left (a later run). Each line gives the wall time, its ratio to
the 10 s target, the process's CPU time (user + system; on the 2-core machine, the wall
time an idle machine would give, as the solve runs on one core) and the load average at
its start:

* `fallback="adjoint"`: the target is at most 10 s, `success` True, every depth within
  `tol` of the reference;
* no fallback: the target is the same 10 s, with `converged` honest (every depth marked
  converged within `tol`).

The reference is `solve_adjoint(..., rtol=1e-11, atol=1e-13, strategy="per_depth")`,
computed in its own process (not timed). "err/tol" is the largest over the fields `z`,
`value`, `adjoint`, `param_grad` and their components of
`|field - reference| / (atol + rtol |reference|)`: within `tol` means at most 1.

Run from the repository root (timings vary with the load of the machine; compare them
only within one run):

    python benchmarks/bench_tol.py
    python benchmarks/bench_tol.py --default-rule   # the default rule's guard: its cost
    python benchmarks/bench_tol.py --robertson      # BDF against RK45 at tol=1e-4
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))

TOL = 1e-5
TARGET_S = 10.0
X = [1.0, -0.5, 0.5, 0.0]
U = 0.3
DEPTHS = -np.linspace(0.1, 1.0, 9)
FIELDS = ("z", "value", "adjoint", "param_grad")
#: RK45's step budget on Robertson's kinetics where its default ``max_steps`` refuses
#: (``--robertson``): enough for every sweep it runs there
RK45_STEPS = 10 ** 6


def problem():
    import invimbed
    from _pendulums import forced_double_pendulum

    return invimbed.from_sympy(*forced_double_pendulum())


def child(kind: str, out: str) -> None:
    """One solve in this (fresh) process; its fields go to ``out`` (npz)."""
    import invimbed

    pb, ctrl = problem(), invimbed.Constant([U])
    if kind == "reference":
        res = invimbed.solve_adjoint(pb, X, DEPTHS, control=ctrl, rtol=1e-11, atol=1e-13,
                                     strategy="per_depth")
    else:
        fb = {"fallback": "adjoint"} if kind == "fallback" else {}
        res = invimbed.solve_imbedding(pb, X, DEPTHS, control=ctrl, tol=TOL, **fb)
    extra = {}
    if kind != "reference":
        extra = dict(converged=res.converged, exact=(res.exact_fallback if
                                                      res.exact_fallback is not None else
                                                      np.zeros(DEPTHS.size, bool)),
                     depth_order=res.depth_order, orders_run=np.array(res.orders_run))
    np.savez(out, success=res.success, status=res.status, message=res.message,
             **{k: res[k] for k in FIELDS}, **extra)


def run(kind: str, folder: str, caches: str | None = None) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one fresh child process, and its fields; ``caches``: a
    folder for numba's and the generated code's on-disk caches (None: the machine's)."""
    import resource

    out = os.path.join(folder, f"{kind}.npz")
    env = dict(os.environ)
    if caches is not None:
        env["NUMBA_CACHE_DIR"] = os.path.join(caches, "numba")
        env["INVIMBED_CACHE"] = os.path.join(caches, "codegen")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, out],
                   check=True, env=env)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with np.load(out) as data:
        return seconds, cpu, {k: data[k] for k in data.files}


def err_over_tol(res: dict, ref: dict) -> np.ndarray:
    """Per depth, the largest ``|res - ref| / (tol + tol |ref|)`` over fields and
    components."""
    worst = np.zeros(DEPTHS.size)
    for k in FIELDS:
        e = np.abs(res[k] - ref[k]) / (TOL + TOL * np.abs(ref[k]))
        worst = np.maximum(worst, e.reshape(DEPTHS.size, -1).max(axis=1))
    return worst


def main() -> None:
    from _machine import header

    print(header("sympy"))
    print(f"\ncase: forced double pendulum (from_sympy, N = 4), 9 depths s = "
          f"{-DEPTHS[0]:g} .. {-DEPTHS[-1]:g}, tol = {TOL:g}; each run a fresh process\n")
    with tempfile.TemporaryDirectory() as folder:
        t_ref, c_ref, ref = run("reference", folder)
        print(f"reference solve_adjoint(rtol=1e-11, per_depth): {t_ref:.1f} s, CPU "
              f"{c_ref:.1f} s (not a target)")
        for kind in ("fallback", "plain"):
            label = 'fallback="adjoint"' if kind == "fallback" else "no fallback"
            caches = tempfile.mkdtemp(dir=folder)
            for when in ("empty caches", "caches of the run before"):
                load = os.getloadavg()[0]
                seconds, cpu, res = run(kind, folder, caches)
                print(f"\n{label}, {when}: {seconds:.1f} s wall = {seconds / TARGET_S:.2f} x "
                      f"the {TARGET_S:g} s target ({'met' if seconds <= TARGET_S else 'NOT met'})"
                      f", CPU {cpu:.1f} s = {cpu / TARGET_S:.2f} x the target; load average "
                      f"{load:.1f} at the start")
                report(res, ref)


def report(res: dict, ref: dict) -> None:
    """The verdict of one run against the reference."""
    e = err_over_tol(res, ref)
    conv, exact = res["converged"].astype(bool), res["exact"].astype(bool)
    certified = conv | exact
    honest = bool(np.all(e[certified] <= 1.0))
    print(f"  success {bool(res['success'])}, status {int(res['status'])}, orders run "
          f"{res['orders_run'].tolist()}")
    print(f"  converged      {conv.astype(int).tolist()}")
    print(f"  exact_fallback {exact.astype(int).tolist()}")
    print(f"  depth_order    {res['depth_order'].tolist()}")
    print("  err/tol        " + " ".join(f"{v:.2g}" for v in e))
    print(f"  max err/tol {e.max():.3g} over all depths; "
          f"{e[certified].max() if certified.any() else 0.0:.3g} over the depths "
          f"marked converged or exact: {'honest' if honest else 'NOT honest'}")
    if not bool(res["success"]):
        print(f"  message: {res['message']}")


def best_each(calls: dict, repeats: int) -> dict:
    """The best wall time of each of ``calls`` (name: a function of no argument), timed in
    alternation, ``repeats`` rounds after a warm-up round (code generation, caches), and
    the last result of each (`_machine.interleaved`)."""
    from _machine import interleaved

    timed = interleaved(list(calls.values()), repeats)
    return {k: (t.best, t.result) for k, t in zip(calls, timed)}


def default_rule(repeats: int = 3) -> None:
    """What the default rule's guard costs: `solve_imbedding` without `tol` (the ratio
    test, carrying the jets of orders K - 1 and K + 2) against `ratio_test=False` (the
    estimate alone, the rule before), on the forced double pendulum (the 9 depths above,
    orders 1 and 2) and on the pendulum of `tests/problems.py` (8 inputs, 200 depths),
    and how many depths each marks converged that are outside the rule (against
    `solve_adjoint` at rtol 1e-11; every field, the depth gradient included)."""
    import invimbed
    from problems import sympy_pendulum

    dp, ctrl = problem(), invimbed.Constant([U])
    pend, pctrl = sympy_pendulum(), invimbed.Constant([0.2, 0.3])
    xs = np.random.default_rng(1).uniform(-1.5, 1.5, size=(8, 2))
    cases = [("double pendulum, 9 depths", dp, X, DEPTHS, ctrl, 1),
             ("double pendulum, 9 depths", dp, X, DEPTHS, ctrl, 2),
             ("pendulum, 8 inputs x 200 depths", pend, xs, np.linspace(0, -1.5, 200), pctrl, 1),
             ("pendulum, 8 inputs x 200 depths", pend, xs, np.linspace(0, -1.5, 200), pctrl, 2)]
    print(f"\ndefault rule (no tol): the ratio test against the estimate alone; best of "
          f"{repeats} in alternation, load average {os.getloadavg()[0]:.1f}")
    for name, pb, x, depths, c, order in cases:
        ref = invimbed.solve_adjoint(pb, x, depths, control=c, rtol=1e-11, atol=1e-13)
        got = best_each({rt: (lambda rt=rt: invimbed.solve_imbedding(
            pb, x, depths, control=c, order=order, ratio_test=rt)) for rt in (True, False)},
            repeats)
        line = []
        for rt in (True, False):
            t, res = got[rt]
            bad = res.converged & (rule_error(res, ref) > 1)
            line.append(f"{'ratio test' if rt else 'estimate alone'} {t * 1e3:.0f} ms, "
                        f"converged {int(res.converged.sum())}, outside the rule {int(bad.sum())}")
        print(f"  {name}, order {order}: " + "; ".join(line)
              + f"; cost {got[True][0] / got[False][0]:.2f}x")


def rule_error(res: Any, ref: Any) -> np.ndarray:
    """Per (depth[, input]): the largest error over every field and component in units
    of the default rule's 10% of max(1, |field|)."""
    worst = np.zeros(np.shape(res.value))
    for k in FIELDS + ("depth_grad",):
        a, b = np.asarray(res[k], float), np.asarray(ref[k], float)
        w = np.abs(a - b) / (0.1 * np.maximum(1.0, np.abs(b)))
        worst = np.maximum(worst, w.reshape(worst.shape + (-1,)).max(-1))
    return worst


def robertson() -> Any:
    """Robertson's chemical kinetics (stiff) with `from_sympy`, T = |y|^2 / 2, no control."""
    import invimbed
    import sympy as sp

    t, a, b, c = sp.Symbol("t"), *sp.symbols("a b c")
    f = [-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b ** 2, 3e7 * b ** 2]
    return invimbed.from_sympy(t, [a, b, c], [], f, None, (a ** 2 + b ** 2 + c ** 2) / 2)


def robertson_bdf(repeats: int = 1) -> None:
    """`tol=1e-4` on Robertson's kinetics from x = (0.98, 3e-5, 0.02): BDF against RK45,
    timed in alternation (best of ``repeats`` after a warm-up); target: BDF within 2x of
    RK45's time to an answer. Where RK45 refuses (status -1: the problem looks stiff and
    needs more steps than ``max_steps``, in well under a second), it is timed once more
    with ``max_steps=RK45_STEPS``, which answers (minutes), and the two answers are
    compared where both are converged. Each line gives the status, the orders run and the
    depths converged."""
    import invimbed

    pb, x = robertson(), [0.98, 3e-5, 0.02]
    print(f"\nRobertson's kinetics, tol = 1e-4, load average {os.getloadavg()[0]:.1f}")
    # depths 2, 3, 5: RK45 stops at order 1 ("stiff"); BDF raises depth 2 to order 4,
    # where it converges, depth 5 stops where the prediction passes max_order, and depth
    # 3 skips order 5 (whose ratio test order 4's look-ahead saw refuse it: d_5 / d_4 =
    # 1.01); its order-6 sweep, whose steps collapse, is stopped by the raised orders'
    # step budget (docs/accuracy.md, "When a higher order fails")
    for depths in (-np.array([0.01, 0.02, 0.04]), -np.array([0.01, 0.1]),
                   -np.array([2.0, 3.0, 5.0])):
        got = best_each({m: (lambda m=m: invimbed.solve_imbedding(pb, x, depths, tol=1e-4,
                                                                 method=m))
                       for m in ("BDF", "RK45")}, repeats)
        for m, (t, res) in got.items():
            print(f"  s = {(-depths).tolist()}, {m:4s}: {t:7.2f} s, status {int(res.status)}, "
                  f"orders run {res.orders_run}, converged {res.converged.astype(int).tolist()}"
                  f", codes {sorted({w.code for w in res.warnings})}")
        rk = got["RK45"]
        if rk[1].status == -1:
            # RK45 refused ("looks stiff": more steps than max_steps): no answer to compare
            # with. The target compares answers, so RK45 is timed once more with the
            # steps it needs (tens of thousands per sweep: minutes), and the two answers
            # are compared where both are converged
            t = time.perf_counter()
            res = invimbed.solve_imbedding(pb, x, depths, tol=1e-4, method="RK45",
                                           max_steps=RK45_STEPS)
            rk = (time.perf_counter() - t, res)
            print(f"  s = {(-depths).tolist()}, RK45 with max_steps = {RK45_STEPS:.0e} (once): "
                  f"{rk[0]:7.2f} s, status {int(res.status)}, orders run {res.orders_run}, "
                  f"converged {res.converged.astype(int).tolist()}, codes "
                  f"{sorted({w.code for w in res.warnings})}")
            both = got["BDF"][1].converged & res.converged
            if both.any():
                print(f"  where both converged, BDF against RK45: largest |difference| / "
                      f"(1e-4 (1 + |RK45|)) = {agreement(got['BDF'][1], res, both):.2g} "
                      f"(each within tol of the truth: at most 2)")
        r = got["BDF"][0] / rk[0]
        print(f"  BDF / RK45 answering = {r:.2f}x (target <= 2x): "
              f"{'met' if r <= 2 else 'NOT met'}")


def agreement(a: Any, b: Any, where: np.ndarray) -> float:
    """The largest ``|a - b| / (1e-4 (1 + |b|))`` over the fields `FIELDS` at the depths
    ``where`` (a boolean mask of the depths)."""
    worst = 0.0
    for k in FIELDS:
        fa, fb = np.asarray(a[k], float)[where], np.asarray(b[k], float)[where]
        worst = max(worst, float(np.max(np.abs(fa - fb) / (1e-4 * (1 + np.abs(fb))),
                                        initial=0.0)))
    return worst


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":     # the timed fresh process
        child(sys.argv[2], sys.argv[3])
    else:
        from _machine import arguments

        ap = arguments(__doc__, repeats_help="--default-rule, --robertson: timed rounds, the "
                                             "best kept (default 3 and 1)")
        which = ap.add_mutually_exclusive_group()
        which.add_argument("--default-rule", action="store_true",
                           help="the default rule's guard: its cost")
        which.add_argument("--robertson", action="store_true",
                           help="BDF against RK45 at tol=1e-4 on Robertson's kinetics")
        args = ap.parse_args()
        if args.default_rule:
            default_rule(args.repeats or 3)
        elif args.robertson:
            robertson_bdf(args.repeats or 1)
        else:
            main()
