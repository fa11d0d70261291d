"""Sums of products added up in a fixed order.

einsum, matmul and BLAS choose their own order of summation (and may fuse multiply-adds),
so two implementations of the same formula round differently. The numpy sweep uses these
helpers where the compiled kernels of the accelerated backends add term by term, so that
both round alike: the stencil's difference quotients divide by ``2 Delta`` and would
otherwise magnify last-bit differences a thousandfold.
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
