"""Dense output: every field at any depth of the swept interval (docs/accuracy.md,
"Dense output: any depth from one sweep").

An adaptive sweep keeps, for each accepted step, a polynomial in ``p`` through the step's
stages (the continuous extension of the Runge--Kutta method; for Radau, BDF and LSODA
their own interpolating polynomials). Two pieces turn that into ``sol(p)``:

* `StateInterpolant` gives the sweep's flat state ``y(p)`` at many depths at once. It is
  fed either a `scipy.integrate.OdeSolution` (the numpy sweep, `from_ode_solution`) or
  arrays of a Runge--Kutta continuous extension (`from_steps`: step ends, step-start
  states and the coefficients ``Q`` of ``y = y_old + h Q [x, x^2, ...]``, as scipy's
  ``RkDenseOutput`` holds them), one set per group of state columns, so that a compiled
  sweep that steps each input on its own grid can give one set per input
  (`input_columns` names an input's columns of a closure's state).
* `DenseSolution` maps those states to the fields with the sweep's own assembly
  (`invimbed._core.sweep.assembly.collect_results` and the closure's ``per_depth``): the same
  code, the same depth gradient, error estimate and verdict as the requested depths get.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from .assembly import collect_results
from ..integrators.common import Outcome
from ..results.results import Draft, ImbeddingResult, sweep_result
from ..inputs.validation import as_float_array, describe

#: Largest temporary (depths x state x coefficients) of one block of `from_steps`.
_BLOCK = 1 << 22


class StateInterpolant:
    """The sweep's flat state ``y(p)`` at any depth of the swept interval.

    Holds one or more parts, each giving some columns of the state; every part must
    cover the interval. Call it with depths ``p`` (n,) to get the states (n, size).

    Parameters
    ----------
    size : int
        Length of the state.
    parts : sequence of (columns, evaluate, (lo, hi))
        ``columns``: indices into the state (a slice or an int array) that ``evaluate``
        fills; ``evaluate(p)`` maps depths (n,) to values (n, len(columns));
        ``(lo, hi)`` the depths it covers.

    Attributes
    ----------
    interval : (float, float)
        The depths every part covers.
    solution : scipy.integrate.OdeSolution or None
        What `from_ode_solution` was given.
    """

    def __init__(self, size: int, parts: Sequence[tuple[Any, Callable, tuple[float, float]]]
                 ) -> None:
        if not parts:
            raise ValueError("`parts` must hold at least one part, but got none")
        self.size = int(size)
        self.parts = list(parts)
        self.solution: Any = None
        self.interval = (max(float(part[2][0]) for part in self.parts),
                         min(float(part[2][1]) for part in self.parts))

    def __call__(self, p: Any) -> np.ndarray:
        p = np.atleast_1d(np.asarray(p, dtype=float))
        out = np.empty((p.size, self.size))
        for columns, evaluate, _ in self.parts:
            out[:, columns] = evaluate(p)
        return out

    @classmethod
    def from_ode_solution(cls, sol: Any, columns: Any = None,
                          size: int | None = None) -> "StateInterpolant":
        """The states of a `scipy.integrate.OdeSolution` (or of ``solve_ivp(...,
        dense_output=True).sol``) as one part, columns ``columns`` (default all) of a
        state of length ``size`` (default the solution's)."""
        width = int(np.asarray(sol(sol.t_min)).size)
        columns = slice(0, width) if columns is None else columns
        out = cls(width if size is None else size,
                  [(columns, lambda p: np.asarray(sol(p)).reshape(width, -1).T,
                    (float(sol.t_min), float(sol.t_max)))])
        out.solution = sol
        return out

    @classmethod
    def from_steps(cls, ts: Any, y_old: Any, Q: Any, columns: Any = None,
                   size: int | None = None) -> "StateInterpolant":
        """A Runge--Kutta continuous extension given as arrays, as one part.

        Parameters
        ----------
        ts : array_like, shape (m + 1,)
            Ends of the ``m`` accepted steps, monotone (a sweep runs them from ``q`` down).
        y_old : array_like, shape (m, S)
            The state at the start ``ts[j]`` of each step.
        Q : array_like, shape (m, S, k)
            Each step's coefficients: ``y(p) = y_old[j] + h_j Q[j] @ [x, x^2, ..., x^k]``
            with ``h_j = ts[j + 1] - ts[j]`` and ``x = (p - ts[j]) / h_j`` (scipy's
            ``RkDenseOutput``: ``k = 4`` for RK45, 3 for RK23).
        columns : slice or array of int, optional
            Where the ``S`` values sit in the state (default all, ``size = S``).
        size : int, optional
            Length of the state (default ``S``).
        """
        ts = as_float_array(ts, "ts")
        y_old = as_float_array(y_old, "y_old")
        Q = as_float_array(Q, "Q")
        m = ts.size - 1
        if ts.ndim != 1 or m < 1 or y_old.shape[:1] != (m,) or y_old.ndim != 2 \
                or Q.shape[:2] != y_old.shape or Q.ndim != 3:
            raise ValueError(f"`ts`, `y_old`, `Q` must have shapes (m + 1,), (m, S), (m, S, k) "
                             f"with m >= 1, but got {ts.shape}, {y_old.shape}, {Q.shape}")
        h = np.diff(ts)
        if not (np.all(h > 0) or np.all(h < 0)):
            raise ValueError("`ts` must be strictly monotone (the ends of accepted steps)")
        S, k = Q.shape[1], Q.shape[2]
        key = ts if h[0] > 0 else -ts
        powers = np.arange(1, k + 1)

        def evaluate(p: np.ndarray) -> np.ndarray:
            j = np.clip(np.searchsorted(key, p if h[0] > 0 else -p, side="right") - 1, 0, m - 1)
            out = np.empty((p.size, S))
            per = max(1, _BLOCK // max(1, S * k))
            for lo in range(0, p.size, per):
                jj = j[lo:lo + per]
                x = (p[lo:lo + per] - ts[jj]) / h[jj]
                poly = x[:, None] ** powers                       # (n, k)
                out[lo:lo + per] = y_old[jj] + h[jj, None] * np.einsum("nsk,nk->ns",
                                                                        Q[jj], poly)
            return out

        columns = slice(0, S) if columns is None else columns
        return cls(S if size is None else size,
                   [(columns, evaluate, (float(ts.min()), float(ts.max())))])

    @classmethod
    def stack(cls, parts: Sequence["StateInterpolant"], size: int) -> "StateInterpolant":
        """One interpolant of a state of length ``size`` from several that each fill some
        of its columns (one per input of a batch stepped input by input)."""
        return cls(size, [part for each in parts for part in each.parts])


def input_columns(shapes: dict[str, tuple[int, ...]], b: int) -> np.ndarray:
    """The columns of input ``b`` in a flat state of named blocks whose leading axis is the
    batch (`invimbed._core.closures.base.Layout` of the jet and stencil closures), in
    block order: where a sweep stepping each input on its own puts that input's state."""
    cols, start = [], 0
    for shape in shapes.values():
        size = int(np.prod(shape, dtype=int))
        per = size // shape[0]
        cols.append(start + b * per + np.arange(per))
        start += size
    return np.concatenate(cols)


class DenseSolution:
    """``sol(p)``: every field of a sweep at any depth ``p`` of its swept interval.

    The result's ``sol``, built by `attach_dense`. The states come from the continuous
    extension of the accepted steps (`StateInterpolant`), the fields from them with the
    sweep's own assembly, so ``sol(result.depths)`` reproduces the result (its requested
    depths are read from the same interpolants).

    Attributes
    ----------
    interval : (float, float)
        The swept interval ``(p_low, q)``: from the deepest depth the sweep reached up to
        ``q``.
    states : StateInterpolant
        The sweep's state at any depth.
    layout : Layout or None
        The closure's named blocks of that state (`solve_imbedding`'s sweeps), for
        `input_columns`.
    """

    def __init__(self, setup: Any, states: StateInterpolant, per_depth: Callable,
                 shapes: dict[str, tuple[int, ...]], stacked: Callable | None = None,
                 finish: Callable | None = None, build: Callable = sweep_result,
                 **assembly: Any) -> None:
        self.setup = setup
        self.build = build
        self.states = states
        self.per_depth = per_depth
        self.stacked = stacked
        self.shapes = shapes
        self.finish = finish
        self.assembly = assembly
        self.interval = states.interval
        self.layout: Any = None

    def __call__(self, p: Any) -> ImbeddingResult:
        """The fields at depths ``p``.

        Parameters
        ----------
        p : float or array_like, shape (n,)
            Depths in `interval`, in any order, repeats allowed.

        Returns
        -------
        ImbeddingResult
            Like the sweep's result, at the depths ``p``: ``z``, ``value``, ``adjoint``,
            ``param_grad``, ``depth_grad`` (and the extra fields of the solver, such as
            ``feedback`` and ``feedback_jacobian`` of `solve_optimal`),
            ``error_estimate``, ``converged``, ``success``, ``status``, ``message``. A
            scalar ``p`` drops the depth axis. ``nfev`` is 0: no step is taken.

        Raises
        ------
        ValueError
            For a depth outside `interval`, or not finite, naming ``p``.
        """
        arr = as_float_array(p, "p")
        lo, hi = self.interval
        if arr.ndim > 1:
            raise ValueError(f"`p` must be a depth or a 1-d array of depths, but got an "
                             f"array of shape {arr.shape}")
        flat = np.atleast_1d(arr)
        if flat.size == 0:
            raise ValueError("`p` must hold at least one depth, but got an empty array")
        bad = ~np.isfinite(flat) | (flat < lo) | (flat > hi)
        if np.any(bad):
            first = float(flat[np.argmax(bad)])
            got = (f"p = {first!r}" if flat.size == 1 else
                   f"{int(bad.sum())} of {flat.size} depths outside it, the first "
                   f"{first!r} (min {np.nanmin(flat):.10g}, max {np.nanmax(flat):.10g})")
            raise ValueError(f"`p` must lie in the swept interval [{lo:.10g}, {hi:.10g}] "
                             f"(from the deepest depth the sweep reached up to q), but got "
                             f"{got}; request deeper depths from the solver to sweep further")
        permutation = np.argsort(-flat, kind="stable")
        at = replace(self.setup, depths=flat.copy(), permutation=permutation,
                     depths_desc=flat[permutation])
        outcome = Outcome(ys=self.states(at.depths_desc),
                          message="Interpolated at every requested depth from the sweep's "
                                  "accepted steps.")
        if self.stacked is not None:    # every depth at once: the closure's fields of
            got = self.stacked(outcome.ys)    # stacked states (n, B, ...)
            res = collect_results(at, outcome, None, self.shapes, stacked_fields=got,
                                  **self.assembly)
        else:
            res = collect_results(at, outcome, self.per_depth, self.shapes, **self.assembly)
        if self.finish is not None:
            res = self.finish(res)
        res = res.but(nfev=0)
        return self.build(_drop_depth_axis(res, tuple(self.shapes)) if arr.ndim == 0 else res)

    def __repr__(self) -> str:
        lo, hi = self.interval
        return f"DenseSolution(interval=({lo:.6g}, {hi:.6g}))"


def _drop_depth_axis(res: Draft, keys: tuple[str, ...]) -> Draft:
    """The draft of one depth without its depth axis (a scalar ``p``)."""
    one = {}
    for k in keys + ("converged", "series_ratio", "depths", "depth_order", "exact_fallback"):
        v = res.get(k)
        if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == 1:
            one[k] = v[0]
    est = res.get("error_estimate")
    if est is not None:
        one["error_estimate"] = {k: v[0] for k, v in est.items()}
    if isinstance(one.get("depths", res.get("depths")), np.ndarray):
        one["depths"] = float(one.get("depths", res.get("depths")))
    return res.but(**one)


def attach_dense(res: Draft, setup: Any, outcome: Outcome, per_depth: Callable,
                 shapes: dict[str, tuple[int, ...]], *, stacked: Callable | None = None,
                 finish: Callable | None = None, build: Callable = sweep_result,
                 **assembly: Any) -> Draft:
    """The draft ``res`` with its ``sol`` (`DenseSolution`) where the integrator kept the steps
    (``outcome.extra["steps"]``, `invimbed._core.integrators.integrate_scipy` with
    ``dense_output=True``); ``assembly`` are the keywords of the sweep's own
    `collect_results` call (``closure``, ``method``, ``with_errors``, ``tol``...);
    ``stacked(ys)``, where the closure has it, the ``(fields, errors)`` of states ``ys``
    (n, size) at once, for `collect_results`' ``stacked_fields`` (else ``per_depth`` runs
    depth by depth); ``finish`` what the solver does to a draft after it (the status of
    one without an estimate), ``build`` what builds the result from the draft
    (`sweep_result`, `invimbed._core.results.results.feedback_result`)."""
    steps = outcome.extra.get("steps")
    if steps is None:
        return res
    from scipy.integrate import OdeSolution

    ts, interpolants = steps
    if interpolants:
        states = StateInterpolant.from_ode_solution(OdeSolution(ts, interpolants))
    else:       # no step taken (every depth at q): the state at q only
        y = np.asarray(outcome.ys[np.argmax(setup.depths_desc == ts[0])])
        states = StateInterpolant(y.size, [(slice(None), lambda p: np.tile(y, (p.size, 1)),
                                            (float(ts[0]), float(ts[0])))])
    return res.but(sol=DenseSolution(setup, states, per_depth, shapes, stacked=stacked,
                                     finish=finish, build=build, **assembly))



def attach_closure_dense(res: Draft, setup: Any, outcome: Outcome, clo: Any,
                         per_depth: Callable, shapes: dict[str, tuple[int, ...]], method: str,
                         finish: Callable | None = None) -> Draft:
    """`attach_dense` for the sweep of `invimbed._core.sweep.imbedding` with the closure ``clo``:
    a jet's fields and estimate of many states at once (`JetClosure.fields` of stacked
    states), a stencil's depth by depth."""
    from ..closures import JetClosure

    stacked = None
    if isinstance(clo, JetClosure):
        def stacked(ys: np.ndarray) -> tuple:
            return (clo.fields(ys), clo.error_estimate(ys), clo.lower_difference(ys),
                    clo.upper_difference(ys))
    res = attach_dense(res, setup, outcome, per_depth, shapes, stacked=stacked,
                       finish=finish, closure=clo.name, method=method,
                       with_errors=clo.has_error_estimate)
    sol = res.get("sol")
    if sol is not None:
        sol.layout = clo.layout
    return res


#: How much ``dense_output=True`` tightens the integrator's ``rtol`` and ``atol``, per
#: method, so that ``sol(p)`` is within the requested tolerance (docs/accuracy.md, "Dense
#: output: any depth from one sweep"). A step-size controller keeps each step's local error
#: below the tolerance, and the global error it leaves is proportional to it, ``C (rtol
#: |field| + atol)``, with a constant ``C`` of the problem and the method (the tolerance
#: proportionality of the controllers, Hairer, Norsett and Wanner, *Solving ODEs I*,
#: II.4). Measured on the linear-quadratic problems where the jet is exact, ``C`` was up
#: to 1.7 (RK45), 8.2 (RK23), 8.1 (DOP853, whose interpolant is of lower order than its
#: steps), 0.4 (Radau), 25.8 (BDF) and 1.9 (LSODA); with these factors the worst field
#: was at most 0.25 of the requested tolerance (a margin of 4). BDF's ``C`` grows as the
#: tolerance shrinks (a variable-order method whose order the tolerance sets), so its
#: factor is the largest. A measured margin, not a proof.
DENSE_TIGHTENING = {"RK45": 10.0, "RK23": 30.0, "DOP853": 100.0, "Radau": 10.0,
                    "BDF": 1000.0, "LSODA": 10.0}


def dense_tolerances(method: str, rtol: float, atol: float) -> tuple[float, float]:
    """The integrator's ``(rtol, atol)`` of a sweep with ``dense_output=True``: the
    requested ones divided by `DENSE_TIGHTENING` of ``method`` (1 for a method without
    a continuous extension, which `check_dense_output` refuses)."""
    factor = DENSE_TIGHTENING.get(method, 1.0)
    return float(rtol) / factor, float(atol) / factor


def check_dense_output(dense_output: Any, **why_not: Any) -> bool:
    """``dense_output`` as a bool; with True, a `ValueError` naming it and the first
    setting in ``why_not`` (``name=(value, reason)`` where the reason is not None) that
    rules it out."""
    if not isinstance(dense_output, (bool, np.bool_)):
        raise TypeError(f"`dense_output` must be True or False, but got {describe(dense_output)}")
    if dense_output:
        for name, (value, reason) in why_not.items():
            if reason:
                raise ValueError(f"`dense_output=True` cannot be combined with "
                                 f"{name}={value!r}: {reason}")
    return bool(dense_output)


def dense_conflicts(method: Any, backend: Any, tol: Any, fallback: Any) -> dict[str, tuple]:
    """The settings of `solve_imbedding` that rule out ``dense_output``, for
    `check_dense_output`."""
    from ..integrators import FIXED_METHODS

    return {
        "method": (method, "a fixed-step method keeps no continuous extension of its steps; "
                           "use one of scipy's adaptive methods ('RK45', 'RK23', 'DOP853', "
                           "'Radau', 'BDF', 'LSODA')" if method in FIXED_METHODS else None),
        "backend": (backend, "of the accelerated backends only numba's RK45 and RK23 sweep "
                             "keeps a continuous extension of its steps; use backend='numpy' "
                             "(or backend='numba' with method='RK45' or 'RK23')"
                    if backend == "cupy" or (backend == "numba" and method not in
                                             ("RK45", "RK23")) else None),
        "tol": (tol, "with `tol` each depth's fields come from the jet order that converged "
                     "it, so no single sweep covers the interval; drop `tol` and choose "
                     "`order`" if tol is not None else None),
        "fallback": (fallback, "the depths recomputed by the exact ensemble have no "
                               "continuous extension; drop `fallback`"
                     if fallback is not None else None),
    }
