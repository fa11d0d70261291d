"""Joint Taylor coefficients of a sympy provider's generated numpy code, in one pass.

`DerivativeProvider.taylor_joint` builds the coefficients of ``g`` in ``(z, theta)`` from
one derivative tensor per ``(dz, dth)`` block: for the optimal feedback (Theorem 3,
docs/theory.md, "Optimality") at degree ``L`` that is ``C(L + 2, 2)`` calls per ``g``,
per input and per evaluation of the sweep's right-hand side, each one a generated
function behind its own wrapper (`invimbed._core.derivatives.symbolic._Compiled`): the
wrappers, not the code, were most of the time at small sizes.

`joint_coefficients` calls the same generated functions of the same requests (each one
cse'd on its own, as `SympyProvider.derivative` runs it) on the batch's columns, prepared
once, writes their values one after the other into one buffer, and gathers every column
of the result from it in one indexing through a plan made once per ``(which, order)``
(`JointPlan`). The values and their division by ``alpha!`` are those of the block-wise
construction, bit for bit; only the bookkeeping around them is shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import _joint_blocks


@dataclass(frozen=True)
class JointPlan:
    """How ``taylor_joint(which, ., order)`` reads the generated requests.

    ``codes``: the generated numpy function of each block but the value (and but the
    blocks that are zero by definition, ``T``'s ``theta`` derivatives), in buffer order;
    ``sizes``: how many values each writes; ``value``: the value block's columns, flat
    positions and ``alpha!``; ``cols``, ``index``, ``fact``: ``out[..., cols] =
    buf.T[:, index] / fact``, where the last row of ``buf`` is zero."""

    codes: tuple
    sizes: tuple
    value: tuple
    cols: np.ndarray
    index: np.ndarray
    fact: np.ndarray


def joint_plan(prov: Any, which: str, order: int) -> JointPlan:
    """The `JointPlan` of a numpy `SympyProvider` (its requests built on the way, in the
    order `DerivativeProvider.taylor_joint` builds them)."""
    n_out = prov.n_state if which == "f" else 1
    codes, sizes, cols, index, fact = [], [], [], [], []
    value, total = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.ones(0)), 0
    for dz, dth, bcols, pos, bfact in _joint_blocks(prov.n_state, prov.n_theta, order):
        if dz + dth == 0:
            value = (bcols, pos, bfact)
            continue
        if which == "T" and dth:                 # zero: the buffer's last row
            rows = np.full((n_out, bcols.size), -1, dtype=np.int64)
        else:
            comp = prov.evaluator(which, dz, dth)
            g = comp.gather.reshape(n_out, -1)[:, pos]
            rows = np.where(g < comp.n_values, g + total, -1)
            codes.append(comp.fn)
            sizes.append(comp.n_values)
            total += comp.n_values
        cols.append(bcols)
        index.append(rows)
        fact.append(bfact)
    index = np.concatenate(index, axis=1) if index else np.zeros((n_out, 0), np.int64)
    index = np.where(index < 0, total, index).reshape(prov.out_shape(which) + (-1,))
    return JointPlan(tuple(codes), tuple(sizes), value,
                     np.concatenate(cols) if cols else np.zeros(0, np.int64), index,
                     np.concatenate(fact) if fact else np.zeros(0))


def joint_coefficients(prov: Any, plans: dict, which: str, t: Any, z: np.ndarray,
                       theta: np.ndarray | None, order: int) -> np.ndarray:
    """``prov.taylor_joint(which, t, z, theta, order)`` through its `JointPlan` (made
    once, kept in ``plans``): the value by `derivative` (every check), the other blocks'
    generated code on the checked inputs (the same values as
    `DerivativeProvider.taylor_joint`'s, bit for bit)."""
    value, t, z, theta, lead = prov._joint_inputs(which, t, z, theta)
    plan = plans.get((which, order))
    if plan is None:
        plan = plans[which, order] = joint_plan(prov, which, order)
    vcols, vpos, vfact = plan.value
    out = np.empty(lead + (vcols.size + plan.cols.size,))
    out[..., vcols] = value.reshape(lead + (-1,))[..., vpos] / vfact
    # the arguments as `_Compiled.__call__` passes them to each request's code
    t = np.ascontiguousarray(t, dtype=float) if np.ndim(t) != 0 else np.float64(t)
    args = (t, *np.ascontiguousarray(z.T), *np.ascontiguousarray(theta.T))
    buf = np.empty((sum(plan.sizes) + 1, lead[0]))
    buf[-1] = 0.0
    j = 0
    for fn, n in zip(plan.codes, plan.sizes):
        if n:
            for v in fn(*args):
                buf[j] = v       # broadcasts constants, which lambdify returns as scalars
                j += 1
    out[..., plan.cols] = buf.T[:, plan.index] / plan.fact
    return out
