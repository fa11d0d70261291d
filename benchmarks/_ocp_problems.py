"""Optimal-control problems that the OCP benchmarks share, each written once and built
for both sides: `invimbed.solve_ocp` / `invimbed.OCPSolver`, and CasADi 3.8 + IPOPT.

Not a benchmark itself: ``benchmarks/bench_ocp.py`` (and any other script that measures
these problems) imports it as ``import _ocp_problems`` (the script's own folder being on
``sys.path``).

A problem is a `Spec`: the dynamics, the losses and the constraints written once as
functions of ``(z, u, ops)``, ``ops`` the module whose ``exp``, ``sin``, ``cos`` they
use (``sympy`` for invimbed's `from_sympy`, ``casadi`` for CasADi, ``numpy`` for
simulating and for invimbed's path constraints). Every problem here is autonomous.

- `GODDARD`: the Goddard rocket as in the COPS collection (Dolan, More & Munson 2004,
  problem "rocket"), free final time, maximise the final altitude; published
  ``h(tf) = 1.0128`` (so ``J = -1.0128``).
- `CART_POLE`: the cart-pole swing-up of Kelly (2017, SIAM Review 59(4), section 6),
  ``min int u^2``, ``T = 2``, the cart ``|x| <= 2``, ``|u| <= 20``.
- `OBSTACLE`, `OBSTACLE_INFEASIBLE`: a 2-D double integrator from rest at the origin to
  rest at ``(10, 0)`` in ``T = 5``, around a disc of radius 1.5 centred at ``(5, 1)``
  (a path constraint at the nodes), ``min int |a|^2 / 2``, ``|a_i| <= 4``; the
  infeasible one has its target at the disc's centre.
- `VDP_MPC`: the Van der Pol window of ``examples/receding_horizon.py``: ``H = 1``, 20
  intervals, ``-0.3 <= u <= 1``, ``J = int z1^2 + z2^2 + u^2``; the loop re-solves every
  ``dt = 0.25`` (5 intervals) from ``z(0) = (1, 0)`` over ``[0, 5]`` (20 re-solves).

Both sides solve the same transcription: ``K`` intervals with the control constant on
each, the node states as variables (multiple shooting), path constraints at the nodes,
the same start (the straight line from ``x0`` to the target, controls 0 clipped into
their bounds, the spec's horizon). invimbed integrates every interval adaptively (RK45,
rtol 1e-8, atol 1e-10); CasADi takes 10 RK4 steps per interval and exact Hessians by
algorithmic differentiation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import invimbed
from invimbed._control.ocp.solvers import WARM_START


@dataclass
class Spec:
    """One optimal-control problem, written once (autonomous dynamics)."""

    name: str
    n: int
    m: int
    x0: list
    horizon: float                               # T, or the guess of a free one
    dynamics: Callable                           # (z, u, ops) -> list of n expressions
    running: Callable | None = None              # (z, u, ops) -> expression
    terminal: Callable | None = None             # (z, ops) -> expression
    control_bounds: tuple = (None, None)         # (lo, hi): scalars or length m
    state_bounds: tuple | None = None            # (lo, hi) at the nodes, length n
    final_state: list | None = None              # NaN entries free
    path: Callable | None = None                 # (z, u, ops) -> list, each <= 0
    free_horizon: bool = False
    horizon_bounds: tuple | None = None
    intervals: int = 20
    published: float | None = None               # a published optimum of J
    notes: dict = field(default_factory=dict)


# -- the problems -----------------------------------------------------------------------
_G = dict(h0=1.0, v0=0.0, m0=1.0, g0=1.0, Tc=3.5, hc=500.0, vc=620.0, mc=0.6)
_G["c"] = 0.5 * np.sqrt(_G["g0"] * _G["h0"])
_G["mf"] = _G["mc"] * _G["m0"]
_G["Dc"] = 0.5 * _G["vc"] * _G["m0"] / _G["g0"]
_G["Tmax"] = _G["Tc"] * _G["g0"] * _G["m0"]


def _goddard(z, u, ops):
    h, v, m = z[0], z[1], z[2]
    drag = _G["Dc"] * v ** 2 * ops.exp(-_G["hc"] * (h - _G["h0"]) / _G["h0"])
    grav = _G["g0"] * (_G["h0"] / h) ** 2
    return [v, (u[0] - drag) / m - grav, -u[0] / _G["c"]]


GODDARD = Spec(
    name="goddard", n=3, m=1, x0=[_G["h0"], _G["v0"], _G["m0"]], horizon=0.2,
    dynamics=_goddard, terminal=lambda z, ops: -z[0],
    control_bounds=(0.0, _G["Tmax"]),
    state_bounds=([_G["h0"], 0.0, _G["mf"]], [np.inf, np.inf, _G["m0"]]),
    final_state=[np.nan, np.nan, _G["mf"]], free_horizon=True,
    horizon_bounds=(1e-3, None), intervals=100, published=-1.0128)

_C = dict(m1=1.0, m2=0.3, l=0.5, g=9.81)


def _cart_pole(z, u, ops):
    th, dth = z[1], z[3]
    s, c = ops.sin(th), ops.cos(th)
    m1, m2, l, g = _C["m1"], _C["m2"], _C["l"], _C["g"]
    ddx = (l * m2 * s * dth ** 2 + u[0] + m2 * g * c * s) / (m1 + m2 * (1 - c ** 2))
    ddth = -(l * m2 * c * s * dth ** 2 + u[0] * c + (m1 + m2) * g * s) / (
        l * m1 + l * m2 * (1 - c ** 2))
    return [z[2], z[3], ddx, ddth]


CART_POLE = Spec(
    name="cart-pole", n=4, m=1, x0=[0.0, 0.0, 0.0, 0.0], horizon=2.0, dynamics=_cart_pole,
    running=lambda z, u, ops: u[0] ** 2, control_bounds=(-20.0, 20.0),
    state_bounds=([-2.0, -np.inf, -np.inf, -np.inf], [2.0, np.inf, np.inf, np.inf]),
    final_state=[1.0, np.pi, 0.0, 0.0], intervals=40)

_O = dict(cx=5.0, cy=1.0, r=1.5)


def _obstacle_path(z, u, ops):
    return [_O["r"] ** 2 - (z[0] - _O["cx"]) ** 2 - (z[1] - _O["cy"]) ** 2]


OBSTACLE = Spec(
    name="obstacle", n=4, m=2, x0=[0.0, 0.0, 0.0, 0.0], horizon=5.0,
    dynamics=lambda z, u, ops: [z[2], z[3], u[0], u[1]],
    running=lambda z, u, ops: 0.5 * (u[0] ** 2 + u[1] ** 2), control_bounds=(-4.0, 4.0),
    final_state=[10.0, 0.0, 0.0, 0.0], path=_obstacle_path, intervals=40)

OBSTACLE_INFEASIBLE = Spec(
    name="obstacle-infeasible", n=4, m=2, x0=[0.0, 0.0, 0.0, 0.0], horizon=5.0,
    dynamics=OBSTACLE.dynamics, running=OBSTACLE.running, control_bounds=(-4.0, 4.0),
    final_state=[_O["cx"], _O["cy"], 0.0, 0.0], path=_obstacle_path, intervals=40)

VDP_MPC = Spec(
    name="vdp-mpc", n=2, m=1, x0=[1.0, 0.0], horizon=1.0,
    dynamics=lambda z, u, ops: [z[1], -z[0] + (1 - z[0] ** 2) * z[1] + u[0]],
    running=lambda z, u, ops: z[0] ** 2 + z[1] ** 2 + u[0] ** 2,
    control_bounds=(-0.3, 1.0), intervals=20,
    notes=dict(dt=0.25, steps=20, shift=5))

PROBLEMS = {s.name: s for s in (GODDARD, CART_POLE, OBSTACLE, OBSTACLE_INFEASIBLE, VDP_MPC)}


# -- invimbed ---------------------------------------------------------------------------
def invimbed_problem(spec: Spec) -> invimbed.BolzaProblem:
    """The `invimbed.BolzaProblem` of ``spec`` by `invimbed.from_sympy` (exact
    derivatives), on ``[0, spec.horizon]``."""
    import sympy as sp
    t = sp.Symbol("t")
    z = list(sp.symbols(f"z0:{spec.n}"))
    u = list(sp.symbols(f"u0:{spec.m}"))
    kw: dict[str, Any] = {}
    if spec.running is not None:
        kw["running_loss"] = spec.running(z, u, sp)
    if spec.terminal is not None:
        kw["terminal_loss"] = spec.terminal(z, sp)
    return invimbed.from_sympy(t, z, u, spec.dynamics(z, u, sp), q=spec.horizon, **kw)


def invimbed_plain_problem(spec: Spec) -> invimbed.BolzaProblem:
    """The `invimbed.BolzaProblem` of ``spec`` written as plain vectorised numpy
    functions (``vectorized=True``), as a user writes it without sympy: its derivatives
    traced (`invimbed.BolzaProblem`, ``derivatives="auto"``), its rows compiled as the
    `invimbed_problem` twin's where the trace succeeds."""
    def f(t, z, u):
        return np.stack(spec.dynamics(z.T, u.T, np), axis=1)

    kw: dict[str, Any] = {}
    if spec.running is not None:
        kw["running_loss"] = lambda t, z, u: spec.running(z.T, u.T, np)
    if spec.terminal is not None:
        kw["terminal_loss"] = lambda z: spec.terminal(z.T, np)
    return invimbed.BolzaProblem(f, q=spec.horizon, vectorized=True, **kw)


