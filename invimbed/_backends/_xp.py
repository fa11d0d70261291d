"""``backend="cupy"``: the batched jet and stencil sweeps on an array namespace.

The sweep here is the numpy sweep written against an array namespace ``xp`` (numpy's
functions as cupy spells them): the state, the derivative tensors and every product stay
on the device from ``p = q`` to the last depth, and only the fields of the requested
depths come back. ``backend="cupy"`` runs it with ``xp = cupy``; the tests run the very
same code with ``xp = numpy`` against the numpy backend, which is how it is checked on
machines without a GPU.

The contract for the problem's functions is that of ``vectorized=True``:
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

from .._derivatives import DerivativeOrderError
from .._derivatives.multiindex import (derivative_table, factorials,
                                       n_coefficients, product_table, tensor_positions)
from .._closures.base import Layout
from .._closures.jet import disc_update
from .._closures.stencil import control_sources, difference_quotient, stencil_rhs
from .._setup import Setup
from .._namespace import to_numpy
from .._ordered import sum_products
from ._schedule import build_schedule, check_scope

EPS = np.finfo(float).eps


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


# -- derivatives -----------------------------------------------------------------------


class XPDerivatives:
    """The problem's derivatives on ``xp`` arrays, by the rule of the numpy provider."""

    def __init__(self, setup: Setup, xp: Any) -> None:
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
        self.xp = xp
        self.prov = setup.provider
        self.N, self.M = setup.x.shape[1], setup.control.size
        self.fns = {("f", 0, 0): prob.dynamics, ("R", 0, 0): prob.running_loss,
                    ("T", 0, 0): prob.terminal_loss}
        self.fns.update(prob._known)
        self.zero = set(getattr(self.prov, "zero", ()))
        self.max_levels = getattr(self.prov, "max_fd_levels", 4)
        self.scale = getattr(self.prov, "scale", 1.0)
        self._index: dict = {}

    def out_shape(self, which: str) -> tuple[int, ...]:
        return (self.N,) if which == "f" else ()

    def _call(self, key, t, z, theta):
        fn = self.fns[key]
        out = fn(z) if key[0] == "T" else fn(t, z, theta)
        return self.xp.asarray(out, dtype=self.xp.float64)

    def derivative(self, which: str, t: float, z: Any, theta: Any, dz: int = 0,
                   dth: int = 0) -> Any:
        xp = self.xp
        B = z.shape[0]
        if which in self.zero:
            return xp.zeros((B,) + self.out_shape(which) + (self.N,) * dz + (self.M,) * dth)
        if theta is None or which == "T":
            theta = xp.zeros((B, self.M))
        base = self.prov._base(which, dz, dth)
        lz, lt = dz - base[1], dth - base[2]
        levels = lz + lt
        if levels > self.max_levels:
            raise DerivativeOrderError(
                f"{which} derivative (dz={dz}, dth={dth}) would need {levels} nested levels "
                f"of finite differences (at most {self.max_levels} allowed); give exact "
                f"derivatives")
        h_rel = 1.0 * self.scale * EPS ** (1.0 / (2 + levels)) if levels else 0.0
        out_nd = len(self.out_shape(which))
        g = lambda t_, z_, th_: self._call(base, t_, z_, th_)  # noqa: E731
        nz, nt = base[1], base[2]
        for _ in range(lt):
            g = self._difference(g, "theta", h_rel, out_nd + nz + nt)
            nt += 1
        for _ in range(lz):
            g = self._difference(g, "z", h_rel, out_nd + nz)
            nz += 1
        out = g(t, z, theta)
        expected = (B,) + self.out_shape(which) + (self.N,) * dz + (self.M,) * dth
        if tuple(out.shape) != expected:
            raise ValueError(f"derivative of {which} (dz={dz}, dth={dth}) must have shape "
                             f"{expected}, but has shape {tuple(out.shape)}")
        return out

    def _difference(self, g, var: str, h_rel: float, insert_at: int):
        xp = self.xp

        def dg(t, z, theta):
            B = z.shape[0]
            u = z if var == "z" else theta
            n = u.shape[1]
            if n == 0:
                base = g(t, z[:0], theta[:0])
                res = xp.zeros((B,) + tuple(base.shape[1:]) + (0,))
                return xp.moveaxis(res, -1, 1 + insert_at)
            h = h_rel * xp.maximum(1.0, xp.abs(u))
            shift = h.T[:, :, None] * xp.eye(n)[:, None, :]
            up = (u[None] + shift).reshape(n * B, n)
            um = (u[None] - shift).reshape(n * B, n)
            stacked = xp.concatenate([up, um], axis=0)
            if var == "z":
                zz, tt = stacked, xp.tile(theta, (2 * n, 1))
            else:
                zz, tt = xp.tile(z, (2 * n, 1)), stacked
            vals = g(t, zz, tt)
            vals = vals.reshape((2, n, B) + tuple(vals.shape[1:]))
            hb = h.T.reshape((n, B) + (1,) * (vals.ndim - 3))
            d = (vals[0] - vals[1]) / (2.0 * hb)
            d = xp.moveaxis(d, 0, -1)
            return xp.moveaxis(d, -1, 1 + insert_at)

        return dg

    def taylor(self, which: str, t: float, z: Any, theta: Any, order: int, dth: int = 0) -> Any:
        xp = self.xp
        out_nd = len(self.out_shape(which))
        pos = tensor_positions(self.N, order)
        parts = []
        lead = None
        for k in range(order + 1):
            tk = self.derivative(which, t, z, theta, dz=k, dth=dth)
            for j in range(dth):
                tk = xp.moveaxis(tk, tk.ndim - dth + j, 1 + out_nd + j)
            if lead is None:
                lead = tuple(tk.shape)
            parts.append(tk.reshape(lead + (-1,))[..., self.index(pos[k])])
        fact = self.index(factorials(self.N, order), float)
        return xp.concatenate(parts, axis=-1) / fact

    def index(self, arr: np.ndarray, dtype: Any = np.int64) -> Any:
        """``arr`` on the device, cached."""
        key = (arr.tobytes(), arr.shape, np.dtype(dtype).str)
        if key not in self._index:
            self._index[key] = self.xp.asarray(np.asarray(arr, dtype=dtype))
        return self._index[key]


