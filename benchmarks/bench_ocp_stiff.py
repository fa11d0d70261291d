"""Stiff intervals: `solve_ocp(transcription="collocation")` against CasADi's Radau
collocation + IPOPT on the hypersensitive problem (docs/optimal-control.md, "Stiff
intervals: Radau collocation").

    x' = -x^3 + u,   J = int_0^tf (x^2 + u^2) / 2 dt,   x(0) = 1.5,   x(tf) = 1,   tf = 10^4.

Both sides solve the SAME discrete problem: Radau IIA collocation of degree 3 (CasADi's
``direct_collocation`` example: ``collocation_points(3, "radau")``, the state a cubic on
each interval, the control constant on it, the cost by the collocation quadrature),
exact first and second derivatives, IPOPT (tol 1e-6 on both sides; invimbed's result
then passes its own KKT check too). Rows:

- ``100 equal``: 100 intervals of length 100, as a user first writes it. The discrete
  problem has two local optima (J = 107.3642 and 107.4879): each side is started from
  the same point, twice: ``zeros`` (CasADi's example: every state 0 but the two ends,
  controls 0) and ``line`` (`solve_ocp`'s default: the straight line from x(0) to
  x(tf), controls 0).
- ``docs' grid``: the grid of ``examples/ocp_hypersensitive.py`` (K = 164, geometric
  towards both ends), from the straight line.

Timed (best of ``--repeats``, the two sides in turn): CasADi's build (its expression
graph and ``nlpsol``) plus its solve, and its solve alone; invimbed's whole call,
`from_sympy` (a new problem every call; the code it generates is cached in the process
after the untimed first call of each side) and ``solve_ocp``. The ratio is invimbed's
time over CasADi's build + solve (target <= 3), and over its solve alone. J difference
target <= 1e-4.

Run:  python benchmarks/bench_ocp_stiff.py [--repeats R]
"""

from __future__ import annotations

import time

import numpy as np

from _machine import alternating, arguments, header

X0, X1, TF, DEGREE = 1.5, 1.0, 1e4, 3


def docs_grid() -> np.ndarray:
    """``examples/ocp_hypersensitive.grid()``: interval lengths 0.01 * 1.3^i from both
    ends up to 100, the middle in equal intervals of at most 100 (K = 164)."""
    lengths = [0.01]
    while lengths[-1] * 1.3 < 100.0:
        lengths.append(lengths[-1] * 1.3)
    left = np.concatenate([[0.0], np.cumsum(lengths)])
    middle = np.linspace(left[-1], TF - left[-1],
                         int(np.ceil((TF - 2 * left[-1]) / 100.0)) + 1)
    return np.unique(np.concatenate([left, middle, TF - left]))


def start_nodes(grid: np.ndarray, start: str) -> np.ndarray:
    """The node states of a start: ``zeros`` (the ends fixed) or the straight ``line``."""
    if start == "zeros":
        S = np.zeros(grid.size)
        S[0], S[-1] = X0, X1
        return S
    return X0 + (grid - grid[0]) / (grid[-1] - grid[0]) * (X1 - X0)


