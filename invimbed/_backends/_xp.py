"""``backend="cupy"``: the batched jet and stencil sweeps on an array namespace.

The sweep here is the numpy sweep written against an array namespace ``xp`` (numpy's
functions as cupy spells them): the state, the derivative tensors and every product stay
on the device from ``p = q`` to the last depth, and only the fields of the requested
depths come back. ``backend="cupy"`` runs it with ``xp = cupy``; the tests run the very
same code with ``xp = numpy`` against the numpy backend, which is how it is checked on
machines without a GPU.

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

from typing import Any

import numpy as np

from .._core.closures import JetClosure, StencilClosure
from .._core.closures.base import Layout
from .._core.namespace import to_numpy
from .._core.ordered import sum_products
from .._core.setup import Setup
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
    if prob._user_provider is not None:
        raise ValueError(
            f"backend='cupy' needs the problem's functions, but the problem uses the "
            f"derivative provider {prob._user_provider.name!r}; use backend='numpy'")


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
             backend: str = "cupy", array_type: str | None = None) -> Any:
    """The fixed-step sweep of ``setup`` on the namespace ``xp`` (see the module docstring).

    ``array_type="cupy"`` returns the result's arrays as cupy arrays; otherwise numpy.
    """
    from ._numba import finish

    check_scope(backend, closure, order, method)
    check_problem(setup)
    der = setup.provider     # FiniteDifferences: namespace-generic, differences on the device
    x = xp.asarray(setup.x)
    if closure == "jet":
        clo: Any = JetClosure(der, setup.control, x, setup.q, order=order,
                              estimate_error=estimate_error)
    else:
        clo = XPStencil(setup, xp, difference, delta)
    sched = build_schedule(setup, method, step)
    n, (B, N) = setup.depths_desc.size, setup.x.shape
    nw = setup.control.n_params
    fields = {"z": np.full((n, B, N), np.nan), "value": np.full((n, B), np.nan),
              "adjoint": np.full((n, B, N), np.nan), "param_grad": np.full((n, B, nw), np.nan),
              "depth_grad": np.full((n, B), np.nan)}
    error = ({k: np.full_like(fields[k], np.nan) for k in ("z", "value", "adjoint", "param_grad")}
             if clo.has_error_estimate else None)
    S = sched.stages
    fail_pos = np.full(1, np.iinfo(np.int64).max, dtype=np.int64)
    fail_p = np.full(1, np.nan)
    thetas = xp.asarray(sched.theta)
    jacs = xp.asarray(sched.jac)
    depth_th = xp.asarray(sched.depth_theta)

    def finite(a) -> bool:
        return bool(xp.all(xp.isfinite(a)))

    def record(d: int, y) -> None:   # d: index in the user's order of the depths
        fl = clo.fields(y)
        p = float(sched.depth_p[d])
        th = xp.broadcast_to(depth_th[d], (B, setup.control.size))
        f = der.derivative("f", p, x, th)
        R = der.derivative("R", p, x, th)
        fl["depth_grad"] = -(sum_products(fl["adjoint"], f) + R)
        for k, v in fl.items():
            fields[k][d] = to_numpy(v)
        if error is not None:
            for k, v in clo.error_estimate(y).items():
                error[k][d] = to_numpy(v)

    y = clo.initial_state()
    if sched.record_initial >= 0:
        record(sched.record_initial, y)
    A, W = sched.A, sched.weights
    try:
        for k in range(sched.n_steps):
            h = float(sched.h[k])
            if sched.disc:
                y = clo.disc_step_at(float(sched.stage_p[k, 0]), float(sched.p_start[k]), y,
                                     thetas[k, 0], jacs[k, 0])
                if not finite(y):
                    raise _Fail(2 * (k * (S + 1) + S), float(sched.stage_p[k, 0]))
            else:
                Ks = []
                for s in range(S):
                    p = float(sched.stage_p[k, s])
                    ys = y
                    if s:
                        acc = A[s, 0] * Ks[0]
                        for j in range(1, s):
                            acc = acc + A[s, j] * Ks[j]
                        ys = y + h * acc
                    if not finite(ys):
                        raise _Fail(2 * (k * (S + 1) + s), p)
                    dy = clo.rhs_at(p, ys, thetas[k, s], jacs[k, s])
                    if not finite(dy):
                        raise _Fail(2 * (k * (S + 1) + s) + 1, p)
                    Ks.append(dy)
                acc = W[0] * Ks[0]
                for j in range(1, S):
                    acc = acc + W[j] * Ks[j]
                y = y + h * acc
                if not finite(y):
                    raise _Fail(2 * (k * (S + 1) + S), float(sched.p_start[k]) + h)
            if sched.record[k] >= 0:
                record(int(sched.record[k]), y)
    except _Fail as fail:
        fail_pos[0], fail_p[0] = fail.pos, fail.p
    res = finish(setup, sched, fields, error, fail_pos, fail_p, clo.name, method, backend)
    if array_type == "cupy":
        for k in ("z", "value", "adjoint", "param_grad", "depth_grad"):
            res[k] = xp.asarray(res[k])
        if res.get("error_estimate") is not None:
            for k in list(res.error_estimate):
                res.error_estimate[k] = xp.asarray(res.error_estimate[k])
    return res


class _Fail(Exception):
    def __init__(self, pos: int, p: float) -> None:
        self.pos, self.p = pos, p


def sweep_cupy(setup: Setup, **kwargs: Any) -> Any:
    """``backend="cupy"``: `sweep_xp` with ``xp = cupy``."""
    unknown = set(kwargs) - {"closure", "order", "method", "step", "difference", "delta",
                             "estimate_error", "array_type"}
    if unknown:
        raise ValueError(f"backend='cupy' takes the option `array_type` ('numpy' or 'cupy') "
                         f"only, but got {', '.join(sorted(unknown))}")
    cupy = import_cupy()
    return sweep_xp(setup, cupy, backend="cupy", **kwargs)


__all__ = ["import_cupy", "sweep_cupy", "sweep_xp"]
