"""The jet closure: Taylor coefficients of each field around ``x`` (docs/theory.md, "The closures").

A field ``U(p, x + delta)`` is carried as a truncated polynomial in ``delta``, its Taylor
coefficients ``u_alpha = D^alpha U(p, x) / alpha!`` for ``|alpha| <= L``: ``C(N + L, L)``
numbers, the symmetric derivative tensors stored without redundancy
(`invimbed._core.derivatives.multiindex`). With ``Phi(p, x + delta) = f(p, x + delta,
theta(p))`` expanded the same way (eq. (5)), the transport term of
``dU/dp = -grad_x U . Phi - S_U`` is a polynomial product,

    grad_x U . Phi = sum_i (d U / d delta_i)(delta) * Phi_i(delta),   truncated at degree L,

and the coefficient of degree ``L`` of ``U`` would need degree ``L + 1``, which is
dropped: that is the truncation. Carried degrees, for a jet of order ``K``:

* ``Z`` (Thm 1, eq. (6)): degree ``K``, no source, ``Z(q, x + delta) = x + delta``;
* ``V`` (the loss): degree ``K + 1`` with source ``R``; ``Lam = grad V`` (eq. (9))
  is therefore carried to degree ``K`` *as the gradient of V*: the source of Theorem 2
  (eq. (10)), ``[grad_z f]^T Lam + grad_z R``, appears by itself, and Lam never
  drifts from the gradient of the value;
* ``W = Lam_w = grad_w V`` (eq. (32)): degree ``K + 1``, like ``V``, with source
  ``[grad_w f]^T Lam + grad_w R``, a polynomial product with ``Lam = grad V``. (Carried
  only to degree ``K``, it would not be exact at order 1 when the control multiplies the
  state, ``f = A(w) z``, where ``grad_w V`` is quadratic in ``x``.)

Error law. For affine dynamics with at most quadratic losses the dropped coefficients
vanish, so order 1 is exact (the Riccati transformation). Otherwise, in the depth
``s = q - p``: the dropped degree ``K + 1`` of ``Z`` starts at 0 and grows like ``s``,
so ``z`` errs by ``O(s^(K+2))``; the dropped degree ``K + 2`` of ``V`` starts at the
terminal loss's, so ``Lam`` errs by ``O(s^(K+1))`` and ``V`` by ``O(s^(K+2))`` when
``D^(K+2) T(x) != 0`` (a non-quadratic terminal loss for ``K = 1``), and by
``O(s^(K+2))`` and ``O(s^(K+3))`` when it vanishes. None of it shrinks with the
integrator's step. The error estimate carries the jet of order ``K + 1`` alongside
(sharing every derivative evaluation: its coefficients are a superset) and reports the
difference.

``crop=True`` replaces the degree-1 equation of ``Z`` by the continuous form of the
paper's eq. (21), ``dZ_1/dp = -grad_z Phi`` (the factor ``Z_1`` in ``Z_1 . grad Phi``
cropped to the identity); kept to reproduce the paper, not recommended: it is not
exact even for ``dz/dt = a z`` (``Z_1 = 1 + a s`` instead of ``e^(a s)``). The paper
prints the layer form without the step factor ``p_i - p_{i+1}``; with the unit steps of
its experiments the two agree up to the sign of the step, which we take from
eq. (14). The other fields are carried as in the jet of order 1.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from scipy import sparse

from ..derivatives.multiindex import (degree_slices, n_coefficients, poly_derivatives,
                                       product_table)
from ..runtime import compile_cost
from ..runtime.namespace import array_namespace, on_device
from ..runtime.ordered import SumPlan, scatter_sum, sum_plan
from .base import Closure, Layout


@lru_cache(maxsize=None)
def _product_plan(n: int, order_a: int, order_b: int, order_out: int):
    ia, ib, io = product_table(n, order_a, order_b, order_out)
    n_out = n_coefficients(n, order_out)
    if io.size * n_out <= 2_000_000:  # small: sums in a fixed order (not BLAS: see
        scatter = sum_plan(io, n_out)   # invimbed._core.runtime.ordered.scatter_sum)
    else:                               # large: a sparse 0/1 matrix (n_out, pairs)
        scatter = sparse.csr_matrix((np.ones(io.size), (io, np.arange(io.size))),
                                    shape=(n_out, io.size))
    return ia, ib, scatter


def contract_product(a: np.ndarray, b: np.ndarray, n: int, order_a: int, order_b: int,
                     order_out: int) -> np.ndarray:
    """Truncated product summed over a shared axis: ``sum_i a[..., i, :] * b[:, i, ...]``.

    ``a`` has axes (B, *P, I, ca) and ``b`` (B, I, *Q, cb), polynomial coefficients last;
    the result (B, *P, *Q, C(n + order_out, order_out)) holds the coefficients of
    ``sum_i a_i(delta) b_i(delta)`` up to degree ``order_out``.
    """
    ia, ib, scatter = _product_plan(n, order_a, order_b, order_out)
    xp = np if type(a) is np.ndarray and type(b) is np.ndarray else array_namespace(a, b)
    B = a.shape[0]
    P = tuple(a.shape[1:-2])
    Q = tuple(b.shape[2:-1])
    I = a.shape[-2]
    kernel = _compiled(ia.size) if xp is np and ia.size >= _COMPILED_FROM else None
    if kernel is not None:    # one pass, no gathered copies (the same order of sums)
        io = product_table(n, order_a, order_b, order_out)[2]
        out = run_contraction(kernel, np.ascontiguousarray(a.reshape(B, -1, I, a.shape[-1])),
                              np.ascontiguousarray(b.reshape(B, I, -1, b.shape[-1])), ia, ib,
                              io, n_coefficients(n, order_out))
        return out.reshape((B,) + P + Q + (out.shape[-1],))
    a2 = a.reshape(B, -1, I, a.shape[-1])[..., on_device(ia, xp)]   # (B, p, I, pairs)
    b2 = b.reshape(B, I, -1, b.shape[-1])[..., on_device(ib, xp)]   # (B, I, q, pairs)
    prod = xp.einsum("bpin,biqn->bpqn", a2, b2)                      # (B, p, q, pairs)
    flat = prod.reshape(-1, ia.size)
    if isinstance(scatter, SumPlan):
        out = scatter_sum(flat, scatter, xp)
        return out.reshape((B,) + P + Q + (scatter.n_out,))
    if xp is np:
        out = (scatter @ flat.T).T
    else:  # a large scatter, on the device: cupy's sparse matrices
        out = (_device_sparse(scatter, xp) @ flat.T).T
    return out.reshape((B,) + P + Q + (scatter.shape[0],))


#: the table size (pairs) from which `contract_product` runs compiled code: degree 4 and
#: above for N = 4 (jet orders from 2 with the error estimate), 8 for N = 2; the low
#: orders keep the numpy sums that the numba backend's kernels reproduce bit for bit
_COMPILED_FROM = 400
#: the table size from which the contraction is compiled where it is not yet
#: (`invimbed._core.runtime.compile_cost.ready`): below it the numpy sums (the same, in the same
#: order) cost at most 2 ms more per call than the kernel, which its compilation (1.5 s
#: of CPU, more under load) did not repay within a sweep of the pendulum of
#: benchmarks/bench_tol.py (order 4, degree 7: 2.2 s of CPU without it, 4.0 s with it)
_COMPILE_FROM = 10_000
#: the most state entries `JetClosure.rhs_columns` evaluates at once: its temporaries are
#: about 36 times the states it stacks (order 6 on Robertson's kinetics, tracemalloc), so
#: 2**16 entries keep them near 20 MB
COLUMN_ENTRIES = 2 ** 16


def _compiled(pairs: int) -> Any:
    """The numba contraction (`invimbed._core.closures._contract_numba`) for a table of
    ``pairs`` pairs, or None: without numba, or where it would compile for less than
    `_COMPILE_FROM` pairs."""
    kernel = _kernel()
    if kernel is None or pairs >= _COMPILE_FROM:
        return kernel
    return kernel if compile_cost.ready(kernel) else None


def run_contraction(kernel: Any, *args: Any) -> np.ndarray:
    """``kernel(*args)`` (`_contract_numba.contract`), announced where that compiles it
    (`invimbed._core.runtime.compile_cost.compiling`): `compiled_here` remembers a kernel
    found compiled, where the dispatcher lists its signatures anew on every call."""
    if compile_cost.compiled_here(kernel):
        return kernel(*args)
    from numba import typeof

    with compile_cost.compiling("contract", [(kernel, tuple(typeof(v) for v in args))]):
        return kernel(*args)


@lru_cache(maxsize=None)
def _kernel() -> Any:
    try:
        from ._contract_numba import contract
    except ImportError:
        return None
    return contract


def _device_sparse(scatter: Any, xp: Any) -> Any:
    key = id(scatter)
    hit = _SPARSE.get(key)
    if hit is None or hit[0] is not scatter:
        import cupyx.scipy.sparse as csp  # only reached with cupy

        hit = _SPARSE[key] = (scatter, csp.csr_matrix(scatter))
    return hit[1]


_SPARSE: dict[int, tuple[Any, Any]] = {}


def transport(U: np.ndarray, Phi: np.ndarray, n: int, degree: int) -> np.ndarray:
    """Coefficients of ``grad_x U . Phi`` up to ``degree`` (U of degree ``degree``).

    ``U`` has axes (B, *out, C(n + degree, degree)); ``Phi`` (B, n, c) with at least the
    coefficients up to ``degree``.
    """
    if degree == 0:
        return array_namespace(U).zeros_like(U)
    dU = poly_derivatives(U, n, degree)                       # (B, *out, n, c(degree-1))
    phi = Phi[..., :n_coefficients(n, degree)]
    return contract_product(dU, phi, n, degree - 1, degree, degree)


def disc_update(closure: Any, old: dict, coef: dict, h: float) -> dict:
    """The layer update of `JetClosure.disc_step` on unpacked blocks (shared by every
    array backend): one forward-Euler step of each jet equation, except that the
    gradient coefficients of ``Lam`` (degree 1 of ``V``) and of ``Lam_w`` (degree 0 of
    ``W``) use the Jacobian already updated to ``p_i``, as eq. (15) writes it."""
    N = closure.N
    new = {}
    for K in closure.orders:
        step = closure._rhs_jet(K, old, coef)
        upd = {k: old[k] + h * v for k, v in step.items()}
        sl = degree_slices(N, K + 1)
        mixed = dict(old)
        mixed[f"V{K}"] = old[f"V{K}"].copy()
        mixed[f"V{K}"][..., sl[2]] = upd[f"V{K}"][..., sl[2]]
        if closure.nw:
            mixed[f"W{K}"] = old[f"W{K}"].copy()
            mixed[f"W{K}"][..., sl[1]] = upd[f"W{K}"][..., sl[1]]
        again = closure._rhs_jet(K, mixed, coef)
        upd[f"V{K}"][..., sl[1]] = old[f"V{K}"][..., sl[1]] + h * again[f"V{K}"][..., sl[1]]
        if closure.nw:
            upd[f"W{K}"][..., 0] = old[f"W{K}"][..., 0] + h * again[f"W{K}"][..., 0]
        new.update(upd)
    return new


class JetClosure(Closure):
    """Jet of order ``K`` for ``Z``, ``K + 1`` for ``V`` (so ``Lam`` is its gradient) and for
    ``Lam_w = grad_w V``; see the module docstring for the equations and the error law."""

    name = "jet"

    def __init__(self, provider, control, x, q, order: int = 1, estimate_error: bool = True,
                 crop: bool = False, ratio_test: bool = False, look_ahead: bool = False,
                 time_free: bool = False) -> None:
        super().__init__(provider, control, x, q, time_free=time_free)
        self.order = int(order)
        self.crop = crop
        if crop:
            self.name = "crop"
        est = estimate_error and not crop
        # the ratio test carries the jet of order K - 1 too (order 0 for K = 1: ``Z = x``,
        # ``V`` affine): it needs no derivative beyond those of order K + 1
        self.has_ratio_test = bool(ratio_test and est)
        # ``look_ahead`` carries the jet of order K + 2 as well (derivatives of order K + 3):
        # the ratio test then sees the next difference, ``|F_(K+2) - F_(K+1)|``
        self.has_look_ahead = bool(self.has_ratio_test and look_ahead)
        self.has_error_estimate = est
        self.orders = self.carried_orders()
        B, N, nw = self.B, self.N, self.nw
        shapes: dict[str, tuple[int, ...]] = {}
        for K in self.orders:
            shapes[f"Z{K}"] = (B, N, n_coefficients(N, K))
            shapes[f"V{K}"] = (B, n_coefficients(N, K + 1))
            if nw:
                shapes[f"W{K}"] = (B, nw, n_coefficients(N, K + 1))
        self.layout = Layout(shapes, self.xp)
        top = max(self.orders)
        self.f_order = top + 1   # V of degree K+1 needs Phi and R to degree K+1
        self.w_order = top + 1   # so does W = grad_w V, with grad_w f and grad_w R

    def carried_orders(self) -> list[int]:
        """The jet orders carried side by side, in the order of their blocks in the state:
        ``K - 1`` (the ratio test), ``K``, ``K + 1`` (the estimate), ``K + 2``
        (``look_ahead``), as the flags set in the constructor ask.

        A hook for subclasses, called once by the constructor, which builds the layout
        from it: they may carry the same orders in another block order. (An adaptive
        integrator's error norm sums over the state in block order, so the order changes
        results at the level of rounding.)"""
        K = self.order
        return (([K - 1] if self.has_ratio_test else []) + [K]
                + ([K + 1] if self.has_error_estimate else [])
                + ([K + 2] if self.has_look_ahead else []))

    def jacobian_sparsity(self) -> Any:
        """Which state entries each entry of `rhs` depends on: scipy's ``jac_sparsity`` for
        the implicit methods (``"BDF"``, ``"Radau"``), whose finite-difference Jacobian and
        LU factorisation then work on the blocks instead of the whole state.

        The Taylor coefficients of ``f`` and ``R`` are taken at ``(p, x)``, not at the
        state, so the jets of the carried orders and of the inputs are independent: per
        order and input, each component of ``Z`` depends on itself (its transport), ``V``
        on itself, and each row of ``W = grad_w V`` on itself and on ``V`` (through
        ``Lam = grad_x V`` in its source; docs/theory.md, "The jet closure")."""
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []

        def couple(r: np.ndarray, c: np.ndarray) -> None:
            rr, cc = np.meshgrid(r, c, indexing="ij")
            rows.append(rr.ravel())
            cols.append(cc.ravel())

        def entries(name: str) -> np.ndarray:
            s = self.layout.slices[name]
            return np.arange(s.start, s.stop).reshape(self.layout.shapes[name])

        for K in self.orders:
            Z, V = entries(f"Z{K}"), entries(f"V{K}")
            W = entries(f"W{K}") if self.nw else None
            for b in range(self.B):
                for i in range(self.N):
                    couple(Z[b, i], Z[b, i])
                couple(V[b], V[b])
                for j in range(self.nw):
                    couple(W[b, j], np.concatenate([W[b, j], V[b]]))
        r, c = np.concatenate(rows), np.concatenate(cols)
        n = self.layout.size
        return sparse.csc_matrix((np.ones(r.size, dtype=np.int8), (r, c)), shape=(n, n))

    # -- the contract ------------------------------------------------------------------
    def initial_state(self) -> np.ndarray:
        xp, B, N = self.xp, self.B, self.N
        T = self.provider.taylor("T", self.q, self.x, None, self.f_order)
        blocks = {}
        for K in self.orders:
            Z = xp.zeros((B, N, n_coefficients(N, K)))
            Z[:, :, 0] = self.x
            if K >= 1:
                Z[:, :, 1:N + 1] = xp.eye(N)
            blocks[f"Z{K}"] = Z
            blocks[f"V{K}"] = T[:, :n_coefficients(N, K + 1)]
            if self.nw:
                blocks[f"W{K}"] = xp.zeros((B, self.nw, n_coefficients(N, K + 1)))
        return self.layout.pack(blocks)

    def coefficients_at(self, p: float, theta: Any, jac: Any) -> dict[str, Any]:
        """Taylor coefficients of ``f``, ``R`` (and their ``w`` gradients) at ``(p, x)``
        for given ``theta(p)`` (M,) or (B, M) and ``d theta / d w`` (M, nw): what the
        array-namespace sweep passes, on the device; `coefficients` keeps them (at a
        high order most of an evaluation's cost: order 5 on Robertson's kinetics, 47 of
        70 s)."""
        prov, xp = self.provider, self.xp
        th = xp.broadcast_to(theta, (self.B, self.M))
        coef = {"Phi": prov.taylor("f", p, self.x, th, self.f_order),
                "R": prov.taylor("R", p, self.x, th, self.f_order)}
        if self.nw:
            Gt = prov.taylor("f", p, self.x, th, self.w_order, dth=1)   # (B, N, M, c)
            Rt = prov.taylor("R", p, self.x, th, self.w_order, dth=1)   # (B, M, c)
            coef["G"] = xp.einsum("bimc,mw->biwc", Gt, jac)
            coef["Rw"] = xp.einsum("bmc,mw->bwc", Rt, jac)
        return coef

    def rhs(self, p: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        """``dy/dp`` of a state ``y`` (size,), or of the states in the columns of ``y``
        (size, k): scipy's ``vectorized`` form (`rhs_columns`)."""
        coef = self.coefficients(p, piece)
        if y.ndim == 1:
            return self._rhs_from(coef, y)
        return self.rhs_columns(coef, y)

    def rhs_columns(self, coef: dict, Y: np.ndarray) -> np.ndarray:
        """`rhs` of the states in the columns of ``Y`` (size, k), in one evaluation.

        scipy's implicit methods difference their Jacobian by groups of columns
        (``jac_sparsity``): with the ``vectorized`` right-hand side they pass every group
        in one call, where they would otherwise call once per group (on Robertson's
        kinetics at order 6, over a hundred calls per Jacobian: 4 of the 10 s of the deep
        sweep, cProfile). The columns are stacked on the batch axis, ``k * B`` rows that
        share the coefficients of ``f`` and ``R``: each row's arithmetic is that of one
        state's `rhs`, up to the order in which numpy's reductions add for a taller batch
        (equal to rounding, not bit for bit; docs/accuracy.md). At most `COLUMN_ENTRIES`
        entries are stacked at once (the temporaries of an evaluation are ~36 times that)."""
        size, k = Y.shape
        if k == 1:
            return self._rhs_from(coef, Y[:, 0])[:, None]
        out = np.empty_like(Y)
        chunk = min(k, max(1, COLUMN_ENTRIES // max(size, 1)))
        # the coefficients repeated for a chunk's columns, once (a shorter last chunk
        # reads the first rows)
        tiled = {n: np.broadcast_to(v, (chunk,) + v.shape).reshape((chunk * self.B,)
                                                                   + v.shape[1:])
                 for n, v in coef.items()}
        for j in range(0, k, chunk):
            c = min(chunk, k - j)
            blocks = {n: b.reshape((c * self.B,) + b.shape[2:])
                      for n, b in self.layout.unpack(Y[:, j:j + c].T).items()}
            rows = {n: v[:c * self.B] for n, v in tiled.items()}
            for K in self.orders:
                for n, v in self._rhs_jet(K, blocks, rows).items():
                    out[self.layout.slices[n], j:j + c] = v.reshape(c, -1).T
        return out

    def rhs_at(self, p: float, y: Any, theta: Any, jac: Any) -> Any:
        """`rhs` for given ``theta(p)`` and ``d theta / d w`` (see `coefficients_at`)."""
        return self._rhs_from(self.coefficients_at(p, theta, jac), y)

    def _rhs_from(self, coef: dict, y: Any) -> Any:
        blocks = self.layout.unpack(y)
        out = {}
        for K in self.orders:
            out.update(self._rhs_jet(K, blocks, coef))
        return self.layout.pack(out)

    def _rhs_jet(self, K: int, blocks: dict, coef: dict) -> dict[str, np.ndarray]:
        N = self.N
        Phi, R = coef["Phi"], coef["R"]
        out = {}
        tZ = transport(blocks[f"Z{K}"], Phi, N, K)
        if self.crop:
            tZ[..., 1:N + 1] = Phi[..., 1:N + 1]
        out[f"Z{K}"] = -tZ
        V = blocks[f"V{K}"]
        out[f"V{K}"] = -(transport(V, Phi, N, K + 1) + R[:, :V.shape[-1]])
        if self.nw:
            Lam = poly_derivatives(V, N, K + 1)                          # (B, N, c(K))
            src = self._param_source(coef, Lam, K)
            out[f"W{K}"] = -(transport(blocks[f"W{K}"], Phi, N, K + 1) + src)
        return out

    def _param_source(self, coef: dict, Lam: np.ndarray, K: int) -> np.ndarray:
        """Coefficients of ``[grad_w f]^T Lam + grad_w R`` up to degree ``K + 1`` (``Lam``
        is known to degree ``K``; its degree ``K + 1``, that of ``V``'s ``K + 2``, is the
        truncation)."""
        N = self.N
        c = n_coefficients(N, K + 1)
        Gw = coef["G"][..., :c].swapaxes(1, 2)                 # (B, nw, N, c)
        src = contract_product(Gw, Lam[:, :, None, :], N, K + 1, K, K + 1)[:, :, 0]
        return src + coef["Rw"][..., :c]

    def error_estimate(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        """``|F_(K+1) - F_K|`` for every field ``F``: the estimated error of order ``K``."""
        if not self.has_error_estimate:
            return None
        return self._difference(y, self.order, self.order + 1)

    def lower_difference(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        """``|F_K - F_(K-1)|``: the previous term of the series, for the ratio test
        (`invimbed._core.sweep.accuracy.assess`); None without ``ratio_test``."""
        if not self.has_ratio_test:
            return None
        return self._difference(y, self.order - 1, self.order)

    def upper_difference(self, y: np.ndarray) -> dict[str, np.ndarray] | None:
        """``|F_(K+2) - F_(K+1)|``: the next term of the series (``look_ahead``)."""
        if not self.has_look_ahead:
            return None
        return self._difference(y, self.order + 1, self.order + 2)

    def _difference(self, y: np.ndarray, lo: int, hi: int) -> dict[str, np.ndarray]:
        a, b = self.fields(y, lo), self.fields(y, hi)
        return {k: self.xp.abs(b[k] - a[k]) for k in a}

    def fields(self, y: np.ndarray, K: int | None = None) -> dict[str, np.ndarray]:
        K = self.order if K is None else K
        b = self.layout.unpack(y)
        N = self.N
        return {
            "z": b[f"Z{K}"][..., 0].copy(),
            "value": b[f"V{K}"][..., 0].copy(),
            "adjoint": b[f"V{K}"][..., 1:N + 1].copy(),
            "param_grad": (b[f"W{K}"][..., 0].copy() if self.nw else
                           self.xp.zeros(tuple(y.shape[:-1]) + (self.B, 0))),
        }

    # -- the paper's discrete recursion -------------------------------------------------
    def disc_step(self, p_new: float, p_old: float, y: np.ndarray, piece: Any = None) -> np.ndarray:
        """One layer of eqs. (14) and (15), from ``p_old = p_{i+1}`` to
        ``p_new = p_i``, with ``Phi`` and every coefficient taken at ``p_i``.

        ``Z_i = Z_{i+1} - h grad Z_{i+1} . Phi(p_i)`` ((14), every coefficient),
        and ``Lam_i = Lam_{i+1} - h [grad Lam_i . Phi(p_i) + [grad_z f]^T Lam_{i+1} +
        grad_z R]`` ((15), with the running-loss term): the Jacobian ``grad Lam`` is
        the one at ``p_i``, updated first, as the paper writes it; ``Lam_w`` likewise.
        ``h = p_i - p_{i+1}``. Every other coefficient takes one forward-Euler step of its
        jet (or crop) equation.
        """
        coef = self.coefficients(p_new, piece)
        return self.layout.pack(disc_update(self, self.layout.unpack(y), coef, p_new - p_old))

    def disc_step_at(self, p_new: float, p_old: float, y: Any, theta: Any, jac: Any) -> Any:
        """`disc_step` for given ``theta(p_new)`` and ``d theta / d w``."""
        coef = self.coefficients_at(p_new, theta, jac)
        return self.layout.pack(disc_update(self, self.layout.unpack(y), coef, p_new - p_old))
