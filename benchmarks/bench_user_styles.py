"""The ensemble adjoint as a user writes the problem: one table, four ways of writing it.

Problem: the coupled pendulums of ``_pendulums.py`` (``N = 4``, piecewise-constant torque
``M = 2`` on four pieces of ``[-1, 0]``, ``n_w = 8``), ``n`` depths ``linspace(0, -1,
n)``, one input ``X0``, ``rtol = 1e-8``, ``atol = 1e-10``. Rows (how the problem is
written; no derivatives are given except by ``from_sympy``):

* ``vectorised, no flags``: ``BolzaProblem(f, R, T, vectorized=True)`` with numpy
  functions of whole batches (``_pendulums.f``, ``R``, ``T``; finite differences);
* ``vectorised, autonomous=True``: the same with ``autonomous=True``;
* ``vectorised, scalar t only``: the same functions behind ``float(t)``, which takes a
  scalar ``t`` only: they run once per distinct time (the result warns, ``"scalar_time"``);
  what every vectorised function cost before per-row times were passed as an array;
* ``per-sample @njit``: ``BolzaProblem(f, R, T)`` with ``numba.njit`` functions of one
  sample (``z`` (N,), ``theta`` (M,)), no derivatives (finite differences: in Python row
  by row on numpy, compiled on numba);
* ``from_sympy``: ``_pendulums.make_problem()`` (exact derivatives, generated code).

Columns: ``solve_adjoint(strategy="ensemble")`` with ``backend="numpy"`` and
``backend="numba"`` (vectorised functions do not run on numba: ``n/a``); the reference
rows below the table are the same problem written for diffrax (``jax.jit(jax.vmap(...))``,
Tsit5, ``dJ/dp = -(lam . f + R)``) and CasADi (CVODES Adams with ``Function.map`` over 2
threads, and the BDF loop), built by ``_ensemble_cases.py`` (as in ``bench_ensemble.py``). Each cell: the best
of ``R`` timed calls after one untimed warm-up (numba compilation, sympy code generation),
and ``norm``, the worst of ``max|a - b| / max|b|`` over the five fields against the tight
per-depth reference. A call whose warm-up exceeds ``--max-call-seconds`` is timed by that
one call only (marked ``*``); a cell whose estimate from the smaller ``n`` exceeds it is
skipped.

Printed ratios (the targets of the issue, never asserted):
no flags / autonomous (target <= 1.5x); ``strategy="per_depth"`` / ensemble for the
no-flag problem at ``n = 128`` (target >= 10x); the numba ensemble over diffrax for
per-sample ``@njit`` functions (target <= 3x) and for ``from_sympy``, the documented
fastest way to write the problem (target <= 1.5x); each cell over diffrax.

Run:  python benchmarks/bench_user_styles.py [--n 128 1024] [--repeats 3]
      [--max-call-seconds 30] [--quick]
(also run, as ``--table-only``, at the end of ``python benchmarks/bench_ensemble.py``).
"""

from __future__ import annotations

# first: one thread per tool (BLAS, OpenMP, numba, XLA), before numpy or jax load
import _ensemble_cases as E  # isort: skip
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import invimbed  # noqa: E402
import _pendulums as P  # noqa: E402
from _machine import arguments, best_of, header, repeats_of  # noqa: E402

TOL = (1e-8, 1e-10)
STYLES = ("vectorised, no flags", "vectorised, autonomous=True", "vectorised, scalar t only",
          "per-sample @njit", "from_sympy")


def _scalar_only(fn: Callable) -> Callable:
    return lambda t, z, th: fn(float(t), z, th)


def njit_functions() -> tuple[Callable, Callable, Callable]:
    """The pendulums one sample at a time, compiled by numba (as docs/performance.md)."""
    from numba import njit

    k, c, a, rho = P.K_SPRING, P.C_DAMP, P.A_RUN, P.RHO
    zt = P.Z_TARGET.copy()

    @njit
    def f(t, z, th):
        return np.array([z[2], z[3],
                         -np.sin(z[0]) - k * (z[0] - z[1]) - c * z[2] + th[0],
                         -np.sin(z[1]) - k * (z[1] - z[0]) - c * z[3] + th[1]])

    @njit
    def R(t, z, th):
        return a * (2.0 - np.cos(z[0]) - np.cos(z[1])) + 0.5 * rho * (th[0] ** 2 + th[1] ** 2)

    @njit
    def T(z):
        return 0.5 * np.sum((z - zt) ** 2)

    return f, R, T


