"""The ensemble adjoint (``solve_adjoint(strategy="ensemble")``) against the per-depth
adjoint, the imbedding sweep, CasADi and diffrax: time and accuracy of all five fields.

Problem (``_pendulums.py``): the two coupled pendulums of ``bench_core.py`` (``N = 4``,
``M = 2``) built with ``invimbed.from_sympy``, driven by a piecewise-constant torque on
the four pieces of ``linspace(-1, 0, 5)`` (``n_w = 8`` parameters), ``n`` depths
``linspace(0, -1, n)``, one input ``X0``. Every tool returns, for every depth ``p``,
``z(q)``, ``J``, ``dJ/dx``, ``dJ/dw`` and ``dJ/dp``.

What runs (all in one run; times are the best of ``R`` calls, ``time.perf_counter``, one
untimed warm-up, the calls of one ``n`` interleaved round-robin):

* ``per_depth``: ``solve_adjoint(strategy="per_depth")``, a scipy forward and backward
  solve per depth (only up to ``--per-depth-max-n`` depths: it is the slow one);
* ``ensemble numpy`` / ``ensemble numba``: ``solve_adjoint(strategy="ensemble",
  backend=...)``; rows skipped with a note when ``solve_adjoint`` has no ``strategy``
  (``backend``) keyword, or when the call raises;
* ``imbedding jet-1``: ``solve_imbedding(closure="jet", order=1, estimate_error=False)``
  (one sweep; approximate on this nonlinear problem);
* ``casadi bdf loop``: CVODES (BDF, Newton) with adjoint sensitivities, one call per
  depth; ``casadi adams map``: the same function with Adams (functional iteration),
  ``Function.map(n, "thread", 2)`` over the depths (the one row that uses 2 threads).
  The torque is exact: the state is integrated piece by piece over the four pieces,
  each in a normalised time ``s in [0, 1]`` with ``dz/ds = h f``, ``h`` the part of the
  piece after ``p`` (0 for a piece before ``p``); ``J`` is a CVODES quadrature;
  ``dJ/dx``, ``dJ/dw`` by ``casadi.gradient`` (reverse mode: CVODES's backward problem);
* ``diffrax``: ``diffeqsolve`` (Tsit5, ``PIDController(rtol, atol, jump_ts=knots)`` so
  that steps stop at the torque's jumps; the vector field picks the piece with
  ``jnp.searchsorted``), state augmented with the running-loss integral, reverse-mode
  ``jax.value_and_grad`` in ``(x, w)``, ``jax.vmap`` over the depths, ``jax.jit``,
  float64. Compile time (``lower().compile()``) is reported separately.

For CasADi and diffrax the depth gradient is ``-(dJ/dx . f(p, x, theta(p)) + R(p, x,
theta(p)))`` with ``theta(p)`` the piece from above (not a derivative through ``t0``).

Accuracy: against ``solve_adjoint(strategy="per_depth", rtol=1e-11, atol=1e-13)``, two
numbers (``_pendulums.worst_rel_error``): ``rel`` = worst entry-wise relative error over
the five fields, ``|a - b| / max(|b|, 1e-8 max|b|)`` per field; ``norm`` = the same with
the floor at the field's largest entry, i.e. ``max|a - b| / max|b|`` per field. ``rel``
is dominated by entries that are nearly zero (an adjoint component crossing zero across
the depths): every solver, ``per_depth`` included, is a few orders worse in ``rel`` than
in ``norm`` at the same tolerance. A tight-tolerance table verifies CasADi and diffrax
(and the ensemble) first, and a check of the reference against DOP853 at ``rtol=1e-12``
shows how far the reference itself can be trusted.

Targets (printed with their ratios; timings are never asserted):

(a) ``n = 128``: ensemble (numpy) at ``rtol=1e-8`` at least 10x faster than
    ``per_depth`` at ``rtol=1e-8``, and within ``1e-6`` relative of the reference;
(b) ``n = 1024``: ensemble (numpy) at ``rtol=1e-6`` within 3x the time of the
    imbedding sweep (jet, order 1, ``estimate_error=False``);
(b') ensemble (numba) within 2x of diffrax at ``n = 128`` and ``1024``, both at
    ``rtol=1e-8``; compile times of both separately;
(c) ``B`` inputs x ``n`` depths: time of the ensemble against the ``B n`` rows (up to
    ``--max-rows``), at ``rtol=1e-6, atol=1e-9``; ``--plot FILE`` saves a log-log figure;
(d) the "as a user writes it" table of ``bench_user_styles.py`` (vectorised callables
    with and without ``autonomous=True``, per-sample ``@njit`` functions, ``from_sympy``;
    numpy, numba, diffrax, CasADi) at the same ``--n``, run as that script in a child
    process; ``--skip-user-styles`` skips it.

numba: the numba backend is first tried in a child process (``_ensemble_cases.py --probe
numba``), because a
compiled kernel can abort the process (an LLVM error is not an exception); if it fails
with numba's own on-disk cache (a cache left stale by edits of the kernels did exactly
that), it is retried with a fresh ``NUMBA_CACHE_DIR`` (a temporary folder, removed at
exit), which this process then uses too. ``--cold-numba`` uses a fresh folder from the
start, so that the reported numba compile time is a cold compile (about a minute more
on a busy 2-core machine).

Threads: one, where it can be set. Before numpy/jax are imported the script sets (unless
already set) ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``NUMBA_NUM_THREADS`` to 1 and ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1``. CasADi's map row uses 2 threads (by design). The
``cpu/wall`` column (process CPU time over wall time of the best call) shows what a row
really used.

Needs: ``pip install -e .`` with sympy; optional ``numba`` (ensemble numba) and the
benchmark-only ``pip install casadi jax diffrax`` (rows skipped, with a note, without
them). Used here: casadi 3.8.2, jax 0.10.2, diffrax 0.7.2, Python 3.11.

Run:  python benchmarks/bench_ensemble.py [--quick] [--repeats R] [--n 128 1024] [--plot FILE]
      [--cold-numba] [--per-depth-max-n 128] [--max-rows 10000] [--max-call-seconds 20]
      [--skip-user-styles]
"""

