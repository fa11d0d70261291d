"""Sums of products added up in a fixed order.

einsum, matmul and BLAS choose their own order of summation (and may fuse multiply-adds),
so two implementations of the same formula round differently. The numpy sweep uses these
helpers where the numba kernel adds term by term, so that both round alike and the two
backends can be compared bit for bit; a row's sum does not depend on the batch it is
computed in. Measured against einsum/tensordot/BLAS in the numpy sweep (jets 1 to 3 and
the stencil, B = 64 and 1024): no cost above the noise (docs/performance.md, "What the
numba backend keeps").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .namespace import on_device


def sum_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_j a[..., j] * b[..., j]`` (broadcast), added in the order ``j = 0, 1, ...``."""
    acc = a[..., 0] * b[..., 0]
    for j in range(1, a.shape[-1]):
        acc = acc + a[..., j] * b[..., j]
    return acc


def combine(coef: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sum_j coef[j] * rows[j]`` (``coef`` (n,), ``rows`` (n, size)), added in the order
    ``j = 0, 1, ...``: a Runge--Kutta stage or step from its stage derivatives."""
    acc = coef[0] * rows[0]
    for j in range(1, coef.shape[0]):
        acc = acc + coef[j] * rows[j]
    return acc


def sum_table(targets: np.ndarray, n_out: int) -> np.ndarray:
    """The table of `scatter_sum`: for each output ``k`` the positions ``j`` with
    ``targets[j] == k`` in increasing order, padded with ``len(targets)`` (a zero)."""
    targets = np.asarray(targets, dtype=np.int64)
    counts = np.bincount(targets, minlength=n_out)
    table = np.full((n_out, max(int(counts.max(initial=0)), 1)), targets.size, dtype=np.int64)
    order = np.argsort(targets, kind="stable")
    slot = np.arange(targets.size) - np.repeat(np.cumsum(counts) - counts, counts)
    table[targets[order], slot] = order
    return table


class SumPlan(NamedTuple):
    """How `scatter_sum` adds terms into ``n_out`` sums (`sum_plan`): rank-major.

    The outputs are ranked by their number of terms, most first (``rank[k]``: output
    ``k``'s place). Block ``r`` of ``order`` lists the positions of the ``r``-th term of
    the first ``sizes[r]`` ranked outputs (those that have one), so that the terms taken
    in ``order`` are contiguous slices added to the first ``sizes[r]`` running sums:
    each output's terms are added in the order their positions increase, with views
    instead of one gathered copy per term.
    """

    order: np.ndarray
    sizes: tuple[int, ...]
    rank: np.ndarray
    n_out: int
    #: the same positions as a rectangle (``max(len(sizes), 1)``, ``n_out``), flattened:
    #: row ``r`` holds the position of each output's ``r``-th term, or a pad where it has
    #: none: ``n_terms`` (-0.0: ``x + -0.0 == x`` for every ``x``, -0.0 included) and, in
    #: row 0 of an output without a term, ``n_terms + 1`` (+0.0): `sum_padded`
    padded: np.ndarray | None = None


def sum_plan(targets: np.ndarray, n_out: int) -> SumPlan:
    """The `SumPlan` of ``out[..., k] = sum of values[..., j] over targets[j] == k``."""
    targets = np.asarray(targets, dtype=np.int64)
    table = sum_table(targets, n_out)
    counts = np.bincount(targets, minlength=n_out)
    ranked = np.argsort(-counts, kind="stable")
    sizes = tuple(int(np.count_nonzero(counts > r)) for r in range(int(counts.max(initial=0))))
    order = np.concatenate([table[ranked[:m], r] for r, m in enumerate(sizes)]
                           + [np.zeros(0, dtype=np.int64)])
    rank = np.empty(n_out, dtype=np.int64)
    rank[ranked] = np.arange(n_out)
    padded = np.full((max(len(sizes), 1), n_out), targets.size, dtype=np.int64)
    start = 0
    for r, m in enumerate(sizes):
        padded[r, ranked[:m]] = order[start:start + m]
        start += m
    padded[0, counts == 0] = targets.size + 1
    return SumPlan(order, sizes, rank, n_out, padded.ravel())


#: the two pads of `SumPlan.padded`, appended to the terms (`sum_padded`)
PADS = np.array([-0.0, 0.0])


def sum_dtype(plan: SumPlan, dtype: Any) -> np.dtype:
    """The dtype `add_in_plan_order` sums terms of ``dtype`` in: theirs, or float64 at
    least where an output has no term (its sums start from float64 zeros)."""
    if plan.sizes and plan.sizes[0] == plan.n_out:
        return np.dtype(dtype)
    return np.result_type(dtype, np.float64)


def sum_padded(ext: np.ndarray, plan: SumPlan) -> np.ndarray:
    """The sums of `scatter_sum` (numpy) from ``ext`` (..., n_terms + 2): the terms, then
    the `PADS` -0.0 and +0.0. One gather and one reduction instead of a running sum per
    term: ``np.add.reduce`` over an axis that is not the last adds its rows one after the
    other, from ``initial``, and ``-0.0 + x == x``, so each output is summed exactly as
    `add_in_plan_order` sums it (the same value, bit for bit, the sign of a zero
    included), whatever the leading shape."""
    if plan.n_out < 2:    # a reduction over the only axis left would sum pairwise
        return add_in_plan_order(ext[..., plan.order], plan)
    terms = ext[..., plan.padded]
    rows = plan.padded.size // plan.n_out
    return np.add.reduce(terms.reshape(ext.shape[:-1] + (rows, plan.n_out)), axis=-2,
                         initial=-0.0)


def add_in_plan_order(terms: np.ndarray, plan: SumPlan, xp: Any = np) -> np.ndarray:
    """The sums of `scatter_sum` from ``terms`` already taken in ``plan.order`` (a caller
    that gathers its terms anyway gathers them in that order: `contract_product`)."""
    first = plan.sizes[0] if plan.sizes else 0
    if first == plan.n_out:
        acc = terms[..., :first].copy()
    else:                                   # outputs without a term are 0
        acc = xp.zeros(terms.shape[:-1] + (plan.n_out,))
        acc[..., :first] = terms[..., :first]
    start = first
    for m in plan.sizes[1:]:
        acc[..., :m] += terms[..., start:start + m]
        start += m
    return acc[..., on_device(plan.rank, xp)]


def scatter_sum(values: np.ndarray, table: np.ndarray | SumPlan, xp: Any = np) -> np.ndarray:
    """``out[..., k] = sum of values[..., j] over targets[j] == k`` (``table`` from
    `sum_table`, or its `sum_plan`), added in the order ``j`` increases, whatever the
    leading shape: a row's sum does not depend on how many rows are computed with it, as
    a BLAS product with a 0/1 matrix does (its kernels treat leftover rows in another
    order)."""
    if not isinstance(table, SumPlan):
        n_terms = values.shape[-1]
        targets = np.empty(n_terms, dtype=np.int64)
        for k, row in enumerate(np.asarray(table)):
            targets[row[row < n_terms]] = k
        table = sum_plan(targets, np.shape(table)[0])
    if xp is np:
        n_terms = values.shape[-1]
        ext = np.empty(values.shape[:-1] + (n_terms + 2,), dtype=sum_dtype(table, values.dtype))
        ext[..., :n_terms] = values
        ext[..., n_terms:] = PADS
        return sum_padded(ext, table)
    return add_in_plan_order(values[..., on_device(table.order, xp)], table, xp)

