"""Adaptive explicit Runge-Kutta for an ensemble of independent rows.

Every row of the ensemble is its own initial-value problem, from its own ``t0`` to its
own ``t1``, with its **own step size and error control**: the ensemble solvers of
diffrax (``jax.vmap`` over ``diffeqsolve``) and DifferentialEquations.jl work the same
way. All rows that are still running advance one attempted step per iteration, in one
vectorised evaluation of the right-hand side; a row that finishes or fails drops out,
the others go on. Nothing is restarted as a whole.

The methods are data: the embedded pairs of `scipy.integrate.RK45` (Dormand-Prince
5(4)) and `scipy.integrate.RK23` (Bogacki-Shampine 3(2)), whose tableaux
`tableau.TABLEAUX` reads from scipy's classes. Step-size control, the first-step rule
and the dense output are scipy's, applied per row, so that a single-row ensemble takes
the steps ``scipy.integrate.solve_ivp`` takes:

* error norm ``||err / (atol + rtol max(|y|, |y_new|))||_rms < 1`` accepts the step;
  the next step is ``h * min(10, 0.9 norm^(-1/(k+1)))`` (not grown after a rejection),
  a rejected one ``h * max(0.2, 0.9 norm^(-1/(k+1)))``, ``k`` the error estimator's order;
* a step never crosses a *stop* (a breakpoint of the control): it ends on it exactly,
  and the next step starts from the derivative of the next piece (as a restart would);
* a non-finite stage counts as a rejection with the smallest factor, so that a row
  whose dynamics blow up ends with a step-size underflow, never a hang;
* a row that needs more than ``max_steps`` attempted steps fails (`MAX_STEPS`), with
  an estimate of ``h |lambda|`` from the last accepted step (Shampine's test) that tells
  whether the problem looks stiff; a row whose last ``STIFF_WINDOW`` accepted steps sat
  at the stability limit fails so as soon as the distance left at that step size needs
  more than the steps it has left (`rules.stiff_stops`, the rule of the sweep too): a
  stiff row ends after a few dozen steps, not ``max_steps``.

Dense output: with ``record=True`` the accepted steps are kept as scipy's
``RkDenseOutput`` keeps them, ``(t_old, h, y_old, Q)`` per step and row, i.e.
``(S (k + 2) + 2)`` floats per accepted step (S the state size, k + 1 = 4 for RK45), and
`DenseRows` evaluates them at any time of any row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

from ..results.failures import DONE, MAX_STEPS, NONFINITE, RUNNING, STIFF_H_LAMBDA, UNDERFLOW
from .rules import (MAX_FACTOR, MIN_FACTOR, SAFETY, STIFF_WINDOW, error_scale,  # noqa: F401
                    grow_factor, shrink_factor, stiff_run, stiff_stops)
from .tableau import EMBEDDED, TABLEAUX, ButcherTableau  # noqa: F401 (TABLEAUX re-exported)


#: The methods the ensemble runs natively: the embedded pairs of `tableau.TABLEAUX` (the
#: one table of every explicit method) with a continuous extension.
ENSEMBLE_METHODS = EMBEDDED

#: ``rhs(t (k,), y (k, S), rows (k,), piece) -> (k, S)``: the right-hand side of the
#: rows ``rows`` (indices into the ensemble) at their own times ``t``; ``piece`` is what
#: the ``pieces`` callable of `integrate_rows` returned for the interval being stepped.
RowRHS = Callable[[np.ndarray, np.ndarray, np.ndarray, object], np.ndarray]


@dataclass
class RowsOutcome:
    """What `integrate_rows` returns."""

    y: np.ndarray                 # (R, S) at t1 (NaN for failed rows)
    status: np.ndarray            # (R,) DONE or a failure code
    t: np.ndarray                 # (R,) where each row ended (t1, or where it failed)
    nsteps: np.ndarray            # (R,) attempted steps
    nfev: int                     # vectorised right-hand-side calls
    h_lambda: np.ndarray          # (R,) Shampine's h|lambda| of the last accepted step
    dense: "DenseRows | None" = None


@dataclass
class _Record:
    rows: list = field(default_factory=list)
    t_old: list = field(default_factory=list)
    h: list = field(default_factory=list)
    y_old: list = field(default_factory=list)
    Q: list = field(default_factory=list)


def _rms(a: np.ndarray) -> np.ndarray:
    return np.sqrt((a * a).mean(axis=1)) if a.shape[1] else np.zeros(a.shape[0])


def _next_stop(t: np.ndarray, t1: np.ndarray, direction: np.ndarray,
               stops: np.ndarray) -> np.ndarray:
    """The first stop strictly beyond ``t`` in each row's direction, else ``t1``."""
    if stops.size == 0:
        return t1.copy()
    up = stops.searchsorted(t, side="right")
    down = stops.searchsorted(t, side="left") - 1
    nxt = np.where(direction > 0, stops[np.minimum(up, stops.size - 1)],
                   stops[np.maximum(down, 0)])
    valid = np.where(direction > 0, up < stops.size, down >= 0)
    beyond = direction * (t1 - nxt) > 0        # the stop lies before the row's end
    return np.where(valid & beyond, nxt, t1)


