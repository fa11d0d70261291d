"""``solve_adjoint(strategy="ensemble", backend="numba")``: the exact ensemble adjoint as
one compiled numba kernel.

What it computes is `invimbed._core.reference.adjoint._ensemble`'s contract, row by row: every
(depth ``p_i``, input ``x_b``) pair is a row ``r = i B + b`` (depths in descending
order), integrated by the algorithm of `invimbed._core.integrators.ensemble.integrate_rows`
(scipy's RK45 / RK23 tableaux, first-step rule, step-size control, stops exactly on the
control's breakpoints with the derivative of the next piece after them, non-finite
stages as rejections, the step budget, Shampine's ``h |lambda|``), so that both take
the same steps and agree to rounding. Not bit for bit: numpy's matmul (BLAS, fused
multiply-adds) and einsum add some sums in another order (the error norm is summed
pairwise as numpy sums it). Measured: the fields agree to 1e-12 relative with exact
derivatives and to ~1e-10 with finite differences, whose quotients magnify the last
bit of ``z(t)``; step sizes agree to ~1e-9 (the error estimate cancels), so where a
failed row stopped may differ in the tenth digit.

How it runs
-----------
* One loop over the rows (`invimbed._backends._ensemble_kernels`), in contiguous chunks on
  numba's number of threads (`invimbed._backends._chunks.run_rows`); a row is
  one thread's work from start to end: forward pass of ``[z, int R]`` from ``p_i`` to
  ``q`` with dense output, ``J = y_N + T(z(q))``, ``lambda(q) = T_z``, backward pass of
  ``[lambda, mu]`` from ``q`` down to ``p_i`` on that dense output; then
  ``dJ/dp = -(lambda(p_i) . f + R)`` by the core's `depth_gradient` (``f`` and ``R`` of
  per-sample functions in a compiled loop, `invimbed._backends._numba.CompiledValues`). The rows are handed out in a low-discrepancy order so that every thread gets
  deep (long) and shallow (short) rows alike.
* Memory of the dense output: each row keeps its own, in a local buffer (one array,
  a step per row) grown by doubling from 32 steps: ``(S (k + 2) + 2)`` floats per
  accepted forward step (``S = N + 1``, ``k + 1 = 4`` for RK45, 3 for RK23), freed when
  the row is done. Only the rows in flight hold one, i.e. at most (threads) x (the
  longest row's steps, rounded up to a power of two) x that size; nothing grows with
  the number of rows (the numpy ensemble keeps every row's dense output at once).
* Functions: the machinery of the numba sweep (`invimbed._backends._numba`):
  per-sample ``f(t, z, theta)``, ``R``, ``T(z)`` and the derivatives the user gave,
  compiled in nopython mode (`BackendCompileError` if numba cannot), missing
  derivatives by the `FiniteDifferences` rule in compiled code (a derivative plan of
  `invimbed._backends._plans`), `from_sympy` problems on the symbolic provider's
  generated per-sample code.
* Controls: `NoControl`, `Constant` and `PiecewiseConstant` (theta and ``dtheta/dw``
  per row from the piece holding the midpoint of the interval to the next stop, as
  `PiecewiseConstant.pieces`); any other control raises ``ValueError``.
* ``nfev``: the largest number of right-hand-side evaluations of any row, forward and
  backward together (the numpy ensemble counts vectorised calls, which is about the
  same number: every row is evaluated in each of them).
* Failures are per row, as in the numpy ensemble: NaN fields, ``success`` False, the
  message naming the first failed row (`invimbed._core.results.failures`).
* Speed: the user's functions that are exact derivatives are called directly (see
  `direct_codes`); each allocates its result, which is most of the time per step for
  small problems. The kernel is compiled once per machine and cached on disk
  (``cache=True``; 31 s of CPU from an empty cache, announced on stderr,
  `invimbed._core.runtime.compile_cost.compiling`); a new process loads it in about a second.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._core.reference.row_chunks import RowCost, output_bytes
from .._core.results.failures import empty_fields
from .._core.problem.open_loop import Constant, NoControl, PiecewiseConstant
from .._core.integrators.ensemble import DONE, TABLEAUX
from .._core.setup.arguments import Setup
from .._core.sweep.assembly import depth_gradient
from ._chunks import run_rows
from ._numba import (CompiledValues, _fingerprint, compile_loop, eval_signature,
                     function_tuple, import_numba)
from . import _bundles as bundles
from ._plans import BASE_KEYS, Request, build_plan

_KERNELS: dict[tuple, Any] = {}


def control_arrays(control: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(knots, values)`` of a piecewise-constant view of ``control``: theta on piece
    ``k`` is ``values[k]`` and ``w = values.ravel()``, so ``dtheta/dw`` selects block
    ``k`` of ``w``. `Constant` and `NoControl` are one piece."""
    kind = type(control)
    if kind is PiecewiseConstant:
        return (np.ascontiguousarray(control.knots, dtype=float),
                np.ascontiguousarray(control.values, dtype=float))
    if kind in (Constant, NoControl):
        return (np.array([-np.inf, np.inf]),
                np.ascontiguousarray(control.w, dtype=float).reshape(1, control.size))
    raise ValueError(
        f"backend='numba' runs the ensemble with `control` None, Constant or "
        f"PiecewiseConstant, but got control={control!r} ({kind.__name__}); use "
        f"backend='numpy', which runs any control")