from __future__ import annotations

# first: one thread per tool (BLAS, OpenMP, numba, XLA), before numpy or jax load
from _ensemble_cases import (BENCH, COMPILE_S, LOOSE, TIGHT, Case,  # isort: skip
                             adjoint_support, casadi_loop, casadi_map, diffrax_compiled,
                             ensemble_call, have, imbedding_call, per_depth_call,
                             prepare_numba, probe_ensemble, time_cases)
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import invimbed  # noqa: E402
import _pendulums as P  # noqa: E402
from _machine import arguments, header, repeats_of  # noqa: E402


def _note(msg: str) -> None:
    print(f"  note: {msg}")


def build_cases(n: int, ns_per_depth: int, tools: dict[str, bool], notes: list[str],
                ensemble_ok: dict[str, bool]) -> list[Case]:
    """The rows of the main table for ``n`` depths (each built, or skipped with a note)."""
    cases = []
    if n <= ns_per_depth:
        cases.append(Case("per_depth", BENCH, per_depth_call(n, BENCH)))
    for backend in ("numpy", "numba"):
        if ensemble_ok.get(backend):
            cases.append(Case(f"ensemble {backend}", BENCH, ensemble_call(n, BENCH, backend)))
    if ensemble_ok.get("numpy"):
        cases.append(Case("ensemble numpy", LOOSE, ensemble_call(n, LOOSE, "numpy")))
    cases.append(Case("imbedding jet-1", LOOSE, imbedding_call(n, LOOSE)))
    if tools["casadi"]:
        t0 = time.perf_counter()
        loop = casadi_loop(n, BENCH)
        cases.append(Case("casadi bdf loop", BENCH, loop, setup_s=time.perf_counter() - t0))
        t0 = time.perf_counter()
        mapped = casadi_map(n, BENCH)
        cases.append(Case("casadi adams map x2", BENCH, mapped,
                          setup_s=time.perf_counter() - t0))
    if tools["diffrax"]:
        call, compile_s = diffrax_compiled(n, BENCH)
        cases.append(Case("diffrax vmap jit", BENCH, call, setup_s=compile_s))
    return cases