def make(style: str) -> invimbed.BolzaProblem:
    """The problem written in ``style`` (one of `STYLES`)."""
    f, R, T = P.f, P.R, P.T
    if style == "vectorised, no flags":
        return invimbed.BolzaProblem(f, R, T, q=P.Q, vectorized=True)
    if style == "vectorised, autonomous=True":
        return invimbed.BolzaProblem(f, R, T, q=P.Q, vectorized=True, autonomous=True)
    if style == "vectorised, scalar t only":
        return invimbed.BolzaProblem(_scalar_only(f), _scalar_only(R), T, q=P.Q,
                                     vectorized=True)
    if style == "per-sample @njit":
        return invimbed.BolzaProblem(*njit_functions(), q=P.Q)
    if style == "from_sympy":
        return P.make_problem()
    raise ValueError(style)


def runs_on(style: str, backend: str) -> bool:
    return backend == "numpy" or not style.startswith("vectorised")


def adjoint_call(problem: Any, n: int, backend: str = "numpy",
                 strategy: str = "ensemble") -> Callable[[], Any]:
    d = P.depths(n)
    extra = {"backend": backend} if backend != "numpy" else {}
    return lambda: invimbed.solve_adjoint(problem, P.X0, d, control=P.CONTROL, rtol=TOL[0],
                                          atol=TOL[1], strategy=strategy, **extra)


class Cell:
    """One timed call: best of ``repeats`` after a warm-up, or the warm-up alone."""

    def __init__(self, call: Callable[[], Any], repeats: int, cap: float) -> None:
        self.first, self.result = best_of(call, 1)
        self.best, self.once = self.first, True
        if self.first <= cap:
            self.once = False
            self.best, self.result = best_of(call, repeats)

    def text(self) -> str:
        return f"{1e3 * self.best:.1f}{'*' if self.once else ''}"


def _fmt(cell: Cell | None, why: str = "n/a") -> str:
    return why if cell is None else cell.text()


def table(ns: list[int], repeats: int, cap: float, tools: dict[str, bool],
          numba_ok: bool) -> dict[tuple, Any]:
    """Measure and print the table; returns ``{(n, row, column): Cell or seconds}``."""
    cells: dict[tuple, Any] = {}
    problems = {s: make(s) for s in STYLES if numba_ok or s != "per-sample @njit"}
    last: dict[tuple, tuple[int, float]] = {}      # (style, backend) -> (n, seconds)
    head = (f"{'n':>5}  {'written as':<28} {'numpy [ms]':>11} {'numba [ms]':>11} "
            f"{'numpy/dfx':>9} {'numba/dfx':>9}  {'norm numpy':>10} {'norm numba':>10}")
    for n in ns:
        ref = P.reference(n)
        dfx = None
        if tools["diffrax"]:
            call, compile_s = E.diffrax_compiled(n, TOL)
            dfx = Cell(call, repeats, cap)
            cells[(n, "diffrax", "compile")] = compile_s
            cells[(n, "diffrax", "time")] = dfx
        print(head)
        print("-" * len(head))
        for style in STYLES:
            row = []
            for backend in ("numpy", "numba"):
                cell, why = None, "n/a"
                if style not in problems or not runs_on(style, backend):
                    why = "n/a" if style in problems else "no numba"
                elif backend == "numba" and not numba_ok:
                    why = "no numba"
                else:
                    prev = last.get((style, backend))
                    estimate = prev[1] * n / prev[0] if prev else 0.0
                    if estimate > cap:
                        why = f"~{estimate:.0f} s"
                    else:
                        cell = Cell(adjoint_call(problems[style], n, backend), repeats, cap)
                        last[(style, backend)] = (n, cell.best)
                        cells[(n, style, backend)] = cell
                row.append((cell, why))
            ratios = [f"{c.best / dfx.best:.1f}x" if c is not None and dfx is not None else "-"
                      for c, _ in row]
            norms = [f"{P.worst_rel_error(c.result, ref):.1e}" if c is not None else "-"
                     for c, _ in row]
            print(f"{n:>5}  {style:<28} {_fmt(*row[0]):>11} {_fmt(*row[1]):>11} "
                  f"{ratios[0]:>9} {ratios[1]:>9}  {norms[0]:>10} {norms[1]:>10}")
        if dfx is not None:
            print(f"{n:>5}  {'diffrax (jax), Tsit5':<28} {dfx.text():>11} ms, compile "
                  f"{cells[(n, 'diffrax', 'compile')]:.2f} s, norm "
                  f"{P.worst_rel_error(dfx.result, ref):.1e}")
        if tools["casadi"]:
            for label, build in (("CasADi adams map x2", E.casadi_map),
                                 ("CasADi bdf loop", E.casadi_loop)):
                t0 = time.perf_counter()
                call = build(n, TOL)
                build_s = time.perf_counter() - t0
                cell = Cell(call, repeats, cap)
                cells[(n, label, "time")] = cell
                ratio = f", {cell.best / dfx.best:.1f}x diffrax" if dfx is not None else ""
                print(f"{n:>5}  {label:<28} {cell.text():>11} ms{ratio}, build {build_s:.2f} s, "
                      f"norm {P.worst_rel_error(cell.result, ref):.1e}")
        print()
    # the loop, for the per_depth / ensemble target
    n = 128
    if n in ns and (n, STYLES[0], "numpy") in cells:
        pd = Cell(adjoint_call(problems[STYLES[0]], n, strategy="per_depth"), 1, 0.0)
        cells[(n, STYLES[0], "per_depth")] = pd
    return cells


