"""The optimal-control gallery: `invimbed.solve_ocp` against CasADi + IPOPT, same grids.

For each gallery problem (examples/ocp_*.py: Rayleigh, Van der Pol with bounds, minimum
time, Bryson-Denham, LQ tracking, hypersensitive) both tools solve the same transcription: K intervals
with the control constant on each.

- invimbed: multiple shooting on the exact ensemble (`solve_ocp`, IPOPT through cyipopt,
  the Hessian each example chooses, by default the exact one), rtol 1e-8, atol 1e-10;
  the shooting rows compiled where numba is installed (``--rows numpy``: solve_ocp's
  ``backend="numpy"``, the numpy ensemble's rows);
- CasADi 3.8 (benchmark-only) + IPOPT, exact derivatives and exact Hessian by CasADi's
  algorithmic differentiation: multiple shooting with RK4 (10 steps per interval) or
  Radau collocation of degree 3 (``--casadi collocation``, and always for the
  hypersensitive problem).

Printed per problem: both objectives and their relative difference (target <= 1e-4),
both wall times (best of ``--repeats``) and their ratio (target <= 3), IPOPT
iterations, and for Bryson-Denham the largest excess of x1 over 1/9 at the nodes
(target <= 1e-6). The wall time of CasADi counts ``opti.solve()`` only (its expression
graph is built before), that of invimbed the example's whole ``solve`` call: building
the problem with `from_sympy`, generating its derivative code (every call builds a new
problem) and ``solve_ocp``; one untimed call before warms the imports.

Then the problems of ``benchmarks/_ocp_problems.py``, each solved by both tools in one
run, in alternation, best of ``--repeats`` (both sides on a problem built before the
clock starts: invimbed's `from_sympy` problem with its code generated, CasADi's
``nlpsol`` with its expression graph):

- the Goddard rocket (COPS; free final time; published ``h(tf) = 1.0128``), 100
  intervals; the cart-pole swing-up, 40 intervals (target: time ratio <= 2); the
  obstacle avoidance, feasible and infeasible (the target inside the obstacle), 40
  intervals: objective (or the infeasibility verdict), IPOPT iterations, times, ratio;
- ``--style plain``: these problems written as plain vectorised numpy functions
  (`_ocp_problems.invimbed_plain_problem`, derivatives traced), not with `from_sympy`;
- the MPC loop (``--only mpc``): Van der Pol, 20 intervals a window of ``H = 1``,
  re-solved every ``dt = 0.25`` (5 intervals) from ``z(0) = (1, 0)``, 20 re-solves, the
  plant simulated by scipy (the same for both sides, not timed).
  `invimbed.OCPSolver` built once and CasADi's ``nlpsol`` built once, both warm-started
  from the last solution moved 5 intervals on with its multipliers (IPOPT's
  ``warm_start_init_point``, the same warm-start options on both sides:
  ``invimbed._control.ocp.solvers.WARM_START``). Printed: the median time per re-solve
  (the best of the ``--repeats`` loops), the warm iterations, the loop's true cost
  (target: median ratio <= 2).

Run:  python benchmarks/bench_ocp.py [--quick] [--repeats R] [--casadi collocation]
      [--hessian finite-differences] [--only NAME] [--skip-gallery] [--rows numpy]
      [--style plain] [--first-solve ocp_vanderpol]

``--first-solve EXAMPLE`` times only the first `solve_ocp` of a gallery example in fresh
processes (``INVIMBED_CACHE`` empty, then filled), ``backend="auto"`` against ``"numpy"``:
what the compiled rows' generation and compilation cost a new problem.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

import _ocp_problems as problems
from _machine import arguments, header

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GALLERY = [("Rayleigh", "ocp_rayleigh", 100), ("Van der Pol", "ocp_vanderpol", 100),
           ("minimum time", "ocp_min_time", 100), ("Bryson-Denham", "ocp_bryson_denham", 100),
           ("LQ tracking", "ocp_lq_tracking", 40), ("hypersensitive", "ocp_hypersensitive", None)]
#: CasADi's RK4 shooting is unstable on the hypersensitive grid's long intervals (an
#: explicit method with steps of 10 where the state leaves 0): collocation there.
COLLOCATION_ONLY = ("ocp_hypersensitive",)


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def casadi_model(ex, K: int, scheme: str):
    """CasADi's Opti for the example's SPEC on its grid (multiple shooting or collocation)."""
    import casadi as ca
    spec = ex.SPEC
    n, m = spec["n"], spec["m"]
    grid = np.asarray(spec["grid"](K), dtype=float)
    K = grid.size - 1
    tau = (grid - grid[0]) / (grid[-1] - grid[0])
    opti = ca.Opti()
    X, U = opti.variable(n, K + 1), opti.variable(m, K)
    free = spec.get("free_horizon", False)
    H = opti.variable() if free else grid[-1] - grid[0]
    t, z, u = ca.SX.sym("t"), ca.SX.sym("z", n), ca.SX.sym("u", m)
    running = spec.get("running")
    if running is None:                     # the LQ tracking problem reads t
        f_expr = ca.vertcat(*spec["dynamics"](z, u))
        r_expr = (z[0] - ca.sin(t)) ** 2 + ex.RHO * u[0] ** 2
    else:
        f_expr, r_expr = ca.vertcat(*spec["dynamics"](z, u)), running(z, u) + 0 * t
    F = ca.Function("F", [t, z, u], [f_expr, r_expr])
    # one SX function per interval: 10 RK4 steps of the state and the running cost
    hs = ca.SX.sym("h")
    zz, c, tt, dt = z, 0, t, hs / 10
    for _ in range(10):
        k1, q1 = F(tt, zz, u)
        k2, q2 = F(tt + dt / 2, zz + dt / 2 * k1, u)
        k3, q3 = F(tt + dt / 2, zz + dt / 2 * k2, u)
        k4, q4 = F(tt + dt, zz + dt * k3, u)
        zz = zz + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        c = c + dt / 6 * (q1 + 2 * q2 + 2 * q3 + q4)
        tt = tt + dt
    step = ca.Function("step", [t, z, u, hs], [zz, c])
    J = 0
    opti.subject_to(X[:, 0] == spec["x0"])
    t0 = grid[-1] - H if free else grid[0]
    if scheme == "collocation":
        d = 3
        cp = np.append(0, ca.collocation_points(d, "radau"))
        C, D, W = np.zeros((d + 1, d + 1)), np.zeros(d + 1), np.zeros(d + 1)
        for j in range(d + 1):
            poly = np.poly1d([1.0])
            for r in range(d + 1):
                if r != j:
                    poly *= np.poly1d([1, -cp[r]]) / (cp[j] - cp[r])
            D[j], W[j] = poly(1.0), np.polyint(poly)(1.0)
            C[j] = np.polyder(poly)(cp)
    for k in range(K):
        h = H * (tau[k + 1] - tau[k])
        tk = t0 + H * tau[k]
        if scheme == "collocation":
            Xc = opti.variable(n, d)
            opti.set_initial(Xc, np.tile(np.asarray(spec["x0"], float)[:, None], (1, d)))
            end = D[0] * X[:, k]
            for j in range(1, d + 1):
                slope = C[0, j] * X[:, k]
                for r in range(d):
                    slope = slope + C[r + 1, j] * Xc[:, r]
                fj, qj = F(tk + cp[j] * h, Xc[:, j - 1], U[:, k])
                opti.subject_to(h * fj == slope)
                end = end + D[j] * Xc[:, j - 1]
                J = J + W[j] * qj * h
            opti.subject_to(X[:, k + 1] == end)
        else:
            zz, c = step(tk, X[:, k], U[:, k], h)
            J = J + c
            opti.subject_to(X[:, k + 1] == zz)
        if "control_bounds" in spec:
            lo, hi = spec["control_bounds"]
            opti.subject_to(opti.bounded(lo, U[:, k], hi))
        for i, b in enumerate(spec.get("state_upper") or []):
            if b is not None:
                opti.subject_to(X[i, k + 1] <= b)
    if spec.get("final_state") is not None:
        opti.subject_to(X[:, -1] == spec["final_state"])
    if free:
        opti.subject_to(H >= 1e-3)
        opti.set_initial(H, grid[-1] - grid[0])
    opti.minimize(J)
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes"})
    return opti, J, X


def run_casadi(ex, K, scheme, repeats):
    best, out = np.inf, None
    for _ in range(repeats):
        opti, J, X = casadi_model(ex, K, scheme)
        t0 = time.perf_counter()
        sol = opti.solve()
        best = min(best, time.perf_counter() - t0)
        out = (float(sol.value(J)), int(sol.stats()["iter_count"]), np.asarray(sol.value(X)))
    return out, best


def run_invimbed(ex, K, repeats, hessian, backend="auto"):
    best, res = np.inf, None
    kw = {"backend": backend} if hessian is None else {"hessian": hessian, "backend": backend}
    ex.solve(K, **kw)                                 # imports, first compilations
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = ex.solve(K, **kw)
        best = min(best, time.perf_counter() - t0)
    return res, best


# -- the problems of _ocp_problems: both sides in one run ---------------------------------
def _best_alternating(fns: list, repeats: int) -> tuple[list, list[float], list[float]]:
    """Each of ``fns`` called in turn ``repeats`` times: the last outputs, the best wall
    times and the best CPU times (this process's, which other jobs on a loaded machine
    lengthen less)."""
    best, cpu, outs = [np.inf] * len(fns), [np.inf] * len(fns), [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            outs[i] = fn()
            best[i] = min(best[i], time.perf_counter() - t0)
            cpu[i] = min(cpu[i], time.process_time() - c0)
    return outs, best, cpu


def _problem(spec, style: str):
    """The invimbed problem of ``spec``: `from_sympy`, or plain numpy functions."""
    return (problems.invimbed_plain_problem(spec) if style == "plain"
            else problems.invimbed_problem(spec))


def bench_problem(spec, repeats: int, hessian: str | None, backend: str = "auto",
                  style: str = "sympy") -> tuple[str, float]:
    """One problem of `_ocp_problems`, both sides; returns (line, time ratio)."""
    import invimbed
    pb = _problem(spec, style)
    kw = {**problems.invimbed_options(spec), "backend": backend}
    if hessian is not None:
        kw["hessian"] = hessian
    cas = problems.CasadiOCP(spec)
    invimbed.solve_ocp(pb, spec.x0, **kw)              # code generation, imports
    cas.solve(spec.x0)
    (c, r), (tc, ti), (cc, ci) = _best_alternating(
        [lambda: cas.solve(spec.x0), lambda: invimbed.solve_ocp(pb, spec.x0, **kw)], repeats)
    if spec.name == "goddard":
        note = f"tf {r.horizon:.5f}; published J {spec.published}"
    elif spec.name.endswith("infeasible"):
        note = f"casadi: {c['status']}; invimbed: status {r.status}, {r.solver_message}"
    else:
        note = "" if r.success else f"NOT SUCCESS: {r.message[:60]}"
    note = f"rows {r.backend}; {note}"
    Jr = f"{r.fun:>12.7f}" if np.isfinite(r.fun) else f"{'nan':>12}"
    line = (f"{spec.name:<20} {spec.intervals:>4} {c['f']:>12.7f} {Jr} "
            f"{abs(r.fun - c['f']) / abs(c['f']):>9.1e} {tc:>8.3f}s {ti:>9.3f}s "
            f"{ti / tc:>6.1f} {c['iter']:>3}/{r.nit:<4}  CPU {cc:.3f}/{ci:.3f} s "
            f"(ratio {ci / cc:.1f}); {note}")
    return line, ti / tc


#: What the last `mpc_loops` built (printed by `bench_mpc`).
mpc_rows = [""]


def mpc_loops(spec, hessian: str | None, backend: str = "auto", style: str = "sympy") -> tuple:
    """The two MPC loops of ``spec`` (`_ocp_problems.VDP_MPC`): each a callable that
    runs the whole loop and returns (per-step solve times, iterations, true cost)."""
    import invimbed
    K, shift, steps = spec.intervals, spec.notes["shift"], spec.notes["steps"]
    h = spec.horizon / K
    pb = _problem(spec, style)
    kw = {**problems.invimbed_options(spec), "backend": backend}
    if hessian is not None:
        kw["hessian"] = hessian
    mpc = invimbed.OCPSolver(pb, spec.x0, **kw)
    mpc_rows[0] = f"{style} problem, derivatives: {pb.derivative_source}; rows {mpc.backend}"
    cas = problems.CasadiOCP(spec)
    cas.solve(spec.x0, cas.solve(spec.x0), shift)      # builds the warm solver

    def loop(solve):
        z, total, last = np.asarray(spec.x0, dtype=float), 0.0, None
        times, cpu, its = [], [], []
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            U, nit, last = solve(z, last)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            its.append(nit)
            z, cost = problems.simulate(spec, z, U, h, shift)
            total += cost
        return np.array(times), its, total, np.array(cpu)

    def ours(z, last):
        res = mpc.solve(z, shift=shift, warm_start=last is not None)
        if not res.success:
            raise RuntimeError(f"OCPSolver: {res.message}")
        return res.controls, res.nit, True

    def theirs(z, last):
        out = cas.solve(z, last, shift)
        if not out["success"]:
            raise RuntimeError(f"casadi: {out['status']}")
        return out["x"][:K * (spec.n + spec.m)].reshape(K, -1)[:, :spec.m], out["iter"], out

    return (lambda: loop(theirs)), (lambda: loop(ours))


def bench_mpc(spec, repeats: int, hessian: str | None, backend: str = "auto",
              style: str = "sympy") -> float:
    cas_loop, our_loop = mpc_loops(spec, hessian, backend, style)
    best = [None, None]
    for _ in range(repeats):
        for i, fn in enumerate((cas_loop, our_loop)):
            out = fn()
            if best[i] is None or np.median(out[0]) < np.median(best[i][0]):
                best[i] = out
    (tc, itc, Jc, cc), (ti, iti, Ji, ci) = best
    ratio = np.median(ti) / np.median(tc)
    print(f"\nMPC loop, Van der Pol, {spec.intervals} intervals a window of H = "
          f"{spec.horizon}, re-solved every {spec.notes['dt']} ({spec.notes['shift']} "
          f"intervals), {spec.notes['steps']} re-solves, warm-started; best of {repeats} loops")
    print(f"  invimbed: {mpc_rows[0]}")
    for name, t, it, J, c in (("casadi", tc, itc, Jc, cc), ("invimbed", ti, iti, Ji, ci)):
        print(f"  {name:<9} median {1e3 * np.median(t):8.2f} ms per re-solve (CPU "
              f"{1e3 * np.median(c):.2f} ms; first, cold: {1e3 * t[0]:.1f} ms; max "
              f"{1e3 * t.max():.1f} ms); iterations {it}; loop's true cost {J:.6f}")
    print(f"  ratio of the medians (invimbed / casadi): {ratio:.2f} (target <= 2); of the "
          f"CPU medians: {np.median(ci) / np.median(cc):.2f}")
    return ratio


#: The child process of `bench_first_solve`: the example imported, then its ``solve``
#: timed twice (wall and CPU), printed as one line of numbers.
_FIRST_SOLVE = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("ex", sys.argv[1])
ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
t0, c0 = time.perf_counter(), time.process_time()
res = ex.solve(int(sys.argv[2]), backend=sys.argv[3])
t1, c1 = time.perf_counter(), time.process_time()
ex.solve(int(sys.argv[2]), backend=sys.argv[3])
print(t1 - t0, c1 - c0, time.perf_counter() - t1, res.backend, res.fun)
"""


