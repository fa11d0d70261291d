"""The problems of the accuracy map (``bench_accuracy.py``), shared with
``bench_dense.py`` (no benchmark imports another): random stable linear-quadratic
problems with their exact solution by matrix exponentials (``lq_problem``), the coupled
pendulums of ``_pendulums.py`` and a forced Duffing oscillator, each a `Problem` (the
problem, its control, its input and, for LQ, its exact reference), and the map's
accuracy targets and sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.linalg import expm

import invimbed
import _pendulums as P

TARGETS = (1e-3, 1e-6, 1e-9)
Q_END, P_MIN = 0.0, -1.0
BIG_N, HUGE_N = 10_000, 100_000   # from BIG_N / HUGE_N depths on, fewer methods run
EXACT_CHUNK = 64                # LQ reference: a fresh expm at least every this many depths
FIELDS = P.FIELDS


# -- problems ---------------------------------------------------------------------------------
@dataclass
class Problem:
    name: str
    N: int
    problem: Any
    control: Any
    x: np.ndarray
    exact: Callable[[np.ndarray], dict] | None = None     # exact reference (LQ) or None
    note: str = ""

    def depths(self, n: int) -> np.ndarray:
        return np.linspace(Q_END, P_MIN, n)


def lq_problem(N: int, M: int = 2, seed: int = 0) -> Problem:
    """Random stable linear-quadratic problem with a piecewise-constant control, and its
    exact solution by matrix exponentials."""
    import sympy as sp

    rng = np.random.default_rng(seed)
    G = rng.standard_normal((N, N)) / np.sqrt(N)
    A = G - (np.max(np.linalg.eigvals(G).real) + 0.5) * np.eye(N)
    B = rng.standard_normal((N, M)) / np.sqrt(M)
    C = rng.standard_normal((N, N)) / np.sqrt(N)
    Qm = C @ C.T / N + 0.1 * np.eye(N)
    Rm = 0.1 * np.eye(M)
    D = rng.standard_normal((N, N)) / np.sqrt(N)
    Pm = D @ D.T + np.eye(N)
    x0 = rng.standard_normal(N)
    knots = np.linspace(P_MIN, Q_END, 5)
    values = 0.5 * rng.standard_normal((len(knots) - 1, M))
    control = invimbed.PiecewiseConstant(knots, values)

    t = sp.Symbol("t")
    z = list(sp.symbols(f"z0:{N}"))
    u = list(sp.symbols(f"u0:{M}"))
    Z, U = sp.Matrix(z), sp.Matrix(u)
    f = sp.Matrix(A) * Z + sp.Matrix(B) * U
    running = ((Z.T * sp.Matrix(Qm) * Z)[0] + (U.T * sp.Matrix(Rm) * U)[0]) / 2
    terminal = (Z.T * sp.Matrix(Pm) * Z)[0] / 2
    problem = invimbed.from_sympy(t, z, u, list(f), running, terminal, q=Q_END)

    # exact fields: y = [z; w] (w = values.ravel()), dy/dt = F_k y on piece k, running loss
    # y' W_k y / 2; J(p) = v' H(p) v / 2 with v = [x; w], z(q) = (Phi(p) v)[:N]
    K = len(knots) - 1
    nw = K * M
    D_ = N + nw
    w = values.ravel()
    v = np.concatenate([x0, w])
    Fs, Ws = [], []
    for k in range(K):
        S = np.zeros((M, nw))
        S[:, k * M:(k + 1) * M] = np.eye(M)
        F = np.zeros((D_, D_))
        F[:N, :N], F[:N, N:] = A, B @ S
        W = np.zeros((D_, D_))
        W[:N, :N], W[N:, N:] = Qm, S.T @ Rm @ S
        Fs.append(F)
        Ws.append(W)

    def piece_map(k: int, h: float) -> tuple[np.ndarray, np.ndarray]:
        """(e^{F h}, int_0^h e^{F' s} W e^{F s} ds) for piece k (Van Loan)."""
        F, W = Fs[k], Ws[k]
        big = np.zeros((2 * D_, 2 * D_))
        big[:D_, :D_], big[:D_, D_:], big[D_:, D_:] = -F.T, W, F
        E = expm(big * h)
        G22, G12 = E[D_:, D_:], E[:D_, D_:]
        return G22, G22.T @ G12

    # suffix maps from knot k to q (terminal loss included in H)
    Pt = np.zeros((D_, D_))
    Pt[:N, :N] = Pm
    suffix_phi = [None] * (K + 1)
    suffix_H = [None] * (K + 1)
    suffix_phi[K], suffix_H[K] = np.eye(D_), Pt
    for k in range(K - 1, -1, -1):
        E, I_ = piece_map(k, knots[k + 1] - knots[k])
        suffix_phi[k] = suffix_phi[k + 1] @ E
        suffix_H[k] = I_ + E.T @ suffix_H[k + 1] @ E

    def big_exp(k: int, h: float) -> np.ndarray:
        F, W = Fs[k], Ws[k]
        big = np.zeros((2 * D_, 2 * D_))
        big[:D_, :D_], big[:D_, D_:], big[D_:, D_:] = -F.T, W, F
        return expm(big * h)

    def exact(depths: np.ndarray) -> dict:
        """The five fields at ``depths``. Runs of evenly spaced depths in one piece share
        their exponentials: ``e^{X (h + j dh)} = e^{X h} (e^{X dh})^j``, restarted from a
        fresh ``expm`` every ``EXACT_CHUNK`` depths (rounding grows by about one unit in
        the last place per product)."""
        out = {name: [] for name in FIELDS}
        anchor: tuple | None = None     # (piece, h, E of h, E of dh, dh, count)
        for p in depths:
            k = int(np.clip(np.searchsorted(knots, p, side="right") - 1, 0, K - 1))
            h = knots[k + 1] - p
            if h > 0:
                Eb = None
                if anchor is not None and anchor[0] == k and anchor[5] < EXACT_CHUNK:
                    _, h0, E0, Ed, dh, cnt = anchor
                    if dh is None:
                        dh = h - h0
                        Ed = big_exp(k, dh) if dh > 0 else None
                    if Ed is not None and abs((h - h0) - dh) <= 1e-12 * max(abs(dh), 1e-300):
                        Eb = E0 @ Ed
                        anchor = (k, h, Eb, Ed, dh, cnt + 1)
                if Eb is None:
                    Eb = big_exp(k, h)
                    anchor = (k, h, Eb, None, None, 0)
                G22, G12 = Eb[D_:, D_:], Eb[:D_, D_:]
                E, I_ = G22, G22.T @ G12
                phi = suffix_phi[k + 1] @ E
                H = I_ + E.T @ suffix_H[k + 1] @ E
            else:                                   # p = q
                phi, H = suffix_phi[K], suffix_H[K]
            H = 0.5 * (H + H.T)
            g = H @ v
            th = values[k]
            out["z"].append((phi @ v)[:N])
            out["value"].append(0.5 * v @ g)
            out["adjoint"].append(g[:N])
            out["param_grad"].append(g[N:])
            out["depth_grad"].append(-(g[:N] @ (A @ x0 + B @ th)
                                       + 0.5 * (x0 @ Qm @ x0 + th @ Rm @ th)))
        return {k_: np.array(v_) for k_, v_ in out.items()}

    return Problem(f"lq{N}", N, problem, control, x0, exact,
                   note=f"linear-quadratic, N = {N}, M = {M}, n_w = {nw}")


def pendulum_problem() -> Problem:
    return Problem("pendulums", P.N, P.problem(), P.CONTROL, P.X0,
                   note=f"coupled pendulums (_pendulums.py), N = {P.N}, n_w = {P.N_W}")


def duffing_problem() -> Problem:
    import sympy as sp

    t = sp.Symbol("t")
    x, v = z = list(sp.symbols("x v"))
    u = sp.Symbol("u")
    f = [v, -0.2 * v - x - x ** 3 + 0.5 * sp.sin(2 * sp.pi * t) + u]
    running = (x ** 2 + 0.1 * v ** 2 + 0.05 * u ** 2) / 2
    terminal = ((x - 1) ** 2 + v ** 2) / 2
    problem = invimbed.from_sympy(t, z, [u], f, running, terminal, q=Q_END)
    return Problem("duffing", 2, problem, invimbed.Constant([0.3]), np.array([0.5, 0.0]),
                   note="forced Duffing, N = 2, 0.5 sin(2 pi t) forcing, n_w = 1")
