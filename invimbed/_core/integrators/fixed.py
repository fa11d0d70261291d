"""Fixed-step sweeps: explicit Runge--Kutta tableaux, and the paper's layer recursion.

Written once for every array namespace. `run_schedule` steps a `Schedule`
(`invimbed._core.integrators.schedule`): Runge--Kutta methods are data (``C``, ``A``,
``B``), each stage and step is a sum of stage derivatives added in the order ``j = 0,
1, ...`` (as the compiled kernels add them), and every state and every stage derivative
is checked for non-finite values, so that a blow-up ends the sweep at the depth where it
happens. The stage function decides where the numbers live: `integrate_fixed` hands it
the closure's right-hand side on numpy arrays, ``backend="cupy"`` the closure's
``rhs_at`` on device arrays with ``theta`` precomputed per stage. (The numba backend
compiles its own transcription of this loop and of the jet-1 right-hand side, on the
same `Schedule`; its tests hold it to these numbers bit for bit.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..results.failures import first_evaluation, grid_exhausted, sweep_stopped
from ..runtime.namespace import array_namespace
from .common import NonFiniteError, Outcome, check_max_steps
from .schedule import Schedule, fixed_schedule

__all__ = ["Stopped", "integrate_fixed", "run_schedule"]


@dataclass
class Stopped:
    """Where a fixed-step sweep met a non-finite value: step ``k``, stage ``s`` (``S`` for
    the state after the step), ``rhs`` (the stage derivative, else the state) at depth
    ``p``."""

    k: int
    s: int
    rhs: bool
    p: float

    def code(self, stages: int) -> int:
        """The position code of the compiled kernels: ``2 (k (S + 1) + s) + rhs``."""
        return 2 * (self.k * (stages + 1) + self.s) + int(self.rhs)

    def error(self) -> NonFiniteError:
        return NonFiniteError(self.p, "right-hand side" if self.rhs else "imbedded fields")


def evaluations(sched: Schedule, stop: Stopped | None) -> int:
    """Right-hand-side evaluations (disc: layers) made up to ``stop`` (or all)."""
    per_step = 1 if sched.disc else sched.stages
    if stop is None:
        return sched.n_steps * per_step
    return stop.k * per_step + min(stop.s + 1, per_step)


def run_schedule(sched: Schedule, y: Any, stage: Callable[[int, int, float, Any], Any],
                 record: Callable[[int, Any], None],
                 layer: Callable[[int, Any], Any] | None = None) -> Stopped | None:
    """Step ``y`` through ``sched``; None if every step was finite, else where it stopped.

    Parameters
    ----------
    sched : Schedule
    y : array, shape (size,)
        The state at ``q``, on any array namespace (numpy, cupy).
    stage : callable ``(k, s, p, y_s) -> dy``
        The right-hand side at stage ``s`` of step ``k`` (depth ``p``).
    record : callable ``(d, y)``
        Called with the state at each requested depth (``d`` indexes the depths the
        schedule was built with), ``q`` first if requested.
    layer : callable ``(k, y) -> y_new``
        ``method="disc"``: the layer recursion of step ``k``.
    """
    xp = array_namespace(y)

    def finite(a: Any) -> bool:
        return bool(xp.all(xp.isfinite(a)))

    if sched.record_initial >= 0:
        record(sched.record_initial, y)
    if not finite(y):
        return Stopped(0, 0, False, float(sched.p_start[0]) if sched.n_steps else 0.0)
    S = sched.stages
    A = [[float(a) for a in row] for row in sched.A]
    W = [float(w) for w in sched.weights]
    for k in range(sched.n_steps):
        h = float(sched.h[k])
        s = 0
        try:
            if sched.disc:
                y = layer(k, y)
            else:
                Ks: list = []
                for s in range(S):
                    p = float(sched.stage_p[k, s])
                    ys = y
                    if s:
                        acc = A[s][0] * Ks[0]
                        for j in range(1, s):
                            acc = acc + A[s][j] * Ks[j]
                        ys = y + h * acc
                        if not finite(ys):
                            return Stopped(k, s, False, p)
                    dy = stage(k, s, p, ys)
                    if not finite(dy):
                        return Stopped(k, s, True, p)
                    Ks.append(dy)
                acc = W[0] * Ks[0]
                for j in range(1, S):
                    acc = acc + W[j] * Ks[j]
                y = y + h * acc
        except NonFiniteError as exc:   # raised by a closure or right-hand side itself
            return Stopped(k, S if sched.disc else s, True, float(exc.p))
        if not finite(y):
            return Stopped(k, S, False, float(sched.p_end[k]))
        if sched.record[k] >= 0:
            record(int(sched.record[k]), y)
    return None


def stop_message(sched: Schedule, stop: Stopped | None, q: float) -> str | None:
    """The failure message of a fixed-step sweep (None: it reached every depth)."""
    if stop is not None:
        if stop.k == 0 and stop.s == 0:
            return first_evaluation(stop.error(), q)
        return sweep_stopped(stop.error(), fixed_step=True)
    if sched.exhausted:
        return grid_exhausted(float(sched.p_end[-1]) if sched.n_steps else q,
                              int(sched.max_steps), sched.needed, float(sched.step))
    return None


def integrate_fixed(rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                    breakpoints: np.ndarray, piece_of: Callable[[float, float], Any],
                    method: str = "rk4", step: float | None = None,
                    disc_step: Callable | None = None,
                    max_steps: int | None = None, ys: Any = None) -> Outcome:
    """Fixed-step sweep from ``q`` to ``depths_desc[-1]`` (see the module docstring).

    ``method="disc"`` applies ``disc_step(p_i, p_{i+1}, y, piece)`` once per layer
    between consecutive requested depths (and ``q``): the paper's discrete
    architecture, eqs. (14) and (15), with layers at the given depths. A grid that needs
    more than ``max_steps`` steps is stepped up to there and ends with a message; with
    ``max_steps=None`` (default) a grid of more than `DEFAULT_GRID_STEPS` steps ends with
    that message before the first step. ``ys`` receives the state of depth ``d`` as
    ``ys[d] = y``, as in `invimbed._core.integrators.scipy_ivp.integrate_scipy`.
    """
    max_steps = check_max_steps(max_steps)
    sched = fixed_schedule(q, depths_desc, breakpoints, piece_of, method, step, max_steps)
    ys = np.full((depths_desc.size, y0.size), np.nan) if ys is None else ys
    out = Outcome(ys=ys)

    def stage(k: int, s: int, p: float, y: np.ndarray) -> np.ndarray:
        return rhs(p, y, sched.pieces[sched.piece_index[k]])

    def layer(k: int, y: np.ndarray) -> np.ndarray:
        return disc_step(float(sched.p_end[k]), float(sched.p_start[k]), y,
                         sched.pieces[sched.piece_index[k]])

    def keep(d: int, y: np.ndarray) -> None:
        ys[d] = y

    stop = run_schedule(sched, y0.copy(), stage, keep, layer)
    out.nfev = evaluations(sched, stop)
    message = stop_message(sched, stop, q)
    if message is not None:
        out.success = False
        out.message = message
        out.failed_at = stop.p if stop is not None else (float(sched.p_end[-1]) if sched.n_steps else q)
    return out