# -- closures --------------------------------------------------------------------------


class XPJet:
    """`invimbed._closures.JetClosure` (without crop) on ``xp``."""

    name = "jet"

    def __init__(self, der: XPDerivatives, setup: Setup, x: Any, order: int,
                 estimate_error: bool) -> None:
        xp = self.xp = der.xp
        self.der, self.x, self.q = der, x, setup.q
        self.B, self.N = x.shape
        self.M, self.nw = setup.control.size, setup.control.n_params
        self.order = order
        self.orders = [order] + ([order + 1] if estimate_error else [])
        self.has_error_estimate = len(self.orders) > 1
        shapes = {}
        for K in self.orders:
            shapes[f"Z{K}"] = (self.B, self.N, n_coefficients(self.N, K))
            shapes[f"V{K}"] = (self.B, n_coefficients(self.N, K + 1))
            if self.nw:
                shapes[f"W{K}"] = (self.B, self.nw, n_coefficients(self.N, K + 1))
        self.layout = Layout(shapes, xp)
        self.f_order = self.w_order = max(self.orders) + 1
        self._plans: dict = {}

    # truncated polynomial algebra (jet.py's contract_product and transport)
    def _plan(self, oa: int, ob: int, oo: int):
        key = (oa, ob, oo)
        if key not in self._plans:
            ia, ib, io = product_table(self.N, oa, ob, oo)
            n_out = n_coefficients(self.N, oo)
            scatter = np.zeros((io.size, n_out))
            scatter[np.arange(io.size), io] = 1.0
            self._plans[key] = (self.der.index(ia), self.der.index(ib),
                                self.xp.asarray(scatter), ia.size, n_out)
        return self._plans[key]

    def contract(self, a, b, oa, ob, oo):
        xp = self.xp
        ia, ib, scatter, npairs, n_out = self._plan(oa, ob, oo)
        B = a.shape[0]
        P, Q, I = tuple(a.shape[1:-2]), tuple(b.shape[2:-1]), a.shape[-2]
        a2 = a.reshape(B, -1, I, a.shape[-1])[..., ia]
        b2 = b.reshape(B, I, -1, b.shape[-1])[..., ib]
        prod = xp.einsum("bpin,biqn->bpqn", a2, b2)
        out = prod.reshape(-1, npairs) @ scatter
        return out.reshape((B,) + P + Q + (n_out,))

    def poly_derivatives(self, u, degree):
        src, _, fac = derivative_table(self.N, degree)
        return u[..., self.der.index(src)] * self.der.index(fac, float)

    def transport(self, U, Phi, degree):
        if degree == 0:
            return self.xp.zeros_like(U)
        dU = self.poly_derivatives(U, degree)
        phi = Phi[..., :n_coefficients(self.N, degree)]
        return self.contract(dU, phi, degree - 1, degree, degree)

    def initial_state(self):
        xp, B, N = self.xp, self.B, self.N
        T = self.der.taylor("T", self.q, self.x, None, self.f_order)
        blocks = {}
        for K in self.orders:
            Z = xp.zeros((B, N, n_coefficients(N, K)))
            Z[:, :, 0] = self.x
            Z[:, :, 1:N + 1] = xp.eye(N)
            blocks[f"Z{K}"] = Z
            blocks[f"V{K}"] = T[:, :n_coefficients(N, K + 1)]
            if self.nw:
                blocks[f"W{K}"] = xp.zeros((B, self.nw, n_coefficients(N, K + 1)))
        return self.layout.pack(blocks)

    def coefficients(self, p, theta, jac):
        xp = self.xp
        th = xp.broadcast_to(theta, (self.B, self.M))
        coef = {"Phi": self.der.taylor("f", p, self.x, th, self.f_order),
                "R": self.der.taylor("R", p, self.x, th, self.f_order)}
        if self.nw:
            Gt = self.der.taylor("f", p, self.x, th, self.w_order, dth=1)
            Rt = self.der.taylor("R", p, self.x, th, self.w_order, dth=1)
            coef["G"] = xp.einsum("bimc,mw->biwc", Gt, jac)
            coef["Rw"] = xp.einsum("bmc,mw->bwc", Rt, jac)
        return coef

    def rhs(self, p, y, theta, jac):
        coef = self.coefficients(p, theta, jac)
        blocks = self.layout.unpack(y)
        out = {}
        for K in self.orders:
            out.update(self._rhs_jet(K, blocks, coef))
        return self.layout.pack(out)

    def _rhs_jet(self, K, blocks, coef):
        N = self.N
        Phi, R = coef["Phi"], coef["R"]
        out = {f"Z{K}": -self.transport(blocks[f"Z{K}"], Phi, K)}
        V = blocks[f"V{K}"]
        out[f"V{K}"] = -(self.transport(V, Phi, K + 1) + R[:, :V.shape[-1]])
        if self.nw:
            Lam = self.poly_derivatives(V, K + 1)
            c = n_coefficients(N, K + 1)
            Gw = self.xp.moveaxis(coef["G"][..., :c], 1, 2)
            src = self.contract(Gw, Lam[:, :, None, :], K + 1, K, K + 1)[:, :, 0]
            src = src + coef["Rw"][..., :c]
            out[f"W{K}"] = -(self.transport(blocks[f"W{K}"], Phi, K + 1) + src)
        return out

    def fields(self, y, K=None):
        K = self.order if K is None else K
        b = self.layout.unpack(y)
        N = self.N
        return {"z": b[f"Z{K}"][..., 0], "value": b[f"V{K}"][..., 0],
                "adjoint": b[f"V{K}"][..., 1:N + 1],
                "param_grad": b[f"W{K}"][..., 0] if self.nw else self.xp.zeros((self.B, 0))}

    def error_estimate(self, y):
        if not self.has_error_estimate:
            return None
        lo = self.fields(y, self.orders[0])
        hi = self.fields(y, self.orders[1])
        return {k: self.xp.abs(hi[k] - lo[k]) for k in lo}

    def disc_step(self, p_new, p_old, y, theta, jac):
        coef = self.coefficients(p_new, theta, jac)
        return self.layout.pack(disc_update(self, self.layout.unpack(y), coef, p_new - p_old))