def targets(cells: dict[tuple, Any], ns: list[int]) -> list[str]:
    lines = ["targets (ratios measured in this run; never asserted):"]
    for n in ns:
        flag = cells.get((n, STYLES[0], "numpy"))
        auto = cells.get((n, STYLES[1], "numpy"))
        scalar = cells.get((n, STYLES[2], "numpy"))
        if flag is not None and auto is not None:
            r = flag.best / auto.best
            lines.append(f"  n = {n}: vectorised no flags / autonomous=True = {r:.2f}x "
                         f"(target <= 1.5x): {'met' if r <= 1.5 else 'NOT met'}"
                         + (f"; scalar t only / no flags = {scalar.best / flag.best:.1f}x"
                            if scalar is not None else ""))
    pd = cells.get((128, STYLES[0], "per_depth"))
    ens = cells.get((128, STYLES[0], "numpy"))
    if pd is not None and ens is not None:
        r = pd.best / ens.best
        lines.append(f"  n = 128: vectorised no flags, per_depth / ensemble numpy = {r:.1f}x "
                     f"(target >= 10x): {'met' if r >= 10 else 'NOT met'} (per_depth "
                     f"{pd.best:.2f} s, one call)")
    for n in ns:
        dfx = cells.get((n, "diffrax", "time"))
        for style, target in ((STYLES[3], 3.0), (STYLES[4], 1.5)):
            nb = cells.get((n, style, "numba"))
            if nb is not None and dfx is not None:
                r = nb.best / dfx.best
                lines.append(f"  n = {n}: {style}, numba / diffrax = {r:.1f}x (target "
                             f"<= {target:g}x): {'met' if r <= target else 'NOT met'}")
    return lines


def run(ns: list[int], repeats: int, cap: float, numba_ok: bool | None = None) -> None:
    """The table and its targets (``--table-only``: what `bench_ensemble.main` runs)."""
    tools = {"casadi": E.have("casadi"), "diffrax": E.have("diffrax") and E.have("jax")}
    if numba_ok is None:
        notes: list[str] = []
        numba_ok = E.prepare_numba(False, notes)
        for line in notes:
            print(f"  note: {line}")
    print(f"As a user writes it: solve_adjoint(strategy='ensemble') at rtol {TOL[0]:g}, atol "
          f"{TOL[1]:g}, coupled pendulums (N = {P.N}, torque {len(P.KNOTS) - 1} pieces x "
          f"{P.M}), x = {P.X0.tolist()}; best of {repeats} after a warm-up; * = one call "
          f"(warm-up over {cap:g} s); '~N s': skipped, estimated from the smaller n")
    cells = table(ns, repeats, cap, tools, numba_ok)
    for line in targets(cells, ns):
        print(line)


# -- the issue's own problem: a README-style vectorised rigid body ---------------------------
#: principal moments of inertia, the target rates, the control weight
INERTIA, W_TARGET, RHO_RB = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.2, 0.1]), 0.1


