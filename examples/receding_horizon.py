"""Receding-horizon control (model-predictive control): re-solve at every visited state.

Van der Pol with a bounded force (a classical test problem, written from the literature):

    x1' = x2,   x2' = -x1 + (1 - x1^2) x2 + u,   -0.3 <= u <= 1,
    J = int_0^5 (x1^2 + x2^2 + u^2) dt,          x(0) = (1, 0),

published optimum J* = 2.8673 (open loop, over the whole horizon tf = 5).

The loop: at ``t_k = k dt`` the state is ``z_k``; the problem is solved from ``z_k`` over
the receding window ``[t_k, t_k + H]`` (the dynamics and losses do not depend on ``t``, so
one window ``[0, H]`` stands for all), the control it finds is applied for ``dt`` by
`invimbed.simulate`, which also returns the running cost of that stretch. The total true
cost of the loop is compared with J*; the time of every re-solve is measured and printed.

Two solvers of the window:

- ``invimbed.OCPSolver`` (the default): multiple shooting on ``K = 20`` intervals a
  window, the NLP built once, every re-solve warm-started from the last solution moved
  on by ``dt`` (``dt / (H / K) = 5`` intervals), multipliers included; its piecewise
  constant control is applied;
- ``--sweep``: `solve_optimal` (the HJB sweep) anew at each state, its feedback applied.

Run:  python examples/receding_horizon.py          (2 steps, t up to 0.5)
      python examples/receding_horizon.py --full   (20 steps, the whole horizon tf = 5)
      python examples/receding_horizon.py --full --sweep
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp

import invimbed

PUBLISHED = 2.8673


def problem() -> invimbed.BolzaProblem:
    t, x1, x2, u = sp.symbols("t x1 x2 u")
    return invimbed.from_sympy(t, [x1, x2], [u], [x2, -x1 + (1 - x1**2) * x2 + u],
                               running_loss=x1**2 + x2**2 + u**2)


def apply(pb, z, control, dt: float, k: int):
    """The plant: ``control`` applied from ``z`` for ``dt`` (simulated), and the time it
    took."""
    t0 = time.perf_counter()
    sim = invimbed.simulate(pb, z, control, dt, rtol=1e-8, atol=1e-10, n_points=5)
    if not sim.success:
        raise RuntimeError(f"step {k}: {sim.message}")
    return sim, time.perf_counter() - t0


def receding_horizon(pb, x0, steps: int, dt: float, H: float, intervals: int = 20) -> dict:
    """The loop with `invimbed.OCPSolver`, built once; returns the per-step records and
    the total true cost."""
    shift = int(round(dt / (H / intervals)))          # intervals that pass between solves
    if abs(shift * H / intervals - dt) > 1e-12:
        raise ValueError(f"dt = {dt} must be a whole number of intervals of H / K = "
                         f"{H / intervals}")
    t0 = time.perf_counter()
    # the window [-H, 0] (q = 0): K intervals, the NLP and its solver built once
    mpc = invimbed.OCPSolver(pb, x0, p=-H, intervals=intervals, control_bounds=(-0.3, 1.0))
    build = time.perf_counter() - t0
    z = np.asarray(x0, dtype=float)
    records = []
    total = 0.0
    for k in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        res = mpc.solve(z, shift=shift)               # warm from the last window, moved on
        solve_time, solve_cpu = time.perf_counter() - t0, time.process_time() - c0
        if not res.success:
            raise RuntimeError(f"step {k}: {res.message}")
        # the plan's first dt, moved to [-dt, 0] where simulate runs
        plan = invimbed.PiecewiseConstant(res.times[:shift + 1] + H - dt,
                                          res.controls[:shift])
        sim, sim_time = apply(pb, z, plan, dt, k)
        total += float(sim.running_cost)
        records.append(dict(t=k * dt, z=z.copy(), u=float(res.controls[0, 0]),
                            V=float(res.fun), J=np.nan, ok=bool(res.success), nit=res.nit,
                            warm=bool(res.warm_start), solve=solve_time, cpu=solve_cpu,
                            sim=sim_time))
        z = sim.z[-1]
    return {"records": records, "total": total, "z_end": z, "build": build}


def receding_horizon_sweep(pb, x0, steps: int, dt: float, H: float, order: int) -> dict:
    """The loop with the sweep; returns the per-step records and the total true cost."""
    z = np.asarray(x0, dtype=float)
    records = []
    total = 0.0
    for k in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        res = invimbed.solve_optimal(pb, z, [-H], control_bounds=[[-0.3, 1.0]],
                                     control_affine=True, order=order)
        solve_time, solve_cpu = time.perf_counter() - t0, time.process_time() - c0
        if not np.isfinite(res.value[0]):
            raise RuntimeError(f"step {k}: the sweep did not reach the horizon H = {H}: "
                               f"{res.message}")
        policy = res.policy

        def feedback(t, zz, policy=policy):
            # simulate runs t in [-dt, 0]; the window's feedback runs from -H
            return policy(t + dt - H, zz)

        sim, sim_time = apply(pb, z, feedback, dt, k)
        total += float(sim.running_cost)
        records.append(dict(t=k * dt, z=z.copy(), u=float(res.feedback[0, 0]),
                            V=float(res.value[0]), J=float(res.closed_loop_value[0]),
                            ok=bool(res.success), solve=solve_time, cpu=solve_cpu,
                            sim=sim_time))
        z = sim.z[-1]
    return {"records": records, "total": total, "z_end": z}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="20 steps: the whole horizon tf = 5")
    ap.add_argument("--horizon", type=float, default=1.0, help="receding horizon H")
    ap.add_argument("--dt", type=float, default=0.25, help="time between re-solves")
    ap.add_argument("--intervals", type=int, default=20, help="shooting intervals a window")
    ap.add_argument("--sweep", action="store_true", help="re-solve with the sweep instead")
    ap.add_argument("--order", type=int, default=2, help="jet order of the sweep")
    args = ap.parse_args()
    steps = int(round(5.0 / args.dt)) if args.full else 2
    pb = problem()
    how = (f"the sweep, jet order {args.order}" if args.sweep else
           f"OCPSolver, {args.intervals} intervals a window, warm-started")
    print(f"Van der Pol, -0.3 <= u <= 1, x(0) = (1, 0): receding horizon H = {args.horizon}, "
          f"re-solved every dt = {args.dt} ({steps} steps), {how}")
    if args.sweep:
        out = receding_horizon_sweep(pb, [1.0, 0.0], steps, args.dt, args.horizon, args.order)
    else:
        out = receding_horizon(pb, [1.0, 0.0], steps, args.dt, args.horizon, args.intervals)
        print(f"OCPSolver built in {out['build']:.3f} s")
    print("\n     t        z1        z2    u(t_k)   V window  J window  check  solve wall [s]  "
          "solve CPU [s]  simulate [s]" + ("" if args.sweep else "  iterations"))
    for r in out["records"]:
        J = f"{r['J']:8.5f}" if np.isfinite(r["J"]) else f"{'-':>8}"      # the sweep's only
        print(f"  {r['t']:4.2f}  {r['z'][0]:8.4f}  {r['z'][1]:8.4f}  {r['u']:8.4f}  "
              f"{r['V']:8.5f}  {J}  {'ok' if r['ok'] else 'no':>5}  "
              f"{r['solve']:14.3f}  {r['cpu']:13.3f}  {r['sim']:12.3f}"
              + ("" if args.sweep else f"  {r['nit']:3d} {'warm' if r['warm'] else 'cold'}"))
    for what in ("solve", "cpu"):
        times = np.array([r[what] for r in out["records"]])
        first = "code generation included" if args.sweep else "cold"
        print(f"{'re-solve wall' if what == 'solve' else 're-solve CPU'} time per step: median "
              f"{np.median(times):.3f} s, first {times[0]:.3f} s ({first}), "
              f"max {times.max():.3f} s; total {times.sum():.2f} s")
    T = steps * args.dt
    print(f"true cost of the loop over [0, {T:g}]: {out['total']:.5f}")
    if args.full:
        print(f"published open-loop optimum over [0, 5]: {PUBLISHED} "
              f"(the loop costs {out['total'] / PUBLISHED:.4f} times it)")
        # any admissible control costs at least the optimum
        assert out["total"] >= PUBLISHED - 1e-3
    assert all(np.isfinite(r["V"]) and r["ok"] for r in out["records"])
    assert np.all(np.abs(out["z_end"]) < 10.0)


if __name__ == "__main__":
    main()