def verify(n: int, tools: dict[str, bool], ensemble_ok: dict[str, bool]) -> list[str]:
    """Each tool at tight tolerance against the reference and against an independent
    second reference (per_depth with DOP853 at rtol 1e-12), untimed."""
    ref = P.reference(n)
    dop = invimbed.solve_adjoint(P.problem(), P.X0, P.depths(n), control=P.CONTROL,
                                 method="DOP853", rtol=1e-12, atol=1e-14,
                                 **({"strategy": "per_depth"}
                                    if adjoint_support()["strategy"] else {}))
    lines = [f"verification at n = {n}, tight tolerance: against the reference (per_depth "
             f"RK45, rtol 1e-11, atol 1e-13) and against per_depth DOP853 (rtol 1e-12, atol "
             f"1e-14):",
             f"  {'tool':<22} {'rtol':>7} {'atol':>7}  {'rel':>8} {'norm':>8}  "
             f"{'worst field (rel)':<17} {'rel DOP':>8} {'norm DOP':>8}"]

    def add(tool: str, tol: tuple[float, float], res: Any, vs_dop: bool = True) -> None:
        e = P.worst_rel_error(res, ref, per_field=True, floor=P.ENTRYWISE_FLOOR)
        worst = max(e, key=e.get)
        dop_cols = (f"{P.worst_rel_error(res, dop, floor=P.ENTRYWISE_FLOOR):>8.1e} "
                    f"{P.worst_rel_error(res, dop, floor=1.0):>8.1e}") if vs_dop else \
            f"{'-':>8} {'-':>8}"
        lines.append(f"  {tool:<22} {tol[0]:>7.0e} {tol[1]:>7.0e}  {max(e.values()):>8.1e} "
                     f"{P.worst_rel_error(res, ref, floor=1.0):>8.1e}  {worst:<17} {dop_cols}")

    add("per_depth DOP853", (1e-12, 1e-14), dop, vs_dop=False)
    if tools["casadi"]:
        add("casadi bdf loop", TIGHT, casadi_loop(n, TIGHT)())
        add("casadi adams map x2", TIGHT, casadi_map(n, TIGHT)())
    if tools["diffrax"]:
        add("diffrax vmap jit", TIGHT, diffrax_compiled(n, TIGHT)[0]())
    for backend in ("numpy", "numba"):
        if ensemble_ok.get(backend):
            add(f"ensemble {backend}", (1e-11, 1e-13),
                ensemble_call(n, (1e-11, 1e-13), backend)())
    lines.append("  rel: entry-wise, floor 1e-8 of the field's largest entry; norm: per field "
                 "max|a - b| / max|b|.")
    if any(ensemble_ok.values()):
        lines += ["  The RK45 ensemble applies scipy's step control per row, as the RK45 "
                  "reference does: their agreement",
                  "  is not an independent check; the DOP853 columns are."]
    return lines


def main_table(ns: list[int], repeats: int, per_depth_max: int, tools: dict[str, bool],
               ensemble_ok: dict[str, bool], notes: list[str]) -> dict[tuple, Case]:
    head = (f"{'n':>5}  {'tool':<22} {'rtol':>6}  {'time [ms]':>10} {'cpu/wall':>8} "
            f"{'setup [s]':>9} {'pd/this':>8}  {'rel':>8} {'norm':>8}")
    print(head)
    print("-" * len(head))
    out: dict[tuple, Case] = {}
    for n in ns:
        ref = P.reference(n)
        cases = build_cases(n, per_depth_max, tools, notes, ensemble_ok)
        time_cases(cases, repeats)
        pd = next((c for c in cases if c.tool == "per_depth"), None)
        for c in cases:
            if c.tool == "ensemble numba":
                c.setup_s = COMPILE_S.get("child")
            c.errors = P.worst_rel_error(c.result, ref, per_field=True, floor=P.ENTRYWISE_FLOOR)
            norm = P.worst_rel_error(c.result, ref, floor=1.0)
            c.errors["_norm"] = norm
            ratio = "-" if pd is None else f"{pd.best_s / c.best_s:.1f}"
            setup = "-" if c.setup_s is None else f"{c.setup_s:.2f}"
            print(f"{n:>5}  {c.tool:<22} {c.tol[0]:>6.0e}  {1e3 * c.best_s:>10.2f} "
                  f"{c.cpu_s / c.best_s:>8.2f} {setup:>9} {ratio:>8}  "
                  f"{_rel(c):>8.1e} {norm:>8.1e}")
            out[(n, c.tool, c.tol)] = c
        print()
    return out


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _rel(c: Case) -> float:
    return max(v for k, v in c.errors.items() if not k.startswith("_"))