def integrate_rows(rhs: RowRHS, t0: np.ndarray, t1: np.ndarray, y0: np.ndarray, *,
                   tableau: ButcherTableau, rtol: float, atol: float, max_steps: int,
                   stops: np.ndarray | None = None,
                   pieces: Callable[[np.ndarray, np.ndarray, np.ndarray], object] | None = None,
                   first_step: float | None = None, max_step: float = np.inf,
                   record: bool = False) -> RowsOutcome:
    """Integrate every row ``dy/dt = rhs(t, y)`` from ``t0[r]`` to ``t1[r]``.

    Parameters
    ----------
    rhs : callable
        See `RowRHS`.
    t0, t1 : ndarray, shape (R,)
        Start and end of each row (either direction; ``t0 == t1``: nothing to do).
    y0 : ndarray, shape (R, S)
    tableau : ButcherTableau
        An embedded pair with a continuous extension (`ENSEMBLE_METHODS`).
    rtol, atol : float
    max_steps : int
        Attempted steps allowed per row.
    stops : ndarray, optional
        Sorted times where every row passing them must end a step (control breakpoints).
    pieces : callable ``pieces(lo, hi, rows) -> piece``, optional
        Which smooth piece of the right-hand side applies on the open interval between
        each row's current time and its next stop; handed to ``rhs``.
    first_step, max_step : float, optional
        As in `scipy.integrate.solve_ivp`.
    record : bool
        Keep the dense output of the accepted steps (`RowsOutcome.dense`).
    """
    t0 = np.asarray(t0, dtype=float)
    t1 = np.asarray(t1, dtype=float)
    R, S = y0.shape
    stops = np.empty(0) if stops is None else np.asarray(stops, dtype=float)
    direction = np.sign(t1 - t0)
    tab = tableau
    exponent = -1.0 / (tab.error_order + 1)
    t = t0.copy()
    y = np.array(y0, dtype=float)
    f = np.zeros((R, S))
    h = np.zeros(R)
    status = np.where(direction == 0, DONE, RUNNING)
    nsteps = np.zeros(R, dtype=np.int64)
    h_lambda = np.zeros(R)
    run = np.zeros(R, dtype=np.int64)         # accepted steps in a row at the stability limit
    rejected = np.zeros(R, dtype=bool)
    last_bad = np.zeros(R, dtype=bool)        # the last attempt had a non-finite stage
    rec = _Record() if record else None
    nfev = 0

    def piece_of(rows: np.ndarray, stop: np.ndarray) -> object:
        return None if pieces is None else pieces(t[rows], stop, rows)

    def evaluate(tt, yy, rows, piece):
        nonlocal nfev
        nfev += 1
        with np.errstate(all="ignore"):
            return np.asarray(rhs(tt, yy, rows, piece), dtype=float)

    act = np.flatnonzero(status == RUNNING)
    if act.size:
        stop = _next_stop(t[act], t1[act], direction[act], stops)
        piece = piece_of(act, stop)
        f[act] = evaluate(t[act], y[act], act, piece)
        bad = ~np.all(np.isfinite(f[act]), axis=1)
        status[act[bad]] = NONFINITE
        good = ~bad
        act, stop = act[good], stop[good]
        piece = _take(piece, good)
        if act.size:
            span = np.abs(stop - t[act])
            if first_step is not None:
                h[act] = np.minimum(first_step, span)
            else:
                h[act] = _initial_step(evaluate, t[act], y[act], f[act], direction[act], span,
                                       act, piece, tab.error_order, rtol, atol)
    while True:
        act = np.flatnonzero(status == RUNNING)
        if act.size == 0:
            break
        ta, ya, fa, da = t[act], y[act], f[act], direction[act]
        stop = _next_stop(ta, t1[act], da, stops)
        piece = piece_of(act, stop)
        min_step = 10.0 * np.abs(np.nextafter(ta, da * np.inf) - ta)
        under = rejected[act] & (h[act] < min_step)        # scipy: "step size too small"
        if under.any():
            idx = act[under]
            status[idx] = np.where(last_bad[idx], NONFINITE, UNDERFLOW)
            keep = ~under
            act, ta, ya, fa, da, stop, min_step = (
                a[keep] for a in (act, ta, ya, fa, da, stop, min_step))
            piece = _take(piece, keep)
            if act.size == 0:
                continue
        h_try = np.minimum(np.maximum(h[act], min_step), max_step)
        dist = np.abs(stop - ta)
        hit = h_try >= dist                                # the step ends on the stop exactly
        ha = np.where(hit, dist, h_try)
        t_new = np.where(hit, stop, ta + da * ha)
        hs = t_new - ta                                    # signed step
        K = np.empty((act.size, tab.n_stages + 1, S))
        K[:, 0] = fa
        y_stiff = None
        for s in range(1, tab.n_stages):
            dy = np.matmul(tab.A[s, :s], K[:, :s]) * hs[:, None]
            ys = ya + dy
            K[:, s] = evaluate(ta + tab.C[s] * hs, ys, act, piece)
            if s == tab.stiff_stage:
                y_stiff = ys
        y_new = ya + hs[:, None] * np.matmul(tab.B, K[:, :-1])
        K[:, -1] = evaluate(t_new, y_new, act, piece)
        with np.errstate(all="ignore"):
            err = hs[:, None] * np.matmul(tab.E, K)
            norm = _rms(err / error_scale(ya, y_new, rtol, atol))
        finite = np.isfinite(norm) & np.isfinite(K[:, -1]).all(axis=1) \
            & np.isfinite(y_new).all(axis=1)
        accept = finite & (norm < 1.0)
        nsteps[act] += 1
        grow, shrink = step_factors(norm, finite, rejected[act], exponent)
        h[act] = ha * np.where(accept, grow, shrink)
        rejected[act] = ~accept
        last_bad[act] = ~finite
        if accept.any():
            a = act[accept]
            if rec is not None:
                rec.rows.append(a)
                rec.t_old.append(ta[accept])
                rec.h.append(hs[accept])
                rec.y_old.append(ya[accept])
                rec.Q.append(np.matmul(K[accept].transpose(0, 2, 1), tab.P))
            if y_stiff is not None:
                num = np.linalg.norm(K[accept, -1] - K[accept, tab.stiff_stage], axis=1)
                den = np.linalg.norm(y_new[accept] - y_stiff[accept], axis=1)
                with np.errstate(divide="ignore", invalid="ignore"):
                    h_lambda[a] = np.where(den > 0, np.abs(hs[accept]) * num / den, 0.0)
                run[a] = stiff_run(run[a], h_lambda[a], STIFF_H_LAMBDA)
            t[a] = t_new[accept]
            y[a] = y_new[accept]
            f[a] = K[accept, -1]
            status[a[t_new[accept] == t1[a]]] = DONE
            # a stop is where the right-hand side may jump: the next step starts from the
            # derivative of the next piece, not the last stage of this one
            crossed = a[(status[a] == RUNNING) & hit[accept]]
            if crossed.size:
                nxt = _next_stop(t[crossed], t1[crossed], direction[crossed], stops)
                f[crossed] = evaluate(t[crossed], y[crossed], crossed, piece_of(crossed, nxt))
                bad = crossed[~np.all(np.isfinite(f[crossed]), axis=1)]
                status[bad] = NONFINITE
            if y_stiff is not None and np.any(run[a] >= STIFF_WINDOW):
                going = a[status[a] == RUNNING]
                with np.errstate(divide="ignore", invalid="ignore"):
                    stiff = stiff_stops(run[going], STIFF_WINDOW, nsteps[going],
                                        np.abs(t1[going] - t[going]), h[going],
                                        hs[accept][status[a] == RUNNING], max_steps)
                status[going[stiff]] = MAX_STEPS
        over = (status[act] == RUNNING) & (nsteps[act] >= max_steps)
        status[act[over]] = MAX_STEPS
    failed = status != DONE
    y[failed] = np.nan
    dense = None
    if rec is not None:
        dense = DenseRows.build(rec, R, S, tab.P.shape[1])
    return RowsOutcome(y=y, status=status, t=t, nsteps=nsteps, nfev=nfev, h_lambda=h_lambda,
                       dense=dense)