def rb_f(t, z, th):
    """Euler's equations of a torqued rigid body, vectorised over the batch."""
    I1, I2, I3 = INERTIA
    w1, w2, w3 = z[:, 0], z[:, 1], z[:, 2]
    return np.stack([((I2 - I3) * w2 * w3 + th[:, 0]) / I1,
                     ((I3 - I1) * w3 * w1 + th[:, 1]) / I2,
                     ((I1 - I2) * w1 * w2 + th[:, 2]) / I3], axis=1)


def rb_R(t, z, th):
    return 0.5 * RHO_RB * np.sum(th ** 2, axis=1)


def rb_T(z):
    return 0.5 * np.sum((z - W_TARGET) ** 2, axis=1)


def rigid_body(repeats: int) -> list[str]:
    """The issue's case: N = 3, a piecewise-constant torque of 4 pieces x 3 on [-1, 0],
    n = 128 depths, one input, rtol 1e-8 (atol 1e-10): ``solve_adjoint`` without
    ``autonomous=True`` against with it (target <= 1.5x), and ``strategy="per_depth"``
    against the ensemble (target >= 10x), all on numpy."""
    rng = np.random.default_rng(3)
    ctrl = invimbed.PiecewiseConstant(np.linspace(-1.0, 0.0, 5), rng.normal(size=(4, 3)) * 0.5)
    x, d = np.array([0.3, -0.4, 0.8]), np.linspace(0.0, -1.0, 128)
    plain = invimbed.BolzaProblem(rb_f, rb_R, rb_T, vectorized=True)
    flagged = invimbed.BolzaProblem(rb_f, rb_R, rb_T, vectorized=True, autonomous=True)

    def call(problem: Any, strategy: str = "ensemble") -> Callable[[], Any]:
        return lambda: invimbed.solve_adjoint(problem, x, d, control=ctrl, rtol=1e-8,
                                              atol=1e-10, strategy=strategy)

    cells = {"no flags": Cell(call(plain), repeats, 1e9),
             "autonomous=True": Cell(call(flagged), repeats, 1e9),
             "no flags, per_depth": Cell(call(plain, "per_depth"), 1, 0.0)}
    ref = cells["autonomous=True"].result
    lines = ["", "rigid body (README-style vectorised, N = 3, torque 4 x 3, n = 128, rtol 1e-8, "
             "numpy; best of the repeats after a warm-up):"]
    for name, cell in cells.items():
        err = P.worst_rel_error(cell.result, ref)
        lines.append(f"  {name:22s} {cell.best * 1e3:9.1f} ms  success {cell.result.success}"
                     f"  vs autonomous=True {err:.1e}  derivatives: {cell.result.derivatives}")
    r = cells["no flags"].best / cells["autonomous=True"].best
    lines.append(f"  no flags / autonomous=True = {r:.2f}x (target <= 1.5x): "
                 f"{'met' if r <= 1.5 else 'NOT met'}")
    r = cells["no flags, per_depth"].best / cells["no flags"].best
    lines.append(f"  per_depth / ensemble = {r:.1f}x (target >= 10x): "
                 f"{'met' if r >= 10 else 'NOT met'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="n = 128 only, one timed repeat", repeats_help=
                       "timed repeats per cell, best taken (default 3, 1 with --quick)")
    parser.add_argument("--n", type=int, nargs="+", default=None,
                        help="depth counts (default 128 1024; 128 with --quick)")
    parser.add_argument("--max-call-seconds", type=float, default=30.0)
    parser.add_argument("--rigid-body-only", action="store_true",
                        help="run only the issue's rigid body (no table)")
    parser.add_argument("--table-only", action="store_true",
                        help="run only the table (no machine lines, no rigid body): what "
                             "bench_ensemble.py runs at its end")
    parser.add_argument("--no-numba", action="store_true",
                        help="skip the numba column (bench_ensemble.py found it does not run)")
    args = parser.parse_args(argv)
    ns = args.n or ([128] if args.quick else [128, 1024])
    repeats = repeats_of(args, full=3)
    if args.table_only:
        run(ns, repeats, args.max_call_seconds, numba_ok=False if args.no_numba else None)
        return 0
    print(header("sympy", "numba", "casadi", "jax", "diffrax", argv=argv))
    t0 = time.perf_counter()
    if not args.rigid_body_only:
        run(ns, repeats, args.max_call_seconds, numba_ok=False if args.no_numba else None)
    print("\n".join(rigid_body(repeats)))
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0

if __name__ == "__main__":
    sys.exit(main())