def targets(rows: dict[tuple, Case], ns: list[int]) -> list[str]:
    lines = ["targets (timings are reported, never asserted):"]

    def get(n: int, tool: str, tol: tuple) -> Case | None:
        return rows.get((n, tool, tol))

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    # (a)
    n = 128
    ens, pd = get(n, "ensemble numpy", BENCH), get(n, "per_depth", BENCH)
    if ens is None or pd is None:
        why = ("128 not in --n" if n not in ns else "no ensemble" if ens is None
               else "per_depth not timed: raise --per-depth-max-n")
        lines.append(f"(a)  n = 128: not measured ({why})")
    else:
        r = pd.best_s / ens.best_s
        lines.append(f"(a)  n = 128, rtol 1e-8: per_depth / ensemble numpy = {r:.1f}x "
                     f"(target >= 10x): {verdict(r >= 10)}")
        lines.append(f"     accuracy of the ensemble at rtol 1e-8 vs the reference: rel "
                     f"{_rel(ens):.1e}, norm {ens.errors['_norm']:.1e} (target <= 1e-6): "
                     f"rel {verdict(_rel(ens) <= 1e-6)}, norm "
                     f"{verdict(ens.errors['_norm'] <= 1e-6)}")
        lines.append(f"     (per_depth at rtol 1e-8 for comparison: rel {_rel(pd):.1e}, "
                     f"norm {pd.errors['_norm']:.1e})")
    # (b)
    nb = 1024 if 1024 in ns else max(ns)
    ens, jet = get(nb, "ensemble numpy", LOOSE), get(nb, "imbedding jet-1", LOOSE)
    tag = "" if nb == 1024 else f" (n = 1024 not run; at n = {nb})"
    if ens is None or jet is None:
        lines.append("(b)  n = 1024: not measured (no ensemble)")
    else:
        r = ens.best_s / jet.best_s
        lines.append(f"(b)  n = {nb}, rtol 1e-6: ensemble numpy / imbedding jet-1 = {r:.2f}x "
                     f"(target <= 3x): {verdict(r <= 3)}{tag}; accuracy rel/norm: ensemble "
                     f"{_rel(ens):.1e}/{ens.errors['_norm']:.1e}, jet-1 "
                     f"{_rel(jet):.1e}/{jet.errors['_norm']:.1e}")
    # (b')
    for n in (128, 1024):
        nb_, dfx = get(n, "ensemble numba", BENCH), get(n, "diffrax vmap jit", BENCH)
        if nb_ is None or dfx is None:
            why = "not in --n" if n not in ns else ("no numba ensemble" if nb_ is None
                                                    else "no diffrax")
            lines.append(f"(b') n = {n}: not measured ({why})")
            continue
        r = nb_.best_s / dfx.best_s
        lines.append(f"(b') n = {n}, rtol 1e-8: ensemble numba / diffrax = {r:.2f}x (target "
                     f"<= 2x): {verdict(r <= 2)}; norm error numba {nb_.errors['_norm']:.1e}, "
                     f"diffrax {dfx.errors['_norm']:.1e}")
        lines.append(f"     compile: numba {_secs(COMPILE_S.get('child'))} in a fresh process "
                     f"with {COMPILE_S.get('cache')}, {_secs(COMPILE_S.get('here'))} in this "
                     f"one (first call - second call, once per process); diffrax "
                     f"{dfx.setup_s:.2f} s (lower + compile, for this n)")
    return lines


