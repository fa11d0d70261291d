"""The fixed-step grid of a sweep, laid out once as arrays for compiled or device kernels.

The grid is the one of `invimbed._core.integrators.fixed.integrate_fixed`, node for node and
step for step (so that every backend takes the same steps and returns the same numbers):
every requested depth and every control breakpoint is a node, each interval between
nodes is divided evenly into the fewest steps not longer than ``step``, and ``theta``
and ``d theta / d w`` are evaluated once per stage here, in Python, so that no kernel
calls back into Python. ``method="disc"`` has one layer between consecutive requested
depths (and ``q``), with everything taken at the new depth (eqs. (14) and
(15)).

Depth indices (``record``, ``record_initial``, the rows of ``depth_theta``) are in the
*user's* order of ``depths``, so that kernels write their outputs where the result
keeps them, without a reordering copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._core.integrators.fixed import TABLEAUX, _nodes
from .._core.setup import Setup


@dataclass
class Schedule:
    """Steps of a fixed-step sweep, in sweep order (from ``q`` down)."""

    p_start: np.ndarray       # (n_steps,) where each step starts (``a`` of a disc layer)
    h: np.ndarray             # (n_steps,) signed step (negative: the sweep goes down)
    stage_p: np.ndarray       # (n_steps, S) depth of each stage (disc: the new depth)
    theta: np.ndarray         # (n_steps, S, M)
    jac: np.ndarray           # (n_steps, S, M, n_w)
    record: np.ndarray        # (n_steps,) index into depths (user order) recorded after the step, or -1
    record_initial: int       # index of q in depths (user order), or -1
    depth_p: np.ndarray       # (n,) the depths, user order
    depth_theta: np.ndarray   # (n, M): theta(p_i), user order, for the depth gradient
    A: np.ndarray             # (S, S) Runge--Kutta matrix (disc: 0)
    weights: np.ndarray       # (S,)
    disc: bool

    @property
    def n_steps(self) -> int:
        return int(self.h.size)

    @property
    def stages(self) -> int:
        return int(self.stage_p.shape[1])


def build_schedule(setup: Setup, method: str, step: float | None) -> Schedule:
    """The steps `integrate_fixed` would take for this setup (see the module docstring)."""
    ctrl = setup.control
    q = setup.q
    depths = setup.depths_desc
    index = {float(p): i for i, p in enumerate(setup.depths)}   # user order
    M, nw = ctrl.size, ctrl.n_params
    disc = method == "disc"
    if disc:
        nodes = sorted({q} | set(index), reverse=True)
        C, A, W = np.zeros(1), np.zeros((1, 1)), np.ones(1)
    else:
        nodes = _nodes(q, depths, ctrl.breakpoints)
        C, A, W = TABLEAUX[method]
    p_start, hs, stage_p, record, pieces = [], [], [], [], []
    for a, b in zip(nodes[:-1], nodes[1:]):
        piece = setup.piece_of(a, b)
        if disc:
            p_start.append(a)
            hs.append(b - a)
            stage_p.append([b])
            record.append(index.get(b, -1))
            pieces.append(piece)
            continue
        n_sub = max(1, math.ceil((a - b) / step - 1e-9))
        h = (b - a) / n_sub
        for k in range(n_sub):
            p = a + k * h
            p_start.append(p)
            hs.append(h)
            stage_p.append([p + C[s] * h for s in range(C.size)])
            record.append(index.get(b, -1) if k == n_sub - 1 else -1)
            pieces.append(piece)
    n_steps, S = len(hs), C.size
    theta = np.empty((n_steps, S, M))
    jac = np.empty((n_steps, S, M, nw))
    for k in range(n_steps):
        for s in range(S):
            theta[k, s] = ctrl.theta(stage_p[k][s], pieces[k])
            if nw:
                jac[k, s] = ctrl.jacobian(stage_p[k][s], pieces[k])
    depth_theta = np.empty((depths.size, M))
    for i, p in enumerate(setup.depths):
        depth_theta[i] = ctrl.theta(float(p))
    return Schedule(
        p_start=np.asarray(p_start, dtype=float).reshape(n_steps),
        h=np.asarray(hs, dtype=float).reshape(n_steps),
        stage_p=np.asarray(stage_p, dtype=float).reshape(n_steps, S),
        theta=theta, jac=jac,
        record=np.asarray(record, dtype=np.int64).reshape(n_steps),
        record_initial=index.get(q, -1),
        depth_p=np.ascontiguousarray(setup.depths, dtype=float),
        depth_theta=depth_theta,
        A=np.ascontiguousarray(A, dtype=float), weights=np.ascontiguousarray(W, dtype=float),
        disc=disc,
    )


def check_scope(backend: str, closure: str, order: int, method: str) -> None:
    """What the accelerated backends run: jet of order 1 (with its estimate) and the
    stencil; anything else raises a ValueError pointing to ``backend='numpy'``."""
    if closure not in ("jet", "stencil"):
        raise ValueError(f"backend={backend!r} runs closure='jet' and closure='stencil', but "
                         f"got closure={closure!r}; use backend='numpy' for it")
    if closure == "jet" and order != 1:
        raise ValueError(f"backend={backend!r} runs the jet of order 1 (with its order-2 error "
                         f"estimate), but got order={order}; use backend='numpy' for higher "
                         f"orders")
    if closure == "stencil" and method == "disc":
        raise ValueError("closure 'stencil' does not implement the paper's discrete recursion "
                         "(method='disc'); use closure='jet' or 'crop'")