def bench_first_solve(name: str, K: int, repeats: int) -> None:
    """The first `solve_ocp` of gallery problem ``name`` in a fresh process, with
    ``backend="auto"`` (the compiled rows: generated and compiled, or loaded from the
    cache) and ``"numpy"``, in alternation: with an empty ``INVIMBED_CACHE`` (a new
    problem) and again with the cache the first process filled."""
    import os
    import subprocess
    import tempfile
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    print(f"\nfirst solve_ocp of {name} (K = {K}) in a fresh process; seconds: wall (CPU); "
          f"then the second solve in that process")
    for r in range(repeats):
        for backend in ("auto", "numpy"):
            with tempfile.TemporaryDirectory() as cache:
                for label in ("empty cache", "cache filled"):
                    out = subprocess.run(
                        [sys.executable, "-c", _FIRST_SOLVE, str(EXAMPLES / f"{name}.py"),
                         str(K), backend], env={**env, "INVIMBED_CACHE": cache},
                        capture_output=True, text=True, check=True).stdout.split()
                    print(f"  run {r + 1}, backend={backend!r:<8} {label:<13} first "
                          f"{float(out[0]):6.2f} s ({float(out[1]):5.2f} s CPU), second "
                          f"{float(out[2]):5.2f} s; rows {out[3]}, J {float(out[4]):.8f}",
                          flush=True)