def batched(ens_ok: dict[str, bool], Bs: list[int], ns: list[int], max_rows: int,
            repeats: int, max_call_s: float) -> list[dict[str, Any]]:
    """(c): time of the ensemble against the number of rows B n."""
    rng = np.random.default_rng(0)
    X = P.X0 + 0.1 * rng.standard_normal((max(Bs), P.N))
    out = []
    print(f"{'backend':<8} {'B':>4} {'n':>6} {'rows':>7}  {'time [ms]':>10} {'us/row':>8}")
    for backend in ("numpy", "numba"):
        if not ens_ok.get(backend):
            continue
        largest = (0, 0.0)          # (rows, time) of the largest size measured so far
        for B in Bs:
            for n in ns:
                rows = B * n
                if rows > max_rows:
                    continue
                # time grows at most linearly in the rows (per-row overheads shrink)
                estimate = largest[1] * rows / largest[0] if largest[0] else 0.0
                if estimate > max_call_s:
                    print(f"{backend:<8} {B:>4} {n:>6} {rows:>7}  skipped (estimated "
                          f"{estimate:.0f} s > --max-call-seconds)")
                    continue
                case = Case(backend, LOOSE, ensemble_call(n, LOOSE, backend, x=X[:B]))
                time_cases([case], repeats)
                if not case.result.success:
                    print(f"{backend:<8} {B:>4} {n:>6} {rows:>7}  failed: {case.result.message}")
                    continue
                if rows >= largest[0]:
                    largest = (rows, case.best_s)
                print(f"{backend:<8} {B:>4} {n:>6} {rows:>7}  {1e3 * case.best_s:>10.2f} "
                      f"{1e6 * case.best_s / rows:>8.1f}")
                out.append({"backend": backend, "B": B, "n": n, "rows": rows,
                            "time": case.best_s})
    return out


def batched_check(ens_ok: dict[str, bool], B: int = 4, n: int = 8) -> str:
    """The batched ensemble (``x`` of shape (B, N)) against per_depth on the same batch."""
    rng = np.random.default_rng(0)
    X = P.X0 + 0.1 * rng.standard_normal((B, P.N))
    ref = invimbed.solve_adjoint(P.problem(), X, P.depths(n), control=P.CONTROL, rtol=1e-11,
                                 atol=1e-13, strategy="per_depth")
    parts = []
    for backend in ("numpy", "numba"):
        if ens_ok.get(backend):
            res = ensemble_call(n, LOOSE, backend, x=X)()
            parts.append(f"{backend} rel {P.worst_rel_error(res, ref, floor=P.ENTRYWISE_FLOOR):.1e}, norm "
                         f"{P.worst_rel_error(res, ref, floor=1.0):.1e}")
    return (f"check: batched x (B = {B}, n = {n}) at rtol {LOOSE[0]:g} against per_depth "
            f"(rtol 1e-11) on the same batch: " + "; ".join(parts))


