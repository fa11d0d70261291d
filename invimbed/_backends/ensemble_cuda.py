"""``solve_adjoint(strategy="ensemble", backend="cuda")``: the exact ensemble adjoint on an
NVIDIA GPU, one thread per row.

What it computes is `invimbed._backends.ensemble_numba`'s, row by row, by the same
algorithm (`invimbed._backends._cuda_ensemble_kernel`: the numba kernel's per-row loop
and step arithmetic, the same source compiled for the device, scipy's RK45 / RK23 with its step rule, stops on the
control's breakpoints, the step budget, Shampine's ``h |lambda|``), on the problem's
generated derivatives. In numba-cuda's simulator the two backends agree bit for bit
(``tests/cuda``); on a GPU the compiler may fuse a multiply and an add, so they agree to
rounding (1e-12 relative, as numpy's and numba's ensembles).

How it runs
-----------
* Problems: built with `invimbed.from_sympy`, or traced (``derivatives="trace"``): the
  kernel calls their generated code. A problem of Python callables raises
  ``ValueError`` (a GPU thread cannot call Python; use ``backend="numba"``).
  Controls: `NoControl`, `Constant`, `PiecewiseConstant` (as ``backend="numba"``).
* Memory on the device: the inputs, the depths, the outputs of every row of a chunk and
  the dense output of every row in flight, `DENSE_STEPS` accepted forward steps of
  ``S (k + 2) + 2`` floats a row (``S = N + 1``, ``k + 1 = 4`` for RK45, 3 for RK23).
  `row_cost` counts all of it, so ``memory_budget`` (`solve_adjoint`) bounds the device's
  memory as it bounds the host's: `invimbed._core.reference.row_chunks` splits the rows
  into chunks that fit. A row whose forward pass takes more accepted steps than its
  buffer holds is run again, alone with the others that did, with a buffer four times
  larger (as many times as needed, up to ``max_steps``), in launches that keep to the
  first launch's memory.
* Transfers: the inputs once per chunk, the outputs once at its end (the kernel writes
  every output of a row, NaN where it fails, so nothing is sent to fill them). The depth
  gradient ``-(lambda . f + R)`` is computed by the kernel at the end of the row, in the
  order of the core's `depth_gradient`; on the generated code, where ``backend="numba"``
  evaluates it on the host with the problem's vectorised functions: the two agree to
  rounding (bit for bit on the pendulum of tests/cuda; asserted to 1e-12).
* ``nfev``: the largest count of right-hand-side evaluations of any row.
* Compilation: the kernel is compiled per problem and method on the first call in a
  process (numba-cuda does not cache kernels that call other generated functions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.setup.arguments import Setup
from .._core.integrators.ensemble import DONE, TABLEAUX
from .._core.reference.row_chunks import RowCost, output_bytes
from .._core.results.failures import empty_fields
from ._cuda_device import check_device, check_state_size
from ._cuda_ensemble_kernel import K_FULL, build_kernel
from .ensemble_numba import row_arrays

#: Accepted forward steps a row's dense output holds in the first launch.
DENSE_STEPS = 64
#: Threads per block.
THREADS = 128

_KERNELS: dict[tuple, Any] = {}


def generated_provider(setup: Setup) -> Any:
    """The provider whose generated per-sample code the kernels call, or a `ValueError`
    saying which problems ``backend="cuda"`` runs."""
    prov = setup.provider if getattr(setup.provider, "traced", False) else \
        setup.problem.derivative_provider
    if prov is None or not hasattr(prov, "sample_function"):
        raise ValueError(
            "backend='cuda' runs problems whose functions are generated code: build the "
            "problem with invimbed.from_sympy or with derivatives='trace'; a problem of "
            "Python callables runs on backend='numba' (CPU) or backend='numpy'")
    return prov


def dense_width(setup: Setup) -> int:
    """Floats per accepted step of a row's dense output (RK45's, the wider one)."""
    S = setup.x.shape[1] + 1
    return 2 + S + S * TABLEAUX["RK45"].P.shape[1]


def row_cost(setup: Setup) -> RowCost:
    """Bytes per row of `ensemble_cuda` (`invimbed._core.reference.row_chunks`): the fields
    on the host; on the device the outputs, the row's status and its dense output of
    `DENSE_STEPS` steps (the module docstring)."""
    out = output_bytes(setup)
    return RowCost(held=out + 34,
                   work=2 * out + 48 + 8 * DENSE_STEPS * dense_width(setup), step=0)


def _kernel(prov: Any, N: int, M: int, nw: int, method: str) -> tuple[Any, int]:
    key = (id(prov), N, M, nw, method)
    if key not in _KERNELS:
        _KERNELS[key] = (build_kernel(prov, N, M, nw, method), prov)
    return _KERNELS[key][0]


def ensemble_cuda(setup: Setup, method: str, rtol: float, atol: float,
                  opts: dict) -> tuple[dict, int, tuple]:
    """The ensemble adjoint on the GPU; the contract of
    `invimbed._backends.ensemble_numba.ensemble_numba`: ``(fields, nfev, rows)``."""
    cuda = check_device()
    prov = generated_provider(setup)
    ctrl = setup.control
    knots, values, depths, stops = row_arrays(setup)
    B, N = setup.x.shape
    M, nw = ctrl.size, ctrl.n_params
    check_state_size(N + max(1, nw), "the adjoint's state [lambda, mu]")
    kernel, width = _kernel(prov, N, M, nw, method)
    n = depths.size
    rows = n * B
    q = float(setup.q)
    fields = empty_fields(n, B, N, nw)
    if rows == 0:
        return fields, 0, (np.zeros(0, np.int64),) * 2 + (np.zeros(0),) * 2
    first = opts.get("first_step")
    num = np.array([rtol, atol, -1.0 if first is None else float(first),
                    float(opts.get("max_step", np.inf))])
    max_steps = int(opts["max_steps"])
    dev = cuda.to_device
    c = np.ascontiguousarray
    host = [fields["z"].reshape(rows, N), fields["value"].reshape(rows),
            fields["adjoint"].reshape(rows, N), fields["param_grad"].reshape(rows, nw),
            fields["depth_grad"].reshape(rows), fields["nsteps"].reshape(rows),
            np.empty(rows, np.int64), np.empty((rows, 2), np.int64), np.empty(rows),
            np.empty(rows)]
    outs = [cuda.device_array(h.shape, h.dtype) for h in host]   # the kernel fills them
    ins = (dev(c(setup.x, dtype=float)), dev(depths), q, dev(knots), dev(values), dev(stops),
           dev(num), max_steps)
    todo = np.arange(rows, dtype=np.int64)
    cap = DENSE_STEPS
    floats = rows * cap            # the first launch's dense output, kept to after
    while todo.size:
        per = max(1, min(todo.size, floats // cap))
        for lo in range(0, todo.size, per):
            part = todo[lo:lo + per]
            dense = cuda.device_array((cap, width, part.size))
            kernel[(part.size + THREADS - 1) // THREADS, THREADS](
                dev(part), *ins, dense, *outs)
            del dense
        status = outs[7].copy_to_host()
        todo = todo[status[todo, 0] == K_FULL]   # none once cap >= max_steps
        cap = min(4 * cap, max_steps)
    for o, h in zip(outs, host):   # the one transfer back
        if h.size:
            o.copy_to_host(h)
    out_nfev, status, out_t, out_hl = host[6:]
    nfev = int(out_nfev.max())
    return fields, nfev, (status[:, 0], status[:, 1], out_t, out_hl)
