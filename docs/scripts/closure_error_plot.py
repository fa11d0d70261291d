"""The jet closure's error against depth for orders K = 1..4 (docs/closure-error.md).

A damped pendulum driven by a constant torque ``u``, from sympy (exact derivatives of
every order),

    d phi / dt = v,   d v / dt = -sin(phi) - c v + u,
    R = a (1 - cos phi) + rho u^2 / 2,

at ``x = (0.5, 0.5)``, ``u = 0.5``, with two terminal losses:

* ``T = 1 - cos(phi - 2.5) + v^2 / 2``: every derivative of ``T`` is non-zero, so
  ``D^(K+2) T != 0`` and the adjoint's error is one order lower than the others';
* ``T = ((phi - 2.5)^2 + v^2) / 2``: quadratic, ``D^(K+2) T = 0`` for every ``K >= 1``.

For each, ``solve_imbedding(closure="jet", order=K)`` for K = 1..4 at 15 depths
``s = q - p`` from 0.02 to 1.6 (one sweep each, ``rtol=1e-12``, ``atol=1e-14``) is
compared with ``solve_adjoint(rtol=1e-12, atol=1e-14)``, depth by depth.

Written: ``docs/img/closure_error.png`` (log-log error against ``s``, one panel per
field and terminal loss, the fitted slopes in the legends). Printed, as Markdown (pasted
into docs/closure-error.md): the fitted slopes against the error law, the error
estimate over the true error, and the error and cost of each order at a few depths.

Slopes are least-squares fits of ``log(error)`` against ``log(s)`` over the five
smallest depths at which the error is above ``1e-11`` (below that the integrators' own
error shows): the asymptotic slope, as far as the integrators let us see it.

Run from the repository root:  python docs/scripts/closure_error_plot.py  (about 30 s)
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import sympy as sp

import invimbed

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img" / "closure_error.png"
S = np.geomspace(0.02, 1.6, 15)
ORDERS = (1, 2, 3, 4)
FIELDS = ("z", "value", "adjoint")
N_FIT, FLOOR = 5, 1e-11
TOL = dict(rtol=1e-12, atol=1e-14)
X = np.array([0.5, 0.5])
U = invimbed.Constant([0.5])
C, A, RHO, TARGET = 0.1, 0.1, 0.05, 2.5


def pendulum(terminal: str) -> invimbed.BolzaProblem:
    t, phi, v, u = sp.symbols("t phi v u")
    if terminal == "cos":
        T = 1 - sp.cos(phi - TARGET) + v ** 2 / 2
    else:
        T = ((phi - TARGET) ** 2 + v ** 2) / 2
    return invimbed.from_sympy(t, [phi, v], [u], [v, -sp.sin(phi) - C * v + u],
                               A * (1 - sp.cos(phi)) + RHO * u ** 2 / 2, T)


def expected(field: str, K: int, terminal: str) -> int:
    """The error law (invimbed/_core/closures/jet.py): z O(s^(K+2)); with D^(K+2) T != 0,
    adjoint O(s^(K+1)) and value O(s^(K+2)); with D^(K+2) T = 0 one order more each."""
    extra = 0 if terminal == "cos" else 1
    return {"z": K + 2, "value": K + 2 + extra, "adjoint": K + 1 + extra}[field]


def max_abs(a: np.ndarray) -> np.ndarray:
    return np.abs(a).reshape(len(S), -1).max(1)


def fitted(err: np.ndarray) -> np.ndarray:
    """Indices of the depths a slope is fitted over."""
    return np.flatnonzero(err > FLOOR)[:N_FIT]


def fit(err: np.ndarray) -> float:
    use = fitted(err)
    if use.size < 3:
        return float("nan")
    return float(np.polyfit(np.log(S[use]), np.log(err[use]), 1)[0])


def run(terminal: str) -> dict:
    problem = pendulum(terminal)
    ref = invimbed.solve_adjoint(problem, X, -S, control=U, **TOL)
    assert ref.success, ref.message
    out = {"ref": ref}
    for K in ORDERS:
        invimbed.solve_imbedding(problem, X, [-0.1], control=U, order=K)   # generate code
        t0 = time.perf_counter()
        res = invimbed.solve_imbedding(problem, X, -S, control=U, order=K, **TOL)
        elapsed = time.perf_counter() - t0
        assert res.success, res.message
        t0 = time.perf_counter()
        fast = invimbed.solve_imbedding(problem, X, -S, control=U, order=K,
                                        estimate_error=False, **TOL)
        elapsed_fast = time.perf_counter() - t0
        assert fast.success, fast.message
        out[K] = {
            "res": res, "time": elapsed, "time_fast": elapsed_fast, "nfev": res.nfev,
            "err": {f: max_abs(res[f] - ref[f]) for f in FIELDS},
            "est": {f: max_abs(res.error_estimate[f]) for f in FIELDS},
            # estimate_error changes nothing but the cost
            "same": max(float(np.abs(fast[f] - res[f]).max()) for f in FIELDS),
        }
    return out


def plot(runs: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {1: "C0", 2: "C1", 3: "C2", 4: "C3"}
    titles = {"cos": r"$T = 1 - \cos(\varphi - 2.5) + v^2/2$",
              "quad": r"$T = ((\varphi - 2.5)^2 + v^2)/2$"}
    fig, axes = plt.subplots(2, 3, figsize=(13, 8), sharex=True)
    for row, terminal in enumerate(("cos", "quad")):
        for col, field in enumerate(FIELDS):
            ax = axes[row, col]
            for K in ORDERS:
                err = runs[terminal][K]["err"][field]
                shown = np.where(err > 0, err, np.nan)     # exact zeros: no point
                ax.loglog(S, shown, ".-", ms=4, lw=1.2, color=colours[K],
                          label=f"K={K}: slope {fit(err):.2f} "
                                f"(law {expected(field, K, terminal)})")
                use = fitted(err)
                ax.loglog(S[use], err[use], "o", ms=6, color=colours[K])
            ax.axhline(FLOOR, color="0.6", lw=0.8, ls=":")
            ax.set_title(f"{field}, {titles[terminal]}", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
            if row == 1:
                ax.set_xlabel("depth s = q - p")
            if col == 0:
                ax.set_ylabel("|imbedding - solve_adjoint|")
    fig.suptitle("Jet closure of order K on a forced, damped pendulum: error against depth "
                 f"(slopes fitted over the large dots: the {N_FIT} smallest depths with error > "
                 f"{FLOOR:g}, dotted)", fontsize=11)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT.relative_to(ROOT)}\n")


def main() -> int:
    print(f"Python {platform.python_version()}, numpy {np.__version__}, scipy "
          f"{scipy.__version__}, sympy {sp.__version__}, invimbed {invimbed.__version__}, "
          f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs\n")
    runs = {terminal: run(terminal) for terminal in ("cos", "quad")}
    plot(runs)

    print(f"Fitted log-log slopes of the error in s (the {N_FIT} smallest depths with an "
          f"error above {FLOOR:g}), and the "
          "error law's exponent:\n")
    print("| terminal loss | K | z | value | adjoint |")
    print("|---|---|---|---|---|")
    for terminal, label in (("cos", "`1 - cos`"), ("quad", "quadratic")):
        for K in ORDERS:
            cells = [f"{fit(runs[terminal][K]['err'][f]):.2f} ({expected(f, K, terminal)})"
                     for f in FIELDS]
            print(f"| {label} | {K} | " + " | ".join(cells) + " |")
    print()

    pick = [int(np.argmin(np.abs(S - s))) for s in (0.05, 0.2, 0.5, 1.0, 1.6)]
    print("`error_estimate / true error` (largest entries), `1 - cos` terminal loss:\n")
    print("| s | " + " | ".join(f"K={K} {f}" for K in ORDERS for f in FIELDS) + " |")
    print("|---" * (1 + len(ORDERS) * len(FIELDS)) + "|")
    for i in pick:
        cells = []
        for K in ORDERS:
            for f in FIELDS:
                e, est = runs["cos"][K]["err"][f][i], runs["cos"][K]["est"][f][i]
                cells.append(f"{est / e:.2f}" if e > FLOOR else "-")

        print(f"| {S[i]:.3g} | " + " | ".join(cells) + " |")
    errs = np.array([runs[t][K]["err"][f] for t in runs for K in ORDERS for f in FIELDS])
    ests = np.array([runs[t][K]["est"][f] for t in runs for K in ORDERS for f in FIELDS])
    ok = errs > FLOOR
    ratios = np.where(ok, ests / np.where(ok, errs, 1.0), np.nan)
    small = ok & (S[None, :] <= 0.5)
    labels = [(t, K, f) for t in runs for K in ORDERS for f in FIELDS]

    def where(flat_index: int) -> str:
        row, col = divmod(int(flat_index), len(S))
        t, K, f = labels[row]
        return f"{t} T, K={K}, {f}, s={S[col]:.3g}"

    lo, hi = np.nanargmin(ratios), np.nanargmax(ratios)
    print(f"\nOver both terminal losses, K = 1..4, the three fields and the depths with an "
          f"error above {FLOOR:g}: estimate / error in [{ratios[ok].min():.2f}, "
          f"{ratios[ok].max():.2f}] (lowest: {where(lo)}; highest: {where(hi)}); for "
          f"s <= 0.5 in [{ratios[small].min():.2f}, {ratios[small].max():.2f}].\n")

    print("Largest error over z, value and adjoint, its estimate, and the cost of the sweep "
          "(all 15 depths), `1 - cos` terminal loss:\n")
    cols = [int(np.argmin(np.abs(S - s))) for s in (0.2, 0.5, 1.0)]
    print(f"| K | s = {S[cols[0]]:.3g}: error / estimate | s = {S[cols[1]]:.3g} | "
          f"s = {S[cols[2]]:.3g} | nfev | time with estimate | time without |")
    print("|---|---|---|---|---|---|---|")
    for K in ORDERS:
        r = runs["cos"][K]
        cells = []
        for i in cols:
            e = max(r["err"][f][i] for f in FIELDS)
            est = max(r["est"][f][i] for f in FIELDS)
            cells.append(f"{e:.1e} / {est:.1e}")
        print(f"| {K} | " + " | ".join(cells) + f" | {r['nfev']} | {r['time']:.2f} s | "
              f"{r['time_fast']:.2f} s |")
    same = max(runs[t][K]["same"] for t in runs for K in ORDERS)
    print(f"\n(`estimate_error=False` changes the results by at most {same:.1e}; only the "
          f"cost differs. Times are wall-clock, rtol = 1e-12.)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