def bench_problems(args) -> list:
    print(f"\n{'problem':<20} {'K':>4} {'J casadi':>12} {'J invimbed':>12} {'rel diff':>9} "
          f"{'t casadi':>9} {'t invimbed':>10} {'ratio':>6} {'it c/i':>8}  note")
    rows = []
    for name, spec in problems.PROBLEMS.items():
        if args.only and args.only not in name:
            continue
        if name == "vdp-mpc":
            rows.append(("MPC loop", bench_mpc(spec, args.repeats, args.hessian, args.rows,
                                               args.style)))
            continue
        line, ratio = bench_problem(spec, args.repeats, args.hessian, args.rows, args.style)
        print(line, flush=True)
        rows.append((name, ratio))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, quick="K = 20 for every problem", repeats=1)
    ap.add_argument("--casadi", choices=("shooting", "collocation"), default="shooting")
    ap.add_argument("--hessian", choices=("auto", "exact", "limited-memory", "finite-differences"),
                    default=None, help="default: each example's own choice")
    ap.add_argument("--only", default=None, help="run the problems whose name contains this")
    ap.add_argument("--skip-gallery", action="store_true", help="the new problems only")
    ap.add_argument("--rows", choices=("auto", "numpy", "numba"), default="auto",
                    help="invimbed's shooting rows, solve_ocp's `backend`: compiled where "
                         "numba is installed and the problem compiles (auto), the numpy "
                         "ensemble, or compiled (numba)")
    ap.add_argument("--style", choices=("sympy", "plain"), default="sympy",
                    help="the problems of _ocp_problems (cart-pole, MPC, ...) written with "
                         "from_sympy, or as plain vectorised numpy functions (traced)")
    ap.add_argument("--first-solve", metavar="EXAMPLE", default=None,
                    help="only time the first solve of this gallery example (e.g. "
                         "ocp_vanderpol) in fresh processes, backend 'auto' against 'numpy'")
    args = ap.parse_args(argv)
    print(header("casadi", "cyipopt", "numba", "sympy", argv=argv))
    if args.first_solve:
        bench_first_solve(args.first_solve, 20 if args.quick else 100, args.repeats)
        return 0
    print(f"\ncasadi scheme: {args.casadi}; invimbed hessian: {args.hessian}; invimbed "
          f"backend (rows): {args.rows} (each result's `backend` printed); problems of "
          f"_ocp_problems written as: {args.style}; repeats: {args.repeats}\n")
    rows = []
    head = (f"{'problem':<14} {'K':>4} {'J casadi':>12} {'J invimbed':>12} {'rel diff':>9} "
            f"{'t casadi':>9} {'t invimbed':>10} {'ratio':>6} {'it c/i':>8}  note")
    print(head)
    for title, name, K in GALLERY:
        if args.skip_gallery or (args.only and args.only not in name):
            continue
        K = 20 if args.quick and K else K
        ex = load(name)
        scheme = "collocation" if name in COLLOCATION_ONLY else args.casadi
        (Jc, itc, Xc), tc = run_casadi(ex, K, scheme, args.repeats)
        K = len(np.asarray(ex.SPEC["grid"](K))) - 1
        res, ti = run_invimbed(ex, K, args.repeats, args.hessian, args.rows)
        rel = abs(res.fun - Jc) / abs(Jc)
        note = ("" if res.success else f"NOT SUCCESS: {res.message[:60]}; ") + (
            f"rows {res.backend}; ")
        if name == "ocp_bryson_denham":
            note += f"max x1 - 1/9 at nodes: {np.max(res.states[:, 0]) - 1 / 9:.1e}"
        if name == "ocp_min_time":
            note += f"H = {res.horizon:.8f}"
        line = (f"{title:<14} {K:>4} {Jc:>12.7f} {res.fun:>12.7f} {rel:>9.1e} {tc:>8.2f}s "
                f"{ti:>9.2f}s {ti / tc:>6.1f} {itc:>3}/{res.nit:<4}  {note}")
        print(line, flush=True)
        rows.append((title, rel, ti / tc))
    more = bench_problems(args)
    print("\ntargets: rel diff <= 1e-4, ratio <= 3 (invimbed / casadi wall time)")
    for title, rel, ratio in rows:
        print(f"  {title:<14} objective {'ok' if rel <= 1e-4 else 'MISSED'}, "
              f"time {'ok' if ratio <= 3 else 'MISSED'}")
    for title, ratio in more:
        if title in ("cart-pole", "MPC loop"):
            print(f"  {title:<14} time ratio {ratio:.2f}: {'ok' if ratio <= 2 else 'MISSED'} "
                  f"(target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
