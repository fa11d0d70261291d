"""``backend="cupy"``: the batched jet and stencil sweeps on an array namespace.

The sweep here is the numpy sweep on an array namespace ``xp`` (numpy's functions as cupy
spells them): the same schedule and the same fixed-step loop
(`invimbed._core.integrators.fixed.run_schedule`), with the closure's ``rhs_at`` on
device arrays and ``theta`` precomputed per stage. The state, the derivative tensors and
every product stay on the device from ``p = q`` to the last depth, and only the fields of
the requested depths come back; the result (depth gradient, status, message) is
assembled by the core as for the numpy sweep (`invimbed._backends._result.finish`).
``backend="cupy"`` runs it with ``xp = cupy``; the tests run the very same code with
``xp = numpy`` against the numpy backend, which is how it is checked on machines without
a GPU.

The closures are the numpy ones (`JetClosure`, `StencilClosure`), and the derivatives
come from the problem's `FiniteDifferences` provider: all of them compute with the
namespace of their arguments (`invimbed.array_namespace`), so the same code runs on the
host and on the device. The contract for the problem's functions is that of
``vectorized=True``:
``f(t, z, theta)`` with ``z`` of shape (B, N) and ``theta`` (B, M), returning (B, N) (the
losses (B,), ``T(z)``), written with the namespace of their arguments,

    def f(t, z, theta):
        xp = invimbed.array_namespace(z)
        return xp.stack([z[:, 1], -xp.sin(z[:, 0]) + theta[:, 0]], axis=1)

so that one function serves numpy and cupy. Derivatives not given are central
differences with the rule of `invimbed.FiniteDifferences` (same steps, same nesting).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._core.closures import JetClosure, StencilClosure
from .._core.closures.base import Layout
from .._core.runtime.namespace import fields_on, to_numpy
from .._core.setup.arguments import Setup
from .._core.integrators.common import check_max_steps
from .._core.integrators.fixed import run_schedule
from ._result import finish
from ._schedule import build_schedule, check_scope

def import_cupy() -> Any:
    """cupy, with a usable GPU, or an ImportError/RuntimeError that says what is missing."""
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(
            "backend='cupy' needs cupy and a CUDA GPU: pip install invimbed[gpu] (or the "
            "cupy wheel for your CUDA, e.g. pip install cupy-cuda12x), or use backend='numpy' "
            "or backend='numba'") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        raise RuntimeError(f"backend='cupy': cupy is installed but no CUDA device is usable "
                           f"({exc}); use backend='numpy' or backend='numba'") from exc
    if count < 1:
        raise RuntimeError("backend='cupy': cupy is installed but sees no CUDA device; use "
                           "backend='numpy' or backend='numba'")
    return cupy


# -- the closures, on the device ----------------------------------------------------------


def check_problem(setup: Setup) -> None:
    """The array-namespace sweep calls the problem's functions on whole device batches."""
    prob = setup.problem
    if not prob.vectorized:
        raise ValueError(
            "backend='cupy' calls the problem's functions on whole batches of device "
            "arrays: build the problem with vectorized=True and functions written with "
            "xp = invimbed.array_namespace(z) (see 'Performance and scale' in the docs), "
            "or use backend='numba' for per-sample functions")
    if prob.derivative_provider is not None:
        raise ValueError(
            f"backend='cupy' needs the problem's functions, but the problem uses the "
            f"derivative provider {prob.derivative_provider.name!r}; use backend='numpy'")


class XPStencil(StencilClosure):
    """`invimbed._core.closures.StencilClosure` with its stencil moved to the namespace ``xp``."""

    def __init__(self, setup: Setup, xp: Any, difference: str, delta: Any) -> None:
        super().__init__(setup.provider, setup.control, setup.x, setup.q,
                         difference=difference, delta=delta)
        self.xp = xp
        self.x = xp.asarray(self.x)
        self.points = xp.asarray(self.points)
        self.delta = xp.asarray(self.delta)
        self.layout = Layout(self.layout.shapes, xp)


# -- the sweep -------------------------------------------------------------------------


def sweep_xp(setup: Setup, xp: Any, *, closure: str, order: int, method: str,
             step: float | None, difference: str, delta: Any, estimate_error: bool,
             backend: str = "cupy", array_type: str | None = None,
             max_steps: int | None = None) -> Any:
    """The fixed-step sweep of ``setup`` on the namespace ``xp`` (see the module docstring).

    The steps are those of `invimbed._core.integrators.fixed.integrate_fixed`, taken by
    the same loop (`run_schedule`). ``array_type="cupy"`` returns the result's arrays as
    cupy arrays; otherwise numpy. A grid of more than ``max_steps`` steps stops there.
    """
    check_scope(backend, closure, order, method)
    check_problem(setup)
    if getattr(setup.provider, "traced", False):   # the functions themselves, on the device
        setup = dataclasses.replace(setup, provider=setup.provider.finite_differences())
    der = setup.provider     # FiniteDifferences: namespace-generic, differences on the device
    x = xp.asarray(setup.x)
    if closure == "jet":
        clo: Any = JetClosure(der, setup.control, x, setup.q, order=order,
                              estimate_error=estimate_error)
    else:
        clo = XPStencil(setup, xp, difference, delta)
    sched = build_schedule(setup, method, step, check_max_steps(max_steps))
    n, (B, N) = setup.depths_desc.size, setup.x.shape
    nw = setup.control.n_params
    fields = {"z": np.full((n, B, N), np.nan), "value": np.full((n, B), np.nan),
              "adjoint": np.full((n, B, N), np.nan), "param_grad": np.full((n, B, nw), np.nan)}
    error = ({k: np.full_like(fields[k], np.nan) for k in ("z", "value", "adjoint", "param_grad")}
             if clo.has_error_estimate else None)
    fail_pos = np.full(1, np.iinfo(np.int64).max, dtype=np.int64)
    fail_p = np.full(1, np.nan)
    thetas = xp.asarray(sched.theta)
    jacs = xp.asarray(sched.jac)

    def record(d: int, y) -> None:   # d: index in the user's order of the depths
        fl = clo.fields(y)           # the depth gradient: by the core, in `finish`
        for k, v in fl.items():
            fields[k][d] = to_numpy(v)
        if error is not None:
            for k, v in clo.error_estimate(y).items():
                error[k][d] = to_numpy(v)

    def stage(k: int, s: int, p: float, y):
        return clo.rhs_at(p, y, thetas[k, s], jacs[k, s])

    def layer(k: int, y):
        return clo.disc_step_at(float(sched.stage_p[k, 0]), float(sched.p_start[k]), y,
                                thetas[k, 0], jacs[k, 0])

    # the one fixed-step loop of every namespace (invimbed._core.integrators.fixed)
    stop = run_schedule(sched, clo.initial_state(), stage, record, layer)
    if stop is not None:
        fail_pos[0], fail_p[0] = stop.code(sched.stages), stop.p
    res = finish(setup, sched, fields, error, fail_pos, fail_p, clo.name, method, backend)
    return fields_on(res, xp) if array_type == "cupy" else res


def sweep_cupy(setup: Setup, **kwargs: Any) -> Any:
    """``backend="cupy"``: `sweep_xp` with ``xp = cupy``."""
    cupy = import_cupy()
    return sweep_xp(setup, cupy, backend="cupy", **kwargs)


__all__ = ["import_cupy", "sweep_cupy", "sweep_xp"]
