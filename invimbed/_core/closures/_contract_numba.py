"""The jet closure's truncated contraction (`invimbed._core.closures.jet.contract_product`)
compiled with numba, for the large tables of high orders.

``out[r, p, q, io[k]] += sum_i a[r, p, i, ia[k]] * b[r, i, q, ib[k]]``, the pairs ``k``
in increasing order and ``i`` from 0: the order of the numpy route (einsum over ``i``,
then `invimbed._core.runtime.ordered.scatter_sum`), in one pass without the gathered copies.
Compiled once per machine (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def contract(a, b, ia, ib, io, n_out):
    """``a`` (R, p, I, ca), ``b`` (R, I, q, cb) -> (R, p, q, n_out)."""
    R, P, n_i = a.shape[0], a.shape[1], a.shape[2]
    Q = b.shape[2]
    out = np.zeros((R, P, Q, n_out))
    for r in range(R):
        for p in range(P):
            for q in range(Q):
                o = out[r, p, q]
                for k in range(ia.shape[0]):
                    s = a[r, p, 0, ia[k]] * b[r, 0, q, ib[k]]
                    for i in range(1, n_i):
                        s += a[r, p, i, ia[k]] * b[r, i, q, ib[k]]
                    o[io[k]] += s
    return out