def invimbed_options(spec: Spec, intervals: int | None = None) -> dict:
    """The keyword arguments of `invimbed.solve_ocp` (and `invimbed.OCPSolver`) for
    ``spec`` on ``intervals`` equal intervals (the spec's own by default)."""
    kw: dict[str, Any] = dict(p=0.0, intervals=intervals or spec.intervals,
                              n_controls=spec.m, control_bounds=spec.control_bounds)
    if spec.state_bounds is not None:
        kw["state_bounds"] = spec.state_bounds
    if spec.final_state is not None:
        kw["final_state"] = spec.final_state
    if spec.path is not None:
        kw["path_constraints"] = lambda t, z, u: np.array(spec.path(z, u, np), dtype=float)
    if spec.free_horizon:
        kw["free_horizon"] = True
        kw["horizon_bounds"] = spec.horizon_bounds
    return kw


def solve_invimbed(spec: Spec, intervals: int | None = None, **kwargs: Any):
    """`invimbed.solve_ocp` on ``spec`` (the problem built anew, as a user would)."""
    return invimbed.solve_ocp(invimbed_problem(spec), spec.x0,
                              **{**invimbed_options(spec, intervals), **kwargs})


# -- CasADi -----------------------------------------------------------------------------
def _bounds(pair, size: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = pair
    lo = np.full(size, -np.inf) if lo is None else np.broadcast_to(
        np.asarray(lo, dtype=float), (size,)).copy()
    hi = np.full(size, np.inf) if hi is None else np.broadcast_to(
        np.asarray(hi, dtype=float), (size,)).copy()
    return lo, hi


class CasadiOCP:
    """``spec`` transcribed for CasADi's ``nlpsol`` (IPOPT, exact Hessian), built once:
    ``w = (u_0, s_1, u_1, s_2, ..., s_K[, H])`` as invimbed orders it, the initial state
    a parameter; `solve` from any initial state, warm-started (primal and multipliers,
    IPOPT's ``warm_start_init_point``) where given a previous solution."""

    def __init__(self, spec: Spec, intervals: int | None = None, *, rk4_steps: int = 10,
                 ipopt_options: dict | None = None) -> None:
        import casadi as ca
        self.spec = spec
        n, m = spec.n, spec.m
        K = self.K = intervals or spec.intervals
        free = spec.free_horizon
        self.n_vars = K * (n + m) + int(free)
        w = ca.SX.sym("w", self.n_vars)
        x0 = ca.SX.sym("x0", n)
        H = w[-1] if free else spec.horizon
        z, u, hs = ca.SX.sym("z", n), ca.SX.sym("u", m), ca.SX.sym("h")
        zero = ca.SX(0) if spec.running is None else None
        rhs = ca.Function("rhs", [z, u], [ca.vertcat(*spec.dynamics(z, u, ca)),
                                          spec.running(z, u, ca) if zero is None else zero])
        zz, c, dt = z, 0, hs / rk4_steps
        for _ in range(rk4_steps):
            k1, q1 = rhs(zz, u)
            k2, q2 = rhs(zz + dt / 2 * k1, u)
            k3, q3 = rhs(zz + dt / 2 * k2, u)
            k4, q4 = rhs(zz + dt * k3, u)
            zz = zz + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            c = c + dt / 6 * (q1 + 2 * q2 + 2 * q3 + q4)
        step = ca.Function("step", [z, u, hs], [zz, c])
        blk = n + m
        U = [w[k * blk:k * blk + m] for k in range(K)]
        S = [x0] + [w[k * blk + m:(k + 1) * blk] for k in range(K)]
        J, g, lbg, ubg = 0, [], [], []
        for k in range(K):
            end, cost = step(S[k], U[k], H / K)
            J = J + cost
            g.append(S[k + 1] - end)
            lbg += [0.0] * n
            ubg += [0.0] * n
        if spec.terminal is not None:
            J = J + spec.terminal(S[K], ca)
        if spec.final_state is not None:
            for i, v in enumerate(spec.final_state):
                if not np.isnan(v):
                    g.append(S[K][i])
                    lbg.append(v)
                    ubg.append(v)
        if spec.path is not None:
            for k in range(K + 1):
                for expr in spec.path(S[k], U[min(k, K - 1)], ca):
                    g.append(expr)
                    lbg.append(-np.inf)
                    ubg.append(0.0)
        self.lbg, self.ubg = np.array(lbg), np.array(ubg)
        u_lo, u_hi = _bounds(spec.control_bounds, m)
        x_lo, x_hi = (_bounds(spec.state_bounds, n) if spec.state_bounds is not None else
                      (np.full(n, -np.inf), np.full(n, np.inf)))
        lbx, ubx = np.empty(self.n_vars), np.empty(self.n_vars)
        for k in range(K):
            lbx[k * blk:k * blk + m], ubx[k * blk:k * blk + m] = u_lo, u_hi
            lbx[k * blk + m:(k + 1) * blk], ubx[k * blk + m:(k + 1) * blk] = x_lo, x_hi
        if free:
            lo, hi = _bounds(spec.horizon_bounds or (None, None), 1)
            lbx[-1], ubx[-1] = lo[0], hi[0]
        self.lbx, self.ubx = lbx, ubx
        opts = {"print_level": 0, "sb": "yes"}
        opts.update(ipopt_options or {})
        nlp = {"x": w, "p": x0, "f": J, "g": ca.vertcat(*g)}
        self.cold = ca.nlpsol("cold", "ipopt", nlp, {"print_time": False, "ipopt": opts})
        warm = {**opts, **WARM_START}            # invimbed's warm-start options
        self._warm = lambda: ca.nlpsol("warm", "ipopt", nlp, {"print_time": False,
                                                               "ipopt": warm})
        self.warm = None
        self.u_lo, self.u_hi = u_lo, u_hi

    def guess(self, x0) -> np.ndarray:
        """The start that invimbed takes by default: the straight line from ``x0`` to
        the target (``x0`` where free), controls 0 clipped into their bounds."""
        spec, K = self.spec, self.K
        x0 = np.asarray(x0, dtype=float)
        end = x0 if spec.final_state is None else np.where(
            np.isnan(spec.final_state), x0, spec.final_state)
        tau = np.linspace(0.0, 1.0, K + 1)
        S = x0[None, :] + tau[:, None] * (end - x0)[None, :]
        U = np.tile(np.clip(0.0, self.u_lo, self.u_hi), (K, 1))
        w = np.concatenate([U, S[1:]], axis=1).ravel()
        if spec.free_horizon:
            w = np.append(w, spec.horizon)
        return np.clip(w, self.lbx, self.ubx)

    def solve(self, x0, previous: dict | None = None, shift: int = 0) -> dict:
        """IPOPT from ``x0``: cold from `guess`, or warm from ``previous`` (a dict that
        `solve` returned) shifted by ``shift`` intervals, multipliers included."""
        args = dict(p=np.asarray(x0, dtype=float), lbx=self.lbx, ubx=self.ubx,
                    lbg=self.lbg, ubg=self.ubg)
        if previous is None:
            out = self.cold(x0=self.guess(x0), **args)
            stats = self.cold.stats()
        else:
            vx = shift_variables(previous["x"], self.K, self.spec.n + self.spec.m, shift)
            lam_x = shift_variables(previous["lam_x"], self.K, self.spec.n + self.spec.m,
                                    shift)
            lam_g = previous["lam_g"].copy()
            d = self.K * self.spec.n
            lam_g[:d] = shift_variables(lam_g[:d], self.K, self.spec.n, shift)
            if self.warm is None:                    # built at its first use
                self.warm = self._warm()
            out = self.warm(x0=vx, lam_x0=lam_x, lam_g0=lam_g, **args)
            stats = self.warm.stats()
        return {"x": np.asarray(out["x"]).ravel(), "f": float(out["f"]),
                "lam_x": np.asarray(out["lam_x"]).ravel(),
                "lam_g": np.asarray(out["lam_g"]).ravel(), "iter": int(stats["iter_count"]),
                "success": bool(stats["success"]), "status": stats["return_status"]}


def shift_variables(v: np.ndarray, K: int, block: int, shift: int) -> np.ndarray:
    """``v`` of ``K`` blocks of ``block`` entries (and any tail) with block ``k`` taken
    from block ``min(k + shift, K - 1)``: a solution moved ``shift`` intervals on."""
    v = np.asarray(v, dtype=float)
    body = v[:K * block].reshape(K, block)
    idx = np.minimum(np.arange(K) + shift, K - 1)
    return np.concatenate([body[idx].ravel(), v[K * block:]])


def simulate(spec: Spec, x0, controls: np.ndarray, dt_interval: float,
             intervals: int) -> tuple[np.ndarray, float]:
    """The state after applying ``controls[:intervals]`` (each for ``dt_interval``) from
    ``x0``, and the running cost on the way (scipy's RK45, rtol 1e-10): the plant of
    the MPC loop, the same for both sides."""
    from scipy.integrate import solve_ivp
    z = np.asarray(x0, dtype=float)
    cost = 0.0
    for k in range(intervals):
        u = np.atleast_1d(controls[k])

        def rhs(t, y, u=u):
            zz = y[:-1]
            run = 0.0 if spec.running is None else spec.running(zz, u, np)
            return np.append(np.array(spec.dynamics(zz, u, np), dtype=float), run)
        sol = solve_ivp(rhs, (0.0, dt_interval), np.append(z, 0.0), rtol=1e-10, atol=1e-12)
        z, cost = sol.y[:-1, -1], cost + float(sol.y[-1, -1])
    return z, cost
