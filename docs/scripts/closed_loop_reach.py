"""How far the sweep's feedback reaches on nonlinear problems: docs/optimal-control.md.

For each problem, one `solve_optimal` call over depths spread up to the problem's
horizon (jet order 2: ``--order``, default 2, where `solve_optimal`'s own default is 1;
default tolerances, the closed-loop check on, a time budget of
``--max-time`` seconds) and a table per depth: the sweep's value ``V``, the true cost ``J``
of its own feedback simulated from ``x`` (``closed_loop_value``), whether the depth is
converged, and the deepest horizon reached. Problems (written from the literature):

* Rayleigh (Maurer & Augustin), tf = 2.5: ``x1' = x2``,
  ``x2' = -x1 + x2 (1.4 - 0.14 x2^2) + 4 u``, ``J = int x1^2 + u^2``, ``x0 = (-5, -5)``;
  published optimum 29.376 (horizon 2.5).
* Van der Pol, tf = 5, ``-0.3 <= u <= 1``: ``x1' = x2``, ``x2' = -x1 + (1 - x1^2) x2 + u``,
  ``J = int x1^2 + x2^2 + u^2``, ``x0 = (1, 0)``; published optimum 2.8673.
* hypersensitive (Rao & Mease, the ends swapped), ``x' = -x^3 + u``,
  ``J = int (x^2 + u^2) / 2``, ``x0 = 1.5``; the end condition ``x(tf) = 1`` as a
  terminal penalty ``50 (x - 1)^2`` (horizons up to 10 here). Rao & Mease run from
  ``x(0) = 1`` to ``x(tf) = 1.5``, published optimum 3.3621 at tf = 10^4; with the ends as
  here the optimum at tf = 10^4 is about 1.3308 (docs/scripts/hypersensitive_ends.py).

Run from the repository root:  python docs/scripts/closed_loop_reach.py [--max-time 120]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp

import invimbed


def rayleigh():
    t, x1, x2, u = sp.symbols("t x1 x2 u")
    pb = invimbed.from_sympy(t, [x1, x2], [u], [x2, -x1 + x2 * (1.4 - 0.14 * x2**2) + 4 * u],
                             running_loss=x1**2 + u**2)
    return "Rayleigh", pb, [-5.0, -5.0], 2.5, {}, 29.376


def van_der_pol():
    t, x1, x2, u = sp.symbols("t x1 x2 u")
    pb = invimbed.from_sympy(t, [x1, x2], [u], [x2, -x1 + (1 - x1**2) * x2 + u],
                             running_loss=x1**2 + x2**2 + u**2)
    return ("Van der Pol, -0.3 <= u <= 1", pb, [1.0, 0.0], 5.0,
            {"control_bounds": [[-0.3, 1.0]], "control_affine": True}, 2.8673)


def hypersensitive():
    t, x, u = sp.symbols("t x u")
    pb = invimbed.from_sympy(t, [x], [u], [-x**3 + u], running_loss=(x**2 + u**2) / 2,
                             terminal_loss=50 * (x - 1)**2)
    return "hypersensitive (penalty 50 (x - 1)^2)", pb, [1.5], 10.0, {"control_affine": True}, None


def run(case, order: int, n_depths: int, max_time: float) -> None:
    name, pb, x, horizon, kw, published = case()
    depths = -np.linspace(horizon / n_depths, horizon, n_depths)
    t0 = time.perf_counter()
    res = invimbed.solve_optimal(pb, x, depths, n_controls=1, order=order, max_time=max_time,
                                 **kw)
    wall = time.perf_counter() - t0
    conv = np.asarray(res.converged, dtype=bool)
    reached = np.isfinite(res.value)
    deepest = -float(depths[reached].min()) if reached.any() else 0.0
    good = -float(depths[conv].min()) if conv.any() else 0.0
    print(f"\n{name}: x = {x}, jet order {order}, {n_depths} depths up to horizon {horizon}"
          + (f" (published optimum {published} at the full horizon)" if published else ""))
    print(f"  {wall:.1f} s; status {res.status}: {res.message[:240]}")
    print(f"  horizon reached by the sweep: {deepest:.4g}; converged (estimate and closed-loop "
          f"check) up to: {good:.4g}")
    print("       s      V sweep   J closed loop   |J - V| / max(1, |V|)  converged")
    for p, V, J, c in zip(depths, res.value, res.closed_loop_value, conv):
        if np.isfinite(V):
            print(f"  {-p:6.3g}  {V:11.6g}  {J:14.6g}  {abs(J - V) / max(1.0, abs(V)):22.3g}  {c}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-time", type=float, default=120.0)
    ap.add_argument("--order", type=int, default=2)
    ap.add_argument("--depths", type=int, default=10)
    ap.add_argument("--only", choices=("rayleigh", "van_der_pol", "hypersensitive"))
    args = ap.parse_args()
    for case in (rayleigh, van_der_pol, hypersensitive):
        if args.only and case.__name__ != args.only:
            continue
        run(case, args.order, args.depths, args.max_time)


if __name__ == "__main__":
    main()
