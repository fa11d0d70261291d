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

import numpy as np


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


def scatter_sum(values: np.ndarray, table: np.ndarray, xp: object = np) -> np.ndarray:
    """``out[..., k] = sum of values[..., j] over targets[j] == k`` (``table`` from
    `sum_table`), added in the order ``j`` increases, whatever the leading shape: a row's
    sum does not depend on how many rows are computed with it, as a BLAS product with a
    0/1 matrix does (its kernels treat leftover rows in another order)."""
    ext = xp.concatenate([values, xp.zeros(values.shape[:-1] + (1,))], axis=-1)
    out = ext[..., table[:, 0]]
    for k in range(1, table.shape[1]):
        out = out + ext[..., table[:, k]]
    return out