def step_factors(norm: np.ndarray, finite: np.ndarray, rejected: np.ndarray,
                 exponent: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the step's factor if accepted (at most 1 right after a rejection) and if
    rejected (`MIN_FACTOR` after a non-finite stage): the rules of
    `invimbed._core.integrators.rules`, which the compiled kernels apply to one row."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        grow = grow_factor(norm, rejected, SAFETY, MAX_FACTOR, exponent)
        shrink = np.where(finite, shrink_factor(norm, SAFETY, MIN_FACTOR, exponent),
                          MIN_FACTOR)
    return grow, shrink


def _take(piece: object, keep: np.ndarray) -> object:
    return piece[keep] if isinstance(piece, np.ndarray) else piece


def _initial_step(evaluate, t, y, f, direction, span, rows, piece, order, rtol, atol):
    """scipy's ``select_initial_step`` (Hairer, Norsett & Wanner, II.4), per row: the
    rules `rules.first_guess` and `rules.second_guess` (which the compiled kernels apply
    to one row), vectorised with ``np.where``."""
    scale = error_scale(y, y, rtol, atol)
    d0 = _rms(y / scale)
    d1 = _rms(f / scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    h0 = np.minimum(h0, span)
    y1 = y + (h0 * direction)[:, None] * f
    f1 = evaluate(t + h0 * direction, y1, rows, piece)
    with np.errstate(divide="ignore", invalid="ignore"):
        d2 = _rms((f1 - f) / scale) / h0
        big = np.maximum(d1, d2)
        h1 = np.where((d1 <= 1e-15) & (d2 <= 1e-15), np.maximum(1e-6, h0 * 1e-3),
                      (0.01 / big) ** (1.0 / (order + 1)))
    h1 = np.where(np.isfinite(h1), h1, h0)           # a non-finite probe: start small
    return np.minimum(np.minimum(100 * h0, h1), span)


@dataclass
class DenseRows:
    """Dense output of the accepted steps of every row (scipy's ``RkDenseOutput``).

    ``start[r]:start[r + 1]`` are row ``r``'s steps, in the order they were taken.
    """

    t_old: np.ndarray      # (m,)
    h: np.ndarray          # (m,) signed
    y_old: np.ndarray      # (m, S)
    Q: np.ndarray          # (m, S, k + 1)
    start: np.ndarray      # (R + 1,)

    @classmethod
    def build(cls, rec: _Record, R: int, S: int, k: int) -> "DenseRows":
        if not rec.rows:
            return cls(np.empty(0), np.empty(0), np.empty((0, S)), np.empty((0, S, k)),
                       np.zeros(R + 1, dtype=np.int64))
        rows = np.concatenate(rec.rows)
        order = np.argsort(rows, kind="stable")      # stable: steps keep their order
        counts = np.bincount(rows, minlength=R)
        start = np.concatenate([[0], np.cumsum(counts)])
        return cls(np.concatenate(rec.t_old)[order], np.concatenate(rec.h)[order],
                   np.concatenate(rec.y_old)[order], np.concatenate(rec.Q)[order], start)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.t_old, self.h, self.y_old, self.Q, self.start))

    @cached_property
    def _search(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct values of ``direction * t_old`` over every step, sorted, and each
        step's key ``row * (U + 1) + rank``, where ``rank`` counts the distinct values up
        to its own: sorted, since the rows are in order and each row's steps go in its
        direction of integration."""
        s = self.t_old * np.sign(self.h)
        values = np.unique(s)
        rows = np.repeat(np.arange(self.start.size - 1), np.diff(self.start))
        keys = rows * (values.size + 1) + np.searchsorted(values, s, side="right")
        return values, keys

    def __call__(self, t: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``y(t[j])`` of row ``rows[j]``, shape (len(rows), S)."""
        lo = self.start[rows]
        # the step whose interval holds t: the last step of the row with
        # (t - t_old) * direction >= 0 (its first where none is), by one binary search
        # over the steps of every row with t's key (`_search`): exact comparisons
        values, keys = self._search
        s = t * np.sign(self.h[np.minimum(lo, self.h.size - 1)])
        query = rows * (values.size + 1) + values.searchsorted(s, side="right")
        a = np.maximum(lo, keys.searchsorted(query, side="right") - 1)
        x = (t - self.t_old[a]) / self.h[a]
        powers = x[:, None].repeat(self.Q.shape[2], axis=1).cumprod(axis=1)
        return self.y_old[a] + self.h[a][:, None] * np.einsum("msk,mk->ms", self.Q[a], powers)