def casadi_solve(grid: np.ndarray, start: str) -> tuple[float, int, float, float]:
    """CasADi's collocation NLP on ``grid`` from ``start``: ``(J, iterations, build
    seconds, solve seconds)``. For ``line`` the collocation states start at their
    interval's end node, as `solve_ocp`'s do; for ``zeros`` at 0 (CasADi's example)."""
    import casadi as ca
    t0 = time.perf_counter()
    K = grid.size - 1
    tau = np.append(0, ca.collocation_points(DEGREE, "radau"))
    C, B = np.zeros((DEGREE + 1, DEGREE + 1)), np.zeros(DEGREE + 1)
    for j in range(DEGREE + 1):
        poly = np.poly1d([1.0])
        for r in range(DEGREE + 1):
            if r != j:
                poly *= np.poly1d([1, -tau[r]]) / (tau[j] - tau[r])
        C[j], B[j] = np.polyder(poly)(tau), np.polyint(poly)(1.0)
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    f = ca.Function("f", [x, u], [-x ** 3 + u, (x ** 2 + u ** 2) / 2])
    nodes = start_nodes(grid, start)
    w, w0, lbw, ubw, g, J = [], [], [], [], [], 0
    Xk = ca.MX.sym("X0")
    w, w0, lbw, ubw = [Xk], [X0], [X0], [X0]
    for k in range(K):
        h = grid[k + 1] - grid[k]
        Uk = ca.MX.sym(f"U{k}")
        w += [Uk]; w0 += [0.0]; lbw += [-np.inf]; ubw += [np.inf]          # noqa: E702
        Xc = [ca.MX.sym(f"X{k}_{j}") for j in range(DEGREE)]
        for Xkj in Xc:
            w += [Xkj]; lbw += [-np.inf]; ubw += [np.inf]                  # noqa: E702
            w0 += [0.0 if start == "zeros" else nodes[k + 1]]
        for j in range(1, DEGREE + 1):
            slope = C[0, j] * Xk + sum(C[r + 1, j] * Xc[r] for r in range(DEGREE))
            fj, qj = f(Xc[j - 1], Uk)
            g.append(h * fj - slope)
            J = J + B[j] * qj * h
        Xk = ca.MX.sym(f"X{k + 1}")
        w += [Xk]; w0 += [nodes[k + 1]]                                     # noqa: E702
        lbw += [X1 if k == K - 1 else -np.inf]; ubw += [X1 if k == K - 1 else np.inf]  # noqa: E702
        g.append(Xc[-1] - Xk)                   # Radau: the last point is the end
    solver = ca.nlpsol("S", "ipopt", {"f": J, "x": ca.vertcat(*w), "g": ca.vertcat(*g)},
                       {"print_time": False, "ipopt.print_level": 0, "ipopt.sb": "yes",
                        "ipopt.tol": 1e-6})
    t1 = time.perf_counter()
    sol = solver(x0=w0, lbx=lbw, ubx=ubw, lbg=0, ubg=0)
    t2 = time.perf_counter()
    stats = solver.stats()
    if not stats["success"]:
        raise RuntimeError(f"CasADi: {stats['return_status']}")
    return float(sol["f"]), int(stats["iter_count"]), t1 - t0, t2 - t1


def invimbed_solve(grid: np.ndarray, start: str):
    """`from_sympy` and `solve_ocp(transcription="collocation")` from ``start`` (``line``:
    no `initial_guess`, the default)."""
    import sympy as sp
    import invimbed
    t, x, u = sp.symbols("t x u")
    problem = invimbed.from_sympy(t, [x], [u], [-x ** 3 + u], (x ** 2 + u ** 2) / 2, q=TF)
    guess = None
    if start == "zeros":
        guess = {"states": start_nodes(grid, start)[:, None],
                 "controls": np.zeros((grid.size - 1, 1))}
    return invimbed.solve_ocp(problem, [X0], grid=grid, final_state=[X1],
                              transcription="collocation", collocation_degree=DEGREE,
                              initial_guess=guess)


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, repeats=3)
    args = ap.parse_args(argv)
    print(header("casadi", "cyipopt", argv=argv))
    rows = [("100 equal", np.linspace(0.0, TF, 101), "zeros"),
            ("100 equal", np.linspace(0.0, TF, 101), "line"),
            ("docs' grid", docs_grid(), "line")]
    print(f"\n{'grid':>10} {'K':>4} {'start':>5} | {'J casadi':>14} {'J invimbed':>14} "
          f"{'|dJ|':>8} | {'it':>3} {'it':>3} | {'casadi build+solve (solve)':>26} "
          f"{'invimbed':>8} | {'ratio':>5} {'vs solve':>8} | success")
    for name, grid, start in rows:
        out: dict = {}

        def cas(grid=grid, start=start):
            out["cas"] = casadi_solve(grid, start)
            out.setdefault("cas_solve", []).append(out["cas"][3])

        def ours(grid=grid, start=start):
            out["ours"] = invimbed_solve(grid, start)

        cas()
        ours()                                  # warm the imports of both
        out["cas_solve"] = []
        t_cas, t_ours = alternating([cas, ours], [1, 1], args.repeats)
        J_c, it_c, _, _ = out["cas"]
        res = out["ours"]
        s_cas = min(out["cas_solve"])
        print(f"{name:>10} {grid.size - 1:4d} {start:>5} | {J_c:14.8f} {res.fun:14.8f} "
              f"{abs(res.fun - J_c):8.1e} | {it_c:3d} {res.nit:3d} | "
              f"{t_cas:17.3f} s ({s_cas:.3f}) {t_ours:7.3f}s | {t_ours / t_cas:5.2f} "
              f"{t_ours / s_cas:8.2f} | {bool(res.success)}")


if __name__ == "__main__":
    main()