class XPStencil:
    """`invimbed._closures.StencilClosure` on ``xp``."""

    name = "stencil"
    has_error_estimate = False

    def __init__(self, der: XPDerivatives, setup: Setup, x: Any, difference: str,
                 delta_host: np.ndarray, points_host: np.ndarray) -> None:
        xp = self.xp = der.xp
        self.der, self.x, self.q = der, x, setup.q
        self.B, self.N = x.shape
        self.M, self.nw = setup.control.size, setup.control.n_params
        self.difference = difference
        self.delta = xp.asarray(delta_host)
        self.points = xp.asarray(points_host)
        self.P = points_host.shape[1]
        shapes = {"Z": (self.B, self.P, self.N), "L": (self.B, self.P, self.N), "V": (self.B,)}
        if self.nw:
            shapes["W"] = (self.B, self.P, self.nw)
        self.layout = Layout(shapes, xp)

    def _jacobian(self, U):
        return difference_quotient(U, self.delta, self.difference)

    def initial_state(self):
        B, P, N = self.B, self.P, self.N
        pts = self.points.reshape(B * P, N)
        blocks = {"Z": self.points,
                  "L": self.der.derivative("T", self.q, pts, None, dz=1).reshape(B, P, N),
                  "V": self.der.derivative("T", self.q, self.x, None)}
        if self.nw:
            blocks["W"] = self.xp.zeros((B, P, self.nw))
        return self.layout.pack(blocks)

    def rhs(self, p, y, theta, jac):
        xp, B, P, N = self.xp, self.B, self.P, self.N
        der = self.der
        blk = self.layout.unpack(y)
        pts = self.points.reshape(B * P, N)
        th = xp.broadcast_to(theta, (B * P, self.M))
        Phi = der.derivative("f", p, pts, th).reshape(B, P, N)
        A = der.derivative("f", p, pts, th, dz=1).reshape(B, P, N, N)
        rz = der.derivative("R", p, pts, th, dz=1).reshape(B, P, N)
        r0 = der.derivative("R", p, self.x, th[:B])
        G = rw = None
        if self.nw:
            G, rw = control_sources(
                der.derivative("f", p, pts, th, dz=0, dth=1).reshape(B, P, N, self.M),
                der.derivative("R", p, pts, th, dz=0, dth=1).reshape(B, P, self.M), jac)
        out = stencil_rhs(blk, self._jacobian, Phi, A, rz, r0, G, rw)
        return self.layout.pack(out)

    def fields(self, y):
        blk = self.layout.unpack(y)
        return {"z": blk["Z"][:, 0], "value": blk["V"], "adjoint": blk["L"][:, 0],
                "param_grad": blk["W"][:, 0] if self.nw else self.xp.zeros((self.B, 0))}

    def error_estimate(self, y):
        return None


# -- the sweep -------------------------------------------------------------------------


def sweep_xp(setup: Setup, xp: Any, *, closure: str, order: int, method: str,
             step: float | None, difference: str, delta: Any, estimate_error: bool,
             backend: str = "cupy", array_type: str | None = None) -> Any:
    """The fixed-step sweep of ``setup`` on the namespace ``xp`` (see the module docstring).

    ``array_type="cupy"`` returns the result's arrays as cupy arrays; otherwise numpy.
    """
    from ._numba import finish

    check_scope(backend, closure, order, method)
    der = XPDerivatives(setup, xp)
    x = xp.asarray(setup.x)
    if closure == "jet":
        clo: Any = XPJet(der, setup, x, order, estimate_error)
    else:
        from .._closures import StencilClosure

        host = StencilClosure(setup.provider, setup.control, setup.x, setup.q,
                              difference=difference, delta=delta)
        clo = XPStencil(der, setup, x, difference, host.delta, host.points)
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
                y = clo.disc_step(float(sched.stage_p[k, 0]), float(sched.p_start[k]), y,
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
                    dy = clo.rhs(p, ys, thetas[k, s], jacs[k, s])
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


__all__ = ["XPDerivatives", "import_cupy", "sweep_cupy", "sweep_xp"]