def plot(points: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    markers = {1: "o", 4: "s", 16: "^"}
    for backend, style in (("numpy", "-"), ("numba", "--")):
        for B in sorted({p["B"] for p in points}):
            pts = sorted((p["rows"], p["time"]) for p in points
                         if p["backend"] == backend and p["B"] == B)
            if pts:
                r, t = zip(*pts)
                ax.loglog(r, t, style, marker=markers.get(B, "x"),
                          label=f"{backend}, B = {B}")
    ax.set_xlabel("rows (B inputs x n depths)")
    ax.set_ylabel("wall time [s] (best of repeats)")
    ax.set_title("solve_adjoint(strategy='ensemble'), rtol 1e-6")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="n = 128 only, one timed repeat, a small (c) grid (< 1 min)",
                       repeats_help="timed repeats per case, best taken (default 5, 1 with "
                                    "--quick)")
    parser.add_argument("--n", type=int, nargs="+", default=None,
                        help="depth counts of the main table (default 128 1024)")
    parser.add_argument("--per-depth-max-n", type=int, default=128,
                        help="time per_depth only up to this n (default 128)")
    parser.add_argument("--max-rows", type=int, default=10_000,
                        help="(c): largest B n (default 10000)")
    parser.add_argument("--max-call-seconds", type=float, default=20.0,
                        help="(c): skip a size whose estimated call time exceeds this")
    parser.add_argument("--plot", metavar="FILE", help="(c): save a log-log figure")
    parser.add_argument("--cold-numba", action="store_true",
                        help="a fresh NUMBA_CACHE_DIR: the numba compile time is a cold "
                             "compile (about a minute more)")
    parser.add_argument("--skip-user-styles", action="store_true",
                        help="skip the 'as a user writes it' table (bench_user_styles.py, "
                             "run in a child process)")
    args = parser.parse_args(argv)
    ns = args.n or ([128] if args.quick else [128, 1024])
    repeats = repeats_of(args, full=5)
    if min(ns) < 1:
        parser.error("--n must be at least 1")
    Bs, cns = ([1, 4], [8, 64, 256]) if args.quick else ([1, 4, 16], [8, 32, 128, 512, 1024])

    t_start = time.perf_counter()
    notes = []
    support = adjoint_support()
    backends = ("numpy",)
    if support["strategy"] and support["backend"] and prepare_numba(args.cold_numba, notes):
        backends += ("numba",)
    tools = {"casadi": have("casadi"), "diffrax": have("diffrax") and have("jax")}
    print("invimbed benchmark: ensemble adjoint vs per-depth, imbedding, CasADi, diffrax")
    print(header("sympy", "numba", "casadi", "jax", "diffrax", argv=argv,
                       extra=(f"threads  : NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS')}"
                              f", XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}",)))
    print(f"problem  : coupled pendulums (from_sympy), N = {P.N}, piecewise-constant torque "
          f"M = {P.M} on {len(P.KNOTS) - 1} pieces (n_w = {P.N_W}), x = {P.X0.tolist()}")
    print(f"depths   : n = {ns} in linspace(0, -1, n); best of {repeats} timed call(s), "
          f"interleaved per n")
    for name, ok in tools.items():
        if not ok:
            notes.append(f"{name} is not importable: its rows are skipped "
                         f"(pip install casadi jax diffrax)")
    ens_ok = probe_ensemble(support, notes, backends)
    for line in notes:
        _note(line)
    print()

    for line in verify(min(ns), tools, ens_ok):
        print(line)
    print()
    rows = main_table(ns, repeats, args.per_depth_max_n, tools, ens_ok, notes)
    print("time: best wall time; cpu/wall: process CPU over wall time of that call;\n"
          "setup [s]: casadi build, diffrax lower + compile (per n), numba compile in a fresh "
          "process (see (b'));\n"
          "pd/this: per_depth time over this row's (> 1: this row is faster);\n"
          "rel, norm: worst relative error over the five fields against the reference "
          "(entry-wise with a 1e-8 floor; field-normwise)")
    print()
    for line in targets(rows, ns):
        print(line)
    print()
    print(f"(c) B inputs x n depths, ensemble at rtol {LOOSE[0]:g}, atol {LOOSE[1]:g}, best of "
          f"{min(repeats, 3)}:")
    if not any(ens_ok.values()):
        print("  skipped: no ensemble here")
    else:
        pts = batched(ens_ok, Bs, cns, args.max_rows, min(repeats, 3), args.max_call_seconds)
        print(batched_check(ens_ok))
        if args.plot and pts:
            plot(pts, args.plot)
            print(f"figure saved to {args.plot}")
    print()
    if not args.skip_user_styles:   # the "as a user writes it" table, its own script
        sys.stdout.flush()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_user_styles.py")
        subprocess.run([sys.executable, script, "--table-only", "--n", *map(str, ns),
                        "--repeats", str(min(repeats, 3)),
                        "--max-call-seconds", str(args.max_call_seconds)]
                       + ([] if "numba" in backends else ["--no-numba"]), check=False)
        print()
    print(f"total benchmark time {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
