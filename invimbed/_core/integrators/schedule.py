"""The step schedule of a fixed-step sweep, laid out once as arrays.

Every requested depth and every control breakpoint is a node; each interval between
two nodes is divided evenly into the fewest steps not longer than ``step``.
``method="disc"`` has one layer between consecutive requested depths (and ``q``), with
everything taken at the new depth (the paper's eqs. (14) and (15)).

One schedule serves every fixed-step sweep: `fixed.integrate_fixed` steps it on any array
namespace (numpy, cupy), and the compiled kernels read its arrays (with ``theta`` and
``d theta / d w`` evaluated once per stage by `control_tables`, so that no kernel calls
back into Python). So every backend takes the same steps and returns the same numbers.

A schedule never holds more than ``max_steps`` steps: a grid that needs more is cut
there (`Schedule.exhausted`), so that a tiny ``step`` costs a bounded amount of work and
ends with a message instead of running for hours.

Depth indices (``record``, ``record_initial``) are positions in the ``depths`` the
schedule was built with, in that array's order: the numpy sweep passes the depths in
sweep order, the backends the user's order, so that each writes its outputs where its
result keeps them.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .common import DEFAULT_GRID_STEPS
from .tableau import TABLEAUX


@dataclass
class Schedule:
    """Steps of a fixed-step sweep, in sweep order (from ``q`` down)."""

    p_start: np.ndarray       # (n_steps,) where each step starts (``a`` of a disc layer)
    h: np.ndarray             # (n_steps,) signed step (negative: the sweep goes down)
    p_end: np.ndarray         # (n_steps,) where each step ends (the node itself at a node)
    stage_p: np.ndarray       # (n_steps, S) depth of each stage (disc: the new depth)
    record: np.ndarray        # (n_steps,) index into depths recorded after the step, or -1
    record_initial: int       # index of q in depths, or -1
    A: np.ndarray             # (S, S) Runge--Kutta matrix (disc: 0)
    weights: np.ndarray       # (S,)
    disc: bool
    piece_index: np.ndarray   # (n_steps,) index into ``pieces`` of each step's control piece
    pieces: list = field(default_factory=list)   # what ``piece_of(a, b)`` gave per interval
    needed: int = 0           # steps the whole grid needs (> n_steps when cut at max_steps)
    max_steps: int | None = None
    step: float | None = None
    # filled by `control_tables` for the kernels that cannot call back into Python
    theta: np.ndarray | None = None         # (n_steps, S, M)
    jac: np.ndarray | None = None           # (n_steps, S, M, n_w)
    depth_p: np.ndarray | None = None       # (n,) the depths, in the order given
    depth_theta: np.ndarray | None = None   # (n, M): theta(p_i), for the depth gradient

    @property
    def n_steps(self) -> int:
        return int(self.h.size)

    @property
    def stages(self) -> int:
        return int(self.stage_p.shape[1])

    @property
    def exhausted(self) -> bool:
        """Whether the grid needs more than ``max_steps`` steps (and was cut there)."""
        return self.needed > self.n_steps


def grid_nodes(q: float, depths_desc: np.ndarray, breakpoints: np.ndarray) -> list[float]:
    """The nodes of the fixed-step grid: ``q``, every depth and every breakpoint between,
    in decreasing order."""
    p_min = float(depths_desc[-1])
    pts = {q} | {float(p) for p in depths_desc} | {float(b) for b in breakpoints if p_min < b < q}
    return sorted(pts, reverse=True)


def substeps(a: float, b: float, step: float) -> int:
    """The fewest steps not longer than ``step`` that divide ``[b, a]`` evenly."""
    ratio = (a - b) / step
    if not math.isfinite(ratio):   # a subnormal `step`: more steps than anyone can take
        return sys.maxsize
    return max(1, math.ceil(ratio - 1e-9))


def fixed_schedule(q: float, depths: np.ndarray, breakpoints: np.ndarray,
                   piece_of: Callable[[float, float], Any], method: str,
                   step: float | None, max_steps: int | None = None) -> Schedule:
    """The steps of a fixed-step sweep from ``q`` to ``min(depths)`` (module docstring).

    ``depths`` are the requested depths in any order; ``record`` indexes them as given.
    At most ``max_steps`` steps are laid out. With ``max_steps=None`` a grid of up to
    `DEFAULT_GRID_STEPS` steps is laid out whole and a finer one not at all (nothing is
    computed; `Schedule.exhausted` reports it).
    """
    depths = np.asarray(depths, dtype=float)
    index = {float(p): i for i, p in enumerate(depths)}
    depths_desc = np.sort(depths)[::-1]
    disc = method == "disc"
    if disc:
        nodes = sorted({q} | set(index), reverse=True)
        C, A, W = np.zeros(1), np.zeros((1, 1)), np.ones(1)
    else:
        nodes = grid_nodes(q, depths_desc, breakpoints)
        tab = TABLEAUX[method]
        C, A, W = tab.C, tab.A, tab.B
    intervals = list(zip(nodes[:-1], nodes[1:]))
    counts = [1 if disc else substeps(a, b, step) for a, b in intervals]
    needed = int(sum(counts))
    limit = DEFAULT_GRID_STEPS if max_steps is None else int(max_steps)
    budget = needed if needed <= limit else (0 if max_steps is None else limit)
    p_start, hs, p_end, stage_p, record, piece_index, pieces = [], [], [], [], [], [], []
    for j, ((a, b), n_sub) in enumerate(zip(intervals, counts)):
        if len(hs) >= budget:
            break
        pieces.append(piece_of(a, b))
        if disc:
            p_start.append(a)
            hs.append(b - a)
            p_end.append(b)
            stage_p.append([b])
            record.append(index.get(b, -1))
            piece_index.append(j)
            continue
        h = (b - a) / n_sub
        for k in range(min(n_sub, budget - len(hs))):
            p = a + k * h
            last = k == n_sub - 1
            p_start.append(p)
            hs.append(h)
            p_end.append(b if last else p + h)
            stage_p.append([p + C[s] * h for s in range(C.size)])
            record.append(index.get(b, -1) if last else -1)
            piece_index.append(j)
    n_steps, S = len(hs), C.size
    return Schedule(
        p_start=np.asarray(p_start, dtype=float).reshape(n_steps),
        h=np.asarray(hs, dtype=float).reshape(n_steps),
        p_end=np.asarray(p_end, dtype=float).reshape(n_steps),
        stage_p=np.asarray(stage_p, dtype=float).reshape(n_steps, S),
        record=np.asarray(record, dtype=np.int64).reshape(n_steps),
        record_initial=index.get(q, -1),
        A=np.ascontiguousarray(A, dtype=float), weights=np.ascontiguousarray(W, dtype=float),
        disc=disc, piece_index=np.asarray(piece_index, dtype=np.int64).reshape(n_steps),
        pieces=pieces, needed=needed, max_steps=limit, step=step,
    )


def control_tables(sched: Schedule, control: Any, depths: np.ndarray) -> Schedule:
    """Fill ``theta`` and ``d theta / d w`` at every stage, and ``theta`` at every depth
    (``depths`` in the order the schedule was built with), evaluated once, here."""
    M, nw = control.size, control.n_params
    n_steps, S = sched.n_steps, sched.stages
    theta = np.empty((n_steps, S, M))
    jac = np.empty((n_steps, S, M, nw))
    for k in range(n_steps):
        piece = sched.pieces[sched.piece_index[k]]
        for s in range(S):
            theta[k, s] = control.theta(sched.stage_p[k, s], piece)
            if nw:
                jac[k, s] = control.jacobian(sched.stage_p[k, s], piece)
    depths = np.ascontiguousarray(depths, dtype=float)
    depth_theta = np.empty((depths.size, M))
    for i, p in enumerate(depths):
        depth_theta[i] = control.theta(float(p))
    sched.theta, sched.jac = theta, jac
    sched.depth_p, sched.depth_theta = depths, depth_theta
    return sched
