"""The layer recursions of the discrete architecture (section 3.1), in torch.

Notation as in ``invimbed/_core/closures/jet.py`` and docs/theory.md, "The discrete architecture": depths
``0 = p_0 > p_1 > ... > p_L``, layer ``k`` (1-based) between ``p_{k-1}`` and ``p_k``
with dynamics ``u_k = Phi_k(x) = Phi(p_k, x)``, evaluated at the *input* ``x``, and the
signed step ``h_k = p_k - p_{k-1} < 0``. Eq. (14) reads

    Z_k(x) = Z_{k-1}(x) - h_k grad Z_{k-1}(x) . Phi_k(x),     Z_0(x) = x,

and the closures differ only in the Jacobian ``J_{k-1} ~ grad Z_{k-1}(x)`` they use:

* ``exact``: the true Jacobian of the discrete recursion. ``J_{k-1} v`` is a
  ``torch.func.jvp`` through the previous layers' recursion, which is itself a jvp:
  ``Z_L`` is ``L`` nested jvps, each ``Phi_k`` evaluated once (with dual numbers of
  ``L - k`` levels, ``2^(L-k)`` components: exponential cost), never an ``N x N``
  matrix.
* ``jet`` (order 1, ``invimbed._core.closures.jet`` with ``order=1``): the degree-1
  coefficient carried by its own Euler step with the degree-2 one dropped,
  ``J_k = J_{k-1} (I - h_k grad Phi_k)``, so ``J_{k-1} = prod_{j<k} (I - h_j G_j)``.
* ``crop`` (eq. (21), as the core's ``crop``): ``J_k = J_{k-1} - h_k grad Phi_k``,
  so ``J_{k-1} = I - sum_{j<k} h_j G_j``.

For ``jet``/``crop`` the products ``J_{k-1} u_k`` are formed matrix-free by visiting the
layers from the deepest to the shallowest, each ``Phi_j`` evaluated once with the set of
pending tangents (``torch.func.vmap`` over tangents of ``torch.func.jvp``): ``L (L-1)/2``
Jacobian-vector products in all. The ``*_materialized`` variants carry the ``(B, N, N)``
Jacobians instead (for comparison and benchmarks only).

The imbedded adjoint (Theorem 2, eqs. (15) and (32)) is
:func:`adjoint_sweep`.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch
from torch.func import functional_call, jvp, vjp, vmap
from torch.nn.modules.batchnorm import _BatchNorm

Phi = Callable[[torch.Tensor], torch.Tensor]


def call_phi(phi: Phi, x: torch.Tensor, k: int) -> torch.Tensor:
    """``phi(x)`` with the shape checked (``k`` is the 1-based layer, for the message)."""
    u = phi(x)
    if not isinstance(u, torch.Tensor) or u.shape != x.shape:
        got = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise ValueError(f"the dynamics Phi of layer {k - 1} (0-based) must map shape "
                         f"{tuple(x.shape)} to the same shape, but it returned {got}")
    return u


def jvp_many(phi: Phi, x: torch.Tensor, tangents: torch.Tensor, k: int):
    """``(phi(x), [grad phi(x) . v for v in tangents])`` with ``phi`` evaluated once.

    ``tangents`` has shape (m, *x.shape). Random operations (dropout) draw once and are
    shared by every tangent (``randomness="same"``), so the products are those of the
    very function whose value is returned.
    """
    if tangents.shape[0] == 0:
        return call_phi(phi, x, k), tangents
    prim, tans = vmap(lambda v: jvp(lambda xx: call_phi(phi, xx, k), (x,), (v,)),
                      randomness="same")(tangents)
    return prim[0], tans


def _basis(x: torch.Tensor) -> torch.Tensor:
    """Tangents ``e_i`` for every sample at once: shape (N, B, N)."""
    B, N = x.shape
    eye = torch.eye(N, dtype=x.dtype, device=x.device)
    return eye[:, None, :].expand(N, B, N)


# -- forward (eq. (14)) -------------------------------------------------------------
def exact_sweep(phis: Sequence[Phi], hs: Sequence[float], x: torch.Tensor) -> tuple:
    """``(Z_0(x), ..., Z_L(x))`` of the discrete recursion with exact nested Jacobians."""

    def make(k: int):
        if k == 0:
            return lambda xx: (xx,)
        prev = make(k - 1)

        def F(xx):
            u = call_phi(phis[k - 1], xx, k)
            outs, tans = jvp(prev, (xx,), (u,))
            return outs + (outs[-1] - hs[k - 1] * tans[-1],)
        return F

    return make(len(phis))(x)


def exact_sweep_materialized(phis: Sequence[Phi], hs: Sequence[float], x: torch.Tensor) -> tuple:
    """As :func:`exact_sweep`, forming each ``grad Z_{k-1}(x)`` as a (B, N, N) tensor
    (``N`` jvps per level, nested: cost ``~ N^L``). For comparison only."""

    def make(k: int):
        if k == 0:
            return lambda xx: (xx,)
        prev = make(k - 1)

        def F(xx):
            u = call_phi(phis[k - 1], xx, k)
            outs, tans = vmap(lambda e: jvp(prev, (xx,), (e,)), randomness="same")(_basis(xx))
            outs = tuple(o[0] for o in outs)
            J = tans[-1].permute(1, 2, 0)                    # (B, N, N): J[b, :, i] = J_b e_i
            return outs + (outs[-1] - hs[k - 1] * torch.einsum("bni,bi->bn", J, u),)
        return F

    return make(len(phis))(x)


def truncated_sweep(phis: Sequence[Phi], hs: Sequence[float], x: torch.Tensor,
                    closure: str) -> tuple:
    """``(Z_0, ..., Z_L)`` with the ``"jet"`` or ``"crop"`` Jacobian, matrix-free."""
    L = len(phis)
    us: dict[int, torch.Tensor] = {}
    w: dict[int, torch.Tensor] = {}       # w[k] -> J_{k-1} u_k once every layer j < k is done
    for j in range(L, 0, -1):
        pending = sorted(w)               # layers k > j
        V = torch.stack([w[k] if closure == "jet" else us[k] for k in pending]) if pending \
            else x.new_zeros((0,) + x.shape)
        u, GV = jvp_many(phis[j - 1], x, V, j)
        for i, k in enumerate(pending):
            w[k] = w[k] - hs[j - 1] * GV[i]   # jet: (I - h_j G_j) w;  crop: w - h_j G_j u_k
        us[j] = u
        w[j] = u
    Z = [x]
    for k in range(1, L + 1):
        Z.append(Z[-1] - hs[k - 1] * w[k])
    return tuple(Z)


def truncated_sweep_materialized(phis: Sequence[Phi], hs: Sequence[float], x: torch.Tensor,
                                 closure: str) -> tuple:
    """As :func:`truncated_sweep`, carrying the (B, N, N) Jacobian as the core's jet does
    (its degree-1 coefficient). For comparison only."""
    B, N = x.shape
    J = torch.eye(N, dtype=x.dtype, device=x.device).expand(B, N, N)
    Z = [x]
    for k in range(1, len(phis) + 1):
        u, tans = jvp_many(phis[k - 1], x, _basis(x), k)
        G = tans.permute(1, 2, 0)                                # (B, N, N)
        Z.append(Z[-1] - hs[k - 1] * torch.einsum("bni,bi->bn", J, u))
        J = J - hs[k - 1] * (J @ G if closure == "jet" else G)
    return tuple(Z)


# -- the imbedded adjoint (Theorem 2) ------------------------------------------------------
def adjoint_sweep(layers: Sequence[tuple], hs: Sequence[float], x: torch.Tensor,
                  g: torch.Tensor, shapes: Sequence[torch.Size], form: str = "discrete"):
    """Lam and Lam_w of every depth, in one sweep in depth (Theorem 2).

    The fields are functions of the input, carried for a *linear* terminal loss
    ``T(z) = <g, z>`` (the cotangent of the outputs), ``Lam_0 = g``, ``Lam_w,0 = 0``:

        Lam_k   = Lam_{k-1}   - h_k [grad Lam_{k-1}   . Phi_k + (grad_x Phi_k)^T Lam_{k-1}]
        Lam_w,k = Lam_w,k-1   - h_k [grad Lam_w,k-1   . Phi_k + (grad_w Phi_k)^T Lam_{k-1}]

    (eq. (15) with the Jacobian of ``Lam`` at ``p_{k-1}``, and eq. (32),
    ``Phi_w = grad_w Phi``). This is the exact gradient of eq. (14) applied to
    ``V = <g, Z>``: by linearity of the transport, ``Lam_k = grad_x <g, Z_k(x)>``, so it
    agrees with automatic differentiation of :func:`exact_sweep`. The Jacobian products
    ``grad Lam . Phi`` are nested jvps of the previous layers' recursion (forward over
    reverse mode), as in :func:`exact_sweep`.

    ``form="paper"`` takes ``grad Lam`` at ``p_k``, "updated first", as eq. (15) is
    printed and as the numpy core's ``disc_step`` does; it is not the gradient of the
    discrete network (it differs by ``O(h^2)`` per layer) and serves to compare with the
    core. There each update of ``Lam`` (of ``Lam_w``) adds a constant ``eps_k`` to the
    field, ``-h_k (grad Lam~_k - grad Lam_{k-1}) . Phi_k(x)`` at the input, where
    ``Lam~_k`` is the plain Euler update: the core's coefficient of degree 1 (degree 0 for
    ``Lam_w``) is replaced while the higher ones keep their Euler steps.

    Parameters
    ----------
    layers : sequence of (module, names, tensors, index)
        Layer ``k``'s dynamics as a module called through ``functional_call`` with its
        parameters ``dict(zip(names, tensors))``, and ``index[i]``, the position of
        ``tensors[i]`` in the flat parameter list (shared parameters share an index).
    g : Tensor, shape (G, B, N)
        ``G`` cotangents, carried side by side.
    shapes : sequence of torch.Size
        The flat parameter list's shapes.

    Returns
    -------
    lam : tuple of L + 1 tensors (G, B, N)
    lam_w : tuple of L + 1 tuples of tensors (G, *shape)
    """
    n_g = g.shape[0]
    L = len(layers)
    eps: list = [None] * L

    def make(k: int):
        if k == 0:
            zeros = tuple(torch.zeros((n_g,) + tuple(s), dtype=g.dtype, device=g.device)
                          for s in shapes)
            return lambda xx: ((g,), (zeros,))
        prev = make(k - 1)
        module, names, tensors, index = layers[k - 1]
        h = hs[k - 1]
        e = eps[k - 1]

        def A(xx):
            def f(xa, params):
                return call_phi(lambda z: functional_call(module, params, (z,)), xa, k)

            u, pullback = vjp(f, xx, dict(zip(names, tensors)))
            (lams, lws), (dlams, dlws) = jvp(prev, (xx,), (u,))
            lam, lw, dlam, dlw = lams[-1], lws[-1], dlams[-1], dlws[-1]
            gx, gw = vmap(pullback)(lam)                  # (grad_x Phi)^T Lam, (grad_w Phi)^T Lam
            new_lam = lam - h * (dlam + gx)
            new_lw = [lw[i] - h * dlw[i] for i in range(len(shapes))]
            for name, i in zip(names, index):
                new_lw[i] = new_lw[i] - h * gw[name]
            if e is not None:                             # form="paper"
                new_lam = new_lam + e[0]
                new_lw = [a + b for a, b in zip(new_lw, e[1])]
            return lams + (new_lam,), lws + (tuple(new_lw),)
        return A

    if form == "paper":
        for k in range(1, L + 1):
            module, names, tensors, _ = layers[k - 1]
            u = call_phi(lambda z: functional_call(module, dict(zip(names, tensors)), (z,)), x, k)
            _, (dlams, dlws) = jvp(make(k), (x,), (u,))
            h = hs[k - 1]
            eps[k - 1] = (-h * (dlams[k] - dlams[k - 1]),
                          tuple(-h * (a - b) for a, b in zip(dlws[k], dlws[k - 1])))
    return make(L)(x)


# -- stateful modules ----------------------------------------------------------------------
def batchnorms(modules: Sequence[torch.nn.Module]) -> list:
    """Batch-norm modules in training mode that would update running statistics."""
    seen, out = set(), []
    for mod in modules:
        for m in mod.modules():
            if isinstance(m, _BatchNorm) and m.training and m.track_running_stats \
                    and id(m) not in seen:
                seen.add(id(m))
                out.append(m)
    return out


def _batch_norm(m: _BatchNorm) -> Callable:
    def forward(x):
        dims = [0] + list(range(2, x.ndim))
        mean = x.mean(dims, keepdim=True)
        var = (x - mean).pow(2).mean(dims, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + m.eps)
        if m.weight is not None:
            shape = [1, -1] + [1] * (x.ndim - 2)
            y = y * m.weight.view(shape) + m.bias.view(shape)
        return y
    return forward


def _layer_norm(m: torch.nn.LayerNorm) -> Callable:
    def forward(x):
        dims = list(range(x.ndim - len(m.normalized_shape), x.ndim))
        mean = x.mean(dims, keepdim=True)
        var = (x - mean).pow(2).mean(dims, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + m.eps)
        if m.weight is not None:
            y = y * m.weight
        if getattr(m, "bias", None) is not None:
            y = y + m.bias
        return y
    return forward


def _group_norm(m: torch.nn.GroupNorm) -> Callable:
    def forward(x):
        B, C = x.shape[:2]
        xg = x.reshape(B, m.num_groups, -1)
        mean = xg.mean(-1, keepdim=True)
        var = (xg - mean).pow(2).mean(-1, keepdim=True)
        y = ((xg - mean) * torch.rsqrt(var + m.eps)).reshape(x.shape)
        if m.affine:
            shape = [1, -1] + [1] * (x.ndim - 2)
            y = y * m.weight.view(shape) + m.bias.view(shape)
        return y
    return forward


def _decomposed(m: torch.nn.Module) -> Callable | None:
    if isinstance(m, _BatchNorm) and (m.training or m.running_mean is None):
        return _batch_norm(m)
    if isinstance(m, torch.nn.LayerNorm):
        return _layer_norm(m)
    if isinstance(m, torch.nn.GroupNorm):
        return _group_norm(m)
    return None


@contextlib.contextmanager
def differentiable_norms(modules: Sequence[torch.nn.Module]):
    """Normalisation layers made safe for the nested derivatives of the sweeps.

    * Batch norm in training mode normalises with the batch statistics without updating
      the running ones (torch.func transforms refuse in-place updates of captured
      buffers; :func:`update_statistics` makes the update).
    * Batch norm from batch statistics, layer norm and group norm are computed from
      primitive operations: torch's fused kernels give wrong second derivatives when
      differentiated again (reverse over forward mode, forward over forward mode; pytorch
      issues 196699, 196700, 186256), which every Jacobian mode here does. Batch norm in
      eval mode is an affine map and keeps its kernel.
    """
    bns = batchnorms(modules)
    swapped = []
    for m in bns:
        m.track_running_stats = False
    try:
        for mod in modules:
            for m in mod.modules():
                fwd = _decomposed(m)
                if fwd is not None and "forward" not in m.__dict__:
                    m.forward = fwd
                    swapped.append(m)
        yield
    finally:
        for m in swapped:
            del m.forward
        for m in bns:
            m.track_running_stats = True


def update_statistics(phis: Sequence[Phi], x: torch.Tensor) -> None:
    """One plain evaluation of every layer's ``Phi`` at ``x`` (no graph, random numbers
    not consumed): the running-statistics update a standard forward would make."""
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        for phi in phis:
            phi(x)