def row_arrays(setup: Setup) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(knots, values, depths, stops)`` of the compiled ensembles' rows: the control
    (`control_arrays`), the depths in descending order and the control's breakpoints
    strictly between the deepest depth and ``q``, sorted (where the rows' steps stop)."""
    ctrl = setup.control
    knots, values = control_arrays(ctrl)
    depths = np.ascontiguousarray(setup.depths_desc, dtype=float)
    stops = np.sort(ctrl.breakpoints[(ctrl.breakpoints > depths.min())
                                     & (ctrl.breakpoints < float(setup.q))]).astype(float)
    return knots, values, depths, stops


def direct_codes(plan: Any, pieces: list[tuple[str, int, int, int]]) -> np.ndarray:
    """How the kernel evaluates each derivative ``(which, request, dz, dth)`` it needs:
    the ``BASE_KEYS`` index of a function of the problem (the user's, or generated by
    `from_sympy`) that is that very derivative, so that the plan's piece differences
    nothing (the kernel calls it directly, without `eval_request`'s bookkeeping, which
    costs several times these small functions' own time); -1 for a zero function (a
    missing running loss); -2 for a piece that the plan differences (the kernel runs
    `eval_request`, the rule of `FiniteDifferences`)."""
    out = np.full(len(pieces), -2, dtype=np.int64)
    for i, (which, r, dz, dth) in enumerate(pieces):
        pc = int(plan.req_start[r]) + dz
        b = int(plan.base[pc])
        if b < 0:
            out[i] = -1
        elif plan.levels[pc] == 0 and BASE_KEYS[b] == (which, dz, dth):
            out[i] = b
    return out


def ensemble_numba(setup: Setup, method: str, rtol: float, atol: float,
                   opts: dict) -> tuple[dict, int, tuple]:
    """The ensemble adjoint on the numba backend; the contract of
    `invimbed._core.reference.adjoint._ensemble` (see the module docstring): ``(fields, nfev,
    rows)``, ``rows`` the `RowCode` s and last times of every row
    (`invimbed._core.reference.row_chunks.row_outcome`)."""
    import_numba()
    ctrl = setup.control
    knots, values, depths, stops = row_arrays(setup)
    prov = setup.provider
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    n = depths.size
    rows = n * B
    q = float(setup.q)
    tab = TABLEAUX[method]
    reqs = [Request("f", 0, 0), Request("R", 0, 0), Request("f", 0, 1), Request("R", 0, 1),
            Request("f", 1, 0) if nw else Request("f", 0, 0),
            Request("R", 1, 0) if nw else Request("R", 0, 0), Request("T", 0, 1)]
    plan = build_plan(prov, reqs)
    fns = function_tuple(setup, plan.used)
    arrays = list(plan.arrays())
    base = arrays[1].copy()          # the backward pass needs f_z and R_z, not f and R:
    for r in (2, 3):                 # degree 0 of those requests is left out (zero)
        base[plan.req_start[r]] = -1
    arrays[1] = base
    how = direct_codes(plan, [("f", 0, 0, 0), ("R", 1, 0, 0), ("f", 2, 1, 0), ("R", 3, 1, 0),
                              ("f", 4, 0, 1), ("R", 5, 0, 1)])
    fields = empty_fields(n, B, N, nw)
    out_z = fields["z"].reshape(rows, N)
    out_v = fields["value"].reshape(rows)
    out_a = fields["adjoint"].reshape(rows, N)
    out_w = fields["param_grad"].reshape(rows, nw)
    out_steps = fields["nsteps"].reshape(rows)
    out_nfev = np.zeros(rows, dtype=np.int64)
    out_status = np.zeros((rows, 2), dtype=np.int64)
    out_t = np.zeros(rows)
    out_hl = np.zeros(rows)
    # a low-discrepancy order of the rows: every contiguous chunk of the loop (`run_rows`) gets
    # rows of every depth (the deep rows are the long ones)
    perm = np.argsort((np.arange(rows) * 0.6180339887498949) % 1.0, kind="stable")
    c = np.ascontiguousarray
    first = opts.get("first_step")
    args = (fns, tuple(arrays), how, perm.astype(np.int64),
            bundles.Rows(c(setup.x, dtype=float), depths, q, N, M, nw),
            bundles.row_steps(tab, knots, values, stops, rtol, atol, first,
                              opts.get("max_step", np.inf), opts["max_steps"]),
            bundles.RowsOut(out_z, out_v, out_a, out_w, out_steps, out_nfev, out_status,
                            out_t, out_hl))
    if rows:
        _run(args)
    nfev = int(out_nfev.max()) if rows else 0
    status = out_status     # `RowCode`s, as `integrate_rows` returns them
    fwd_ok = status[:, 0] == DONE
    good = fwd_ok & (status[:, 1] == DONE)
    if np.any(good):        # dJ/dp by the core's formula, f and R in a compiled loop
        values = (CompiledValues(setup, prov) if setup.problem.derivative_provider is None
                  else prov)
        p = np.repeat(depths, B)[good]
        x = np.tile(setup.x, (n, 1))[good]
        fields["depth_grad"].reshape(rows)[good] = depth_gradient(
            dataclasses.replace(setup, provider=values), p, out_a[good], x)
    return fields, nfev, (status[:, 0], status[:, 1], out_t, out_hl)


def row_cost(setup: Setup) -> RowCost:
    """Bytes per row of `ensemble_numba` (`invimbed._core.reference.row_chunks`): the fields and the
    kernel's per-row arrays of a chunk, the row order and the depth gradient's arrays;
    the dense output is per thread (see the module docstring), none per row."""
    N, M = setup.x.shape[1], setup.control.size
    return RowCost(held=output_bytes(setup) + 34,
                   work=output_bytes(setup) + 8 * (24 + 6 * N + 2 * M), step=0)


def _run(args: tuple) -> None:
    loop, one, ev = _kernel(args)
    run_rows(loop, (one, ev, *args), args[3].shape[0])


def _kernel(args: tuple) -> tuple[Any, Any, Any]:
    """The compiled loop (cached on disk) for the types of ``args``, and the per-row
    function and the derivative evaluator it receives as function values (as
    `invimbed._backends._numba._build_kernel` does for the sweeps)."""
    key = _fingerprint(args[1:])
    if key not in _KERNELS:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ff]irst-class function type")
            _KERNELS[key] = _build(args)
    return _KERNELS[key]


def _build(args: tuple) -> tuple[Any, Any, Any]:
    from numba import types

    from ._ensemble_kernels import SLOTS, _row, ensemble_rows
    from ._numba_calls import eval_request

    argtypes, ev_sig, ev_type = eval_signature(args)
    i8 = types.int64
    # _row takes the loop's arguments without the row order: (r, ev, fns, plan, how, rows,
    # step, res)
    one_sig = types.void(i8, ev_type, *argtypes[:3], *argtypes[4:])
    for key, slot in SLOTS.items():   # the kernel calls these functions by position
        if BASE_KEYS[slot] != key:
            raise RuntimeError(f"internal error: _ensemble_kernels.SLOTS[{key}] = {slot} "
                               f"disagrees with _plans.BASE_KEYS")
    return compile_loop("ensemble", ensemble_rows, _row, one_sig, ev_sig, argtypes), _row, \
        eval_request
