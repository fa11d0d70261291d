"""The arguments of the compiled kernels, bundled into a few named tuples and built here.

The kernels (`invimbed._backends._numba_kernels._jet_sweep_one`,
`invimbed._backends._sweep_kernels.sweep_one`, `invimbed._backends._ensemble_kernels._row`)
take, beyond the item they work on, the derivative evaluator and the user functions
(first-class function values), a derivative plan, and these bundles: flat named tuples
of arrays and scalars, which numba passes as they are (``NamedTuple`` types, fixed per
kernel, so that the kernels stay compiled once per machine) and numba-cuda can pass to
device functions too. Flat: numba's ``prange`` loops, which ran the rows before they ran
in chunks on threads (`invimbed._backends._chunks`), could not take a tuple nested in an
argument (a tuple of arrays inside a bundle failed to compile), so tuples of tables travel
as arguments of their own. What each field holds is said where the bundle is defined.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Sequence

import numpy as np

from .._core.derivatives.multiindex import n_coefficients

#: The jets carried side by side for the inputs ``x`` (B, N) from ``q``: ``N`` states,
#: ``M`` control values, ``nw`` parameters; ``CF`` (``CW``) Taylor coefficients of ``f``
#: and ``R`` (of their ``w``-gradients); per carried order ``o``, ``cZs[o]`` coefficients
#: of each component of ``Z``, ``cVs[o]`` of ``V`` and of each row of ``W``, the order's
#: block from ``offs[o]`` in the state of ``size`` entries. (The index tables of each
#: order, `invimbed._backends._numba._jet_tables`, travel beside it: a bundle holds
#: arrays and scalars only, see the module docstring.)
Jet = namedtuple("Jet", "x q N M nw CF CW cZs cVs offs size")

#: The Taylor-mode tapes of ``f``, ``R``, ``T`` (``use``: whether they are used, else
#: a derivative plan), each as ``(ops, par, kind, outputs)`` of
#: `invimbed._core.derivatives._tape.Tape`, and the product table ``(ptr, ib, io)`` of
#: degree ``F`` (`invimbed._core.derivatives._taylor_numba.plan`), these 15 arrays in that
#: order `pack`ed (``ints``, ``flts``, ``kinds``, ``meta``;
#: `invimbed._backends._packed.tape_arrays` unpacks them); ``Df`` polynomials
#: per node.
Tapes = namedtuple("Tapes", "use ints flts kinds meta F Df")

#: The control's pieces of an adaptive sweep (`invimbed._backends.sweep_adaptive`):
#: ``seg[s] = (start, end)``, ``theta[s]``, ``jac[s] = d theta / d w``; the requested
#: depths and the piece of each (``dep_seg``, -1 at ``q``).
Grid = namedtuple("Grid", "seg theta jac depths dep_seg")

#: The step control of an adaptive sweep: the embedded pair's tableau (``A``, ``B``,
#: ``C``, ``E``, ``P``: `invimbed._core.integrators.tableau.ButcherTableau`), the
#: tolerances and step bounds (``first_step``, ``min_step``: 0 for none), scipy's
#: constants (`invimbed._core.integrators.rules`), the step budget, the order of the
#: error estimator, how many steps to keep for a dense output, and whether ``theta(q)``
#: is the first piece's.
Stepper = namedtuple("Stepper", "A B C E P rtol atol first_step max_step min_step safety "
                                "min_factor max_factor max_steps order cap q_same")

#: What an adaptive sweep writes: the recorded fields ``out`` (n, B, orders, width),
#: ``f`` and ``R`` at the inputs ``fr``, ``info[b] = (code, evaluations, steps)``,
#: ``where[b] = (depth, step)`` of a failure, and the first steps kept for a dense output.
SweepOut = namedtuple("SweepOut", "out fr info where d_t d_h d_y d_Q")

#: A fixed-step schedule (`invimbed._core.integrators.schedule.Schedule`): the depth of
#: every stage, the steps, ``theta`` and its ``w``-Jacobian per stage, the tableau
#: (``A``, ``weights``), the depth recorded after each step (-1: none) and at ``q``, and
#: whether it is the paper's layer recursion.
Fixed = namedtuple("Fixed", "stage_p h theta jac A weights record record_initial disc")

#: What a fixed-step sweep writes: the fields at each depth, their estimated errors
#: (empty without the estimate), and where a sample stopped (`invimbed._backends._result`).
FixedOut = namedtuple("FixedOut", "z value adjoint param_grad err_z err_v err_a err_w "
                                  "fail_pos fail_p")

#: The rows of the ensemble adjoint: row ``r = i B + b`` is depth ``depths[i]`` and input
#: ``X[b]``; ``q``, ``N``, ``M``, ``nw`` as in `Jet`.
Rows = namedtuple("Rows", "X depths q N M nw")

#: The step control of the ensemble's rows (`invimbed._backends._ensemble_kernels._integrate`):
#: the tableau as in `Stepper`, the control (``knots``, ``values``) and its breakpoints
#: ``stops``, the tolerances and step bounds (``first_step`` -1: scipy's rule), scipy's
#: constants, the step budget, the order of the error estimator, the stage of
#: Shampine's stiffness estimate (-1: none) and the early stop of a stiff row
#: (`invimbed._core.integrators.rules.stiff_stops`: ``STIFF_H_LAMBDA``, ``STIFF_WINDOW``).
RowSteps = namedtuple("RowSteps", "A B C E P knots values stops rtol atol first_step "
                                  "max_step safety min_factor max_factor max_steps order "
                                  "stiff stiff_limit stiff_window")

#: What the ensemble writes per row.
RowsOut = namedtuple("RowsOut", "z value adjoint param_grad steps nfev status t h_lambda")


def pack(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray]:
    """``arrays`` (int64, float64 or int8; 1-D or 2-D) as ``(ints, flts, i8s, meta)``:
    each flat in the buffer of its type, one after the other, ``meta[k] = (start, rows,
    columns)`` of ``arrays[k]`` there (columns 0 for a 1-D array). A kernel takes these
    four arrays where it took the many (`invimbed._backends._packed.order_tables`
    and `invimbed._backends._packed.tape_arrays` return views of them, the same
    arrays): numba passes every array of a tuple argument as seven to nine scalars
    through each call and loop, whose code LLVM then optimises, and a kernel
    taking 124 arrays compiled for minutes (docs/performance.md, "Compiled kernels and
    the first run on a machine")."""
    bufs: dict[Any, list] = {np.dtype(np.int64): [], np.dtype(np.float64): [],
                             np.dtype(np.int8): []}
    meta = np.zeros((len(arrays), 3), np.int64)
    for k, a in enumerate(arrays):
        if a.dtype not in bufs or a.ndim not in (1, 2):
            raise AssertionError(f"internal error: cannot pack a {a.ndim}-D {a.dtype} array")
        got = bufs[a.dtype]
        meta[k] = (sum(b.size for b in got), a.shape[0], a.shape[1] if a.ndim == 2 else 0)
        got.append(np.ravel(a))
    return tuple(np.ascontiguousarray(np.concatenate(b) if b else np.zeros(0, t))
                 for t, b in bufs.items()) + (meta,)


def jet(x: np.ndarray, q: float, M: int, nw: int, orders: Sequence[int]) -> Jet:
    """The `Jet` of the carried ``orders`` at the inputs ``x`` (B, N): coefficients of
    ``f``, ``R`` and their gradients to degree ``max(orders) + 1``, each order's block of
    ``Z`` (degree ``K``), ``V`` and ``W`` (degree ``K + 1``) one after the other."""
    N = x.shape[1]
    cZs = np.array([n_coefficients(N, K) for K in orders], dtype=np.int64)
    cVs = np.array([n_coefficients(N, K + 1) for K in orders], dtype=np.int64)
    sizes = N * cZs + cVs * (1 + nw)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    C = n_coefficients(N, max(orders) + 1)
    return Jet(x, float(q), N, M, nw, C, C, cZs, cVs, offs, int(sizes.sum()))


def row_steps(tab: Any, knots: np.ndarray, values: np.ndarray, stops: np.ndarray,
              rtol: float, atol: float, first_step: float | None, max_step: float,
              max_steps: int) -> RowSteps:
    """The `RowSteps` of the tableau ``tab`` (a `ButcherTableau`) with scipy's constants
    of the step control (`invimbed._core.integrators.rules`); ``first_step`` None for
    scipy's first-step rule."""
    from .._core.integrators.rules import MAX_FACTOR, MIN_FACTOR, SAFETY, STIFF_WINDOW
    from .._core.results.failures import STIFF_H_LAMBDA

    c = np.ascontiguousarray
    return RowSteps(*tableau_arrays(tab), c(knots, dtype=float), c(values, dtype=float),
                    c(stops, dtype=float), float(rtol), float(atol),
                    -1.0 if first_step is None else float(first_step), float(max_step),
                    SAFETY, MIN_FACTOR, MAX_FACTOR, int(max_steps), int(tab.error_order),
                    -1 if tab.stiff_stage is None else int(tab.stiff_stage),
                    float(STIFF_H_LAMBDA), int(STIFF_WINDOW))


def tableau_arrays(tab: Any) -> tuple:
    """``(A, B, C, E, P)`` of a `ButcherTableau`, C-contiguous floats (the layout the
    kernels are compiled for)."""
    return tuple(np.ascontiguousarray(a, dtype=float) for a in (tab.A, tab.B, tab.C, tab.E,
                                                                 tab.P))
