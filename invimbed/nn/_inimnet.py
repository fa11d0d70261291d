"""``InImNet``: the paper's discrete invariant-imbedding network (section 3.1) as
a ``torch.nn.Module``, and its imbedded adjoint (Theorem 2)."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ._recursions import (adjoint_sweep, batchnorms, differentiable_norms, exact_sweep,
                          exact_sweep_materialized, truncated_sweep,
                          truncated_sweep_materialized, update_statistics)
from .._core.inputs.validation import as_bool
from ._phi import MLP

CLOSURES = ("exact", "crop", "jet")
BACKWARDS = ("autograd", "adjoint")
FORMS = ("discrete", "paper")


def _choice(value: Any, name: str, choices: tuple) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(map(repr, choices))}, "
                         f"but got {value!r}")
    return value


def _deprecated_jacobian(stacklevel: int = 3) -> None:
    warnings.warn("InImNet's `jacobian` is deprecated: use `closure`, which takes the same "
                  "values ('exact', 'crop', 'jet')", DeprecationWarning, stacklevel=stacklevel)


def _closure_keyword(closure: Any, jacobian: Any) -> tuple[Any, str]:
    """``(value, the keyword it came from)`` of ``closure=`` or its deprecated alias."""
    if jacobian is None:
        return ("exact" if closure is None else closure), "closure"
    if closure is not None:
        raise TypeError(f"give `closure` only (`jacobian` is its deprecated alias), but got "
                        f"closure={closure!r} and jacobian={jacobian!r}")
    _deprecated_jacobian(stacklevel=4)
    return jacobian, "jacobian"


def _depth_grid(p_min: Any, step: Any, depths: Any) -> list[float]:
    if depths is not None:
        if isinstance(depths, torch.Tensor):
            depths = depths.detach().cpu().tolist()
        try:
            grid = [float(p) for p in depths]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"`depths` must be a 1-D sequence of numbers, but got "
                            f"{depths!r}") from exc
        if len(grid) < 2 or grid[0] != 0.0 or not all(math.isfinite(p) for p in grid) \
                or any(b >= a for a, b in zip(grid[:-1], grid[1:])):
            raise ValueError(f"`depths` must be finite and strictly decreasing from q = 0 "
                             f"with at least one layer (e.g. [0, -1, -2]), but got {grid}")
        return grid
    if isinstance(p_min, bool) or not isinstance(p_min, numbers.Real) \
            or not math.isfinite(p_min) or p_min >= 0:
        raise ValueError(f"`p_min` must be a finite negative number, but got {p_min!r}")
    if isinstance(step, bool) or not isinstance(step, numbers.Real) \
            or not math.isfinite(step) or step <= 0:
        raise ValueError(f"`step` must be a finite positive number, but got {step!r}")
    n = max(1, math.ceil(-p_min / step - 1e-9))
    return [0.0] + [p_min * i / n for i in range(1, n + 1)]


class InImNet(nn.Module):
    r"""Discrete invariant-imbedding network: the outputs of every depth in one pass.

    The network of depth ``p`` maps ``x`` to ``Z(p, x) = z(q; p, x)`` with ``q = 0``.
    Layers are added at the *input* end: with depths ``0 = p_0 > ... > p_L = p_min`` and
    per-layer dynamics ``Phi(p_i, x)``, eq. (14),
    ``Z(p_i, x) = Z(p_{i-1}, x) - (p_i - p_{i-1}) grad_x Z(p_{i-1}, x) . Phi(p_i, x)``,
    ``Z(0, x) = x``, gives every output from one pass (docs/theory.md, "The discrete
    architecture"; the numpy core's ``solve_imbedding(..., method="disc")``). Options,
    costs and accuracy in detail: docs/nn.md.

    Parameters
    ----------
    dim : int
        Size ``N`` of the input and of every output (for images, ``C * H * W``).
    p_min : float, default -4
        Deepest depth, reached in ``ceil(-p_min / step)`` equal steps.
    step : float, default 1.0
        Largest layer step (the paper's experiments use unit steps).
    depths : sequence of float, optional
        The depths themselves, strictly decreasing from 0; overrides ``p_min``, ``step``.
    shared : bool, default False
        One ``Phi`` for every layer (Appendix F.3): the state dict does not depend on the
        depth, so a trained model loads into a deeper one to extrapolate.
    hidden_layers, inflation, dropout, activation : default 2, 2, 0.0, "tanh"
        The default ``Phi``, :class:`invimbed.nn.MLP` (the paper's ``n``, Table 1).
    closure : {"exact", "crop", "jet"}, default "exact"
        The nested Jacobian ``grad_x Z(p_{i-1}, x)`` of eq. (14), the core's
        ``closure=``: ``"exact"`` (nested ``torch.func.jvp``, cost exponential in the
        layers), ``"jet"`` (the jet of order 1; exact for affine ``Phi``), ``"crop"``
        (eq. (21), as the paper's experiments). They coincide for one or two layers.
    backward : {"autograd", "adjoint"}, default "autograd"
        ``"adjoint"``: the same gradients by the *imbedded* adjoint, a second sweep in
        depth of eq. (15) (Theorem 2) and eq. (32) from ``p = 0``
        (:func:`imbedded_adjoint`), storing no forward graph; not a backward solve in
        ``t``. Needs ``closure="exact"``; not twice differentiable.
    phi : callable, optional
        Factory ``phi(layer_index) -> nn.Module`` mapping ``(B, dim) -> (B, dim)``;
        layer ``l`` is ``Phi(p_{l+1}, .)``; it should act on each sample separately.
    materialize : bool, default False
        Form the ``(B, dim, dim)`` Jacobians (for comparisons and benchmarks only).
    jacobian : {"exact", "crop", "jet"}, optional
        Deprecated alias of ``closure`` (``DeprecationWarning``; both: ``TypeError``).

    Attributes
    ----------
    depths : Tensor, shape (n,)
        ``0 = p_0 > ... > p_min`` (a buffer, moved with the module).
    phis : nn.ModuleList
        The per-layer dynamics (one module when ``shared``).
    closure : str
        The closure (settable; ``jacobian`` is its deprecated alias).

    Examples
    --------
    >>> import torch
    >>> from invimbed.nn import InImNet
    >>> net = InImNet(3, p_min=-2, closure="crop")
    >>> net(torch.randn(5, 3)).shape          # depths 0, -1, -2
    torch.Size([3, 5, 3])
    """

    depths: torch.Tensor

    def __init__(self, dim: int, p_min: float = -4, *, step: float = 1.0, depths: Any = None,
                 shared: bool = False, hidden_layers: int = 2, inflation: float = 2,
                 dropout: float = 0.0, activation: Any = "tanh", closure: str | None = None,
                 backward: str = "autograd", phi: Callable[[int], nn.Module] | None = None,
                 materialize: bool = False, jacobian: str | None = None) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(f"`dim` must be a positive integer, but got {dim!r}")
        self.dim = dim = int(dim)
        closure, name = _closure_keyword(closure, jacobian)
        self._modes = (_choice(closure, name, CLOSURES),
                       _choice(backward, "backward", BACKWARDS))
        self._check_modes(*self._modes, name)
        self.shared = as_bool(shared, "shared")
        self.materialize = as_bool(materialize, "materialize")
        grid = _depth_grid(p_min, step, depths)
        self._grid = grid
        self._h = [b - a for a, b in zip(grid[:-1], grid[1:])]
        self.register_buffer("depths", torch.tensor(grid, dtype=torch.get_default_dtype()),
                             persistent=False)
        n_layers = len(grid) - 1
        if phi is None:
            def phi(index: int) -> nn.Module:
                return MLP(dim, hidden_layers, inflation, dropout, activation)
        elif not callable(phi):
            raise TypeError(f"`phi` must be a callable layer_index -> nn.Module, but got "
                            f"{phi!r} (type {type(phi).__name__})")
        mods = []
        for i in range(1 if self.shared else n_layers):
            m = phi(i)
            if not isinstance(m, nn.Module):
                raise TypeError(f"`phi({i})` must return a torch.nn.Module, but returned "
                                f"{type(m).__name__}")
            mods.append(m)
        self.phis = nn.ModuleList(mods)

    @staticmethod
    def _check_modes(closure: str, backward: str, name: str = "closure") -> None:
        if backward == "adjoint" and closure != "exact":
            raise ValueError(
                f"backward='adjoint' needs {name}='exact', but got {name}={closure!r}: "
                f"the imbedded adjoint (Theorem 2) is the gradient of the exact discrete "
                f"network, not of the {closure!r} truncation. Use backward='autograd' "
                f"(as the paper's experiments did), or compare with imbedded_adjoint().")

    @property
    def closure(self) -> str:
        """The nested-Jacobian closure, ``"exact"``, ``"crop"`` or ``"jet"`` (settable)."""
        return self._modes[0]

    @closure.setter
    def closure(self, value: str) -> None:
        self._set_closure(value, "closure")

    def _set_closure(self, value: str, name: str) -> None:
        value = _choice(value, name, CLOSURES)
        self._check_modes(value, self._modes[1], name)
        self._modes = (value, self._modes[1])

    @property
    def jacobian(self) -> str:
        """Deprecated alias of :attr:`closure`."""
        _deprecated_jacobian()
        return self._modes[0]

    @jacobian.setter
    def jacobian(self, value: str) -> None:
        _deprecated_jacobian(stacklevel=4)          # through nn.Module.__setattr__
        self._set_closure(value, "jacobian")

    @property
    def backward_mode(self) -> str:
        """The backward pass, ``"autograd"`` or ``"adjoint"`` (settable)."""
        return self._modes[1]

    @backward_mode.setter
    def backward_mode(self, value: str) -> None:
        value = _choice(value, "backward", BACKWARDS)
        self._check_modes(self._modes[0], value)
        self._modes = (self._modes[0], value)

    @property
    def n_layers(self) -> int:
        return len(self._h)

    def layer(self, index: int) -> nn.Module:
        """The dynamics of layer ``index`` (0-based): ``Phi(p_{index+1}, .)``."""
        return self.phis[0 if self.shared else index]

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, depths={[round(p, 6) for p in self._grid]}, "
                f"closure={self.closure!r}, backward={self.backward_mode!r}, "
                f"shared={self.shared}" + (", materialize=True" if self.materialize else ""))

    # -- forward ---------------------------------------------------------------------------
    def _check_input(self, x: Any) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"`x` must be a torch.Tensor of shape (B, {self.dim}), but got "
                            f"{type(x).__name__}")
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"`x` must have shape (B, {self.dim}), but has shape "
                             f"{tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"`x` must be a floating-point tensor, but has dtype {x.dtype}")
        finite = torch.isfinite(x.detach()).all(dim=1)
        if not bool(finite.all()):
            rows = torch.nonzero(~finite).flatten().tolist()
            shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
            raise ValueError(f"`x` must be finite, but {len(rows)} of its {x.shape[0]} rows "
                             f"hold a NaN or an infinity (row(s) {shown})")

    def _check_dtype(self, x: torch.Tensor) -> None:
        """A TypeError where ``x``'s dtype is not the parameters' (torch would fail inside
        the first layer with "mat1 and mat2 must have the same dtype"); no silent cast,
        as torch's own modules do not cast."""
        dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        if dtype is not None and x.dtype != dtype:
            raise TypeError(
                f"`x` has dtype {x.dtype}, but the model's parameters are {dtype}: convert "
                f"the input, x.to({dtype}), or the model, model.to({x.dtype})"
                + (" (model.double())" if x.dtype == torch.float64 else
                   " (model.float())" if x.dtype == torch.float32 else ""))

    def _sweep(self, x: torch.Tensor, update_stats: bool = True) -> tuple:
        """The outputs ``(Z_0, ..., Z_L)`` by the chosen closure."""
        phis = [self.layer(i) for i in range(self.n_layers)]
        if update_stats and batchnorms(self.phis):
            update_statistics(phis, x)
        with differentiable_norms(self.phis):
            if self.closure == "exact":
                fn = exact_sweep_materialized if self.materialize else exact_sweep
                return fn(phis, self._h, x)
            fn = truncated_sweep_materialized if self.materialize else truncated_sweep
            return fn(phis, self._h, x, self.closure)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs of every depth, from one pass (eq. (14)).

        Parameters
        ----------
        x : Tensor, shape (B, dim)

        Returns
        -------
        Tensor, shape (n, B, dim)
            ``Z(p_i, x) = z(q; p_i, x)`` for ``p_i`` in ``self.depths`` (``Z(0, x) = x``
            first, ``p_min`` last).

        Raises
        ------
        TypeError, ValueError
            For an ``x`` that is not a floating-point tensor of shape (B, dim), that
            holds a NaN or an infinity (naming the rows), or whose dtype is not the
            parameters' (TypeError: convert ``x`` with ``x.to(dtype)``, or the model with
            ``model.double()`` / ``model.float()``; nothing is cast silently).
        """
        self._check_input(x)
        self._check_dtype(x)
        if self.backward_mode == "adjoint" and torch.is_grad_enabled():
            params = list(self.parameters())
            if x.requires_grad or any(p.requires_grad for p in params):
                return _AdjointFunction.apply(self, x, *params)
        return torch.stack(self._sweep(x))


def _layers(model: InImNet, params: list) -> list:
    """Each layer's (module, parameter names, tensors, index into ``params``)."""
    index = {id(p): i for i, p in enumerate(params)}
    out = []
    for k in range(model.n_layers):
        mod = model.layer(k)
        named = list(mod.named_parameters())
        out.append((mod, [n for n, _ in named], [p for _, p in named],
                    [index[id(p)] for _, p in named]))
    return out


def _run_adjoint(model: InImNet, x: torch.Tensor, g: torch.Tensor, params: list,
                 form: str = "discrete"):
    with differentiable_norms(model.phis):
        return adjoint_sweep(_layers(model, params), model._h, x, g,
                                 [p.shape for p in params], form)


class _AdjointFunction(torch.autograd.Function):
    """Forward: :func:`invimbed.nn._recursions.exact_sweep` without a graph. Backward: the
    imbedded adjoint of Theorem 2 for the cotangent of each used depth."""

    @staticmethod
    def forward(ctx, model: InImNet, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        bns = batchnorms(model.phis)
        phis = [model.layer(i) for i in range(model.n_layers)]
        if bns:
            update_statistics(phis, x)
        ctx.model = model
        ctx.layers = _layers(model, list(params))   # the tensors of this call (functional_call)
        ctx.rng = None
        if model.training:
            ctx.rng = (torch.get_rng_state(),
                       torch.cuda.get_rng_state(x.device) if x.device.type == "cuda" else None)
        ctx.save_for_backward(x.detach())
        with torch.no_grad():
            out = torch.stack(model._sweep(x.detach(), update_stats=False))
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        (x,) = ctx.saved_tensors
        model: InImNet = ctx.model
        used = [i for i in range(grad_out.shape[0]) if bool(torch.any(grad_out[i] != 0))]
        n_params = len(ctx.needs_input_grad) - 2
        flat: list = [None] * n_params
        for _, _, tensors, idx in ctx.layers:
            for t, i in zip(tensors, idx):
                flat[i] = t
        if not used:
            return (None, torch.zeros_like(x)) + tuple(
                None if t is None else torch.zeros_like(t) for t in flat)
        # with random layers, replay the forward's draws: sweep every layer, in its order
        L = model.n_layers if ctx.rng is not None else max(used)
        shapes = [t.shape if t is not None else torch.Size([0]) for t in flat]
        g = grad_out[used]
        layers = ctx.layers[:L]
        devices = [x.device] if (ctx.rng is not None and ctx.rng[1] is not None) else []
        with torch.random.fork_rng(devices=devices, enabled=ctx.rng is not None):
            if ctx.rng is not None:
                torch.set_rng_state(ctx.rng[0])
                if ctx.rng[1] is not None:
                    torch.cuda.set_rng_state(ctx.rng[1], x.device)
            with differentiable_norms(model.phis):
                lams, lws = adjoint_sweep(layers, model._h[:L], x, g, shapes, "discrete")
        grad_x = sum(lams[i][j] for j, i in enumerate(used))
        grads = [sum(lws[i][k][j] for j, i in enumerate(used)) if flat[k] is not None else None
                 for k in range(n_params)]
        return (None, grad_x) + tuple(grads)


def imbedded_adjoint(model: InImNet, x: torch.Tensor, grad_T: torch.Tensor, *,
                     form: str = "discrete") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""The imbedded adjoint ``Lam(p_i, x)`` and parameter gradient ``Lam_w(p_i, x)`` of
    every depth, by Theorem 2, in one sweep in depth (no forward pass in ``t``).

    The terminal loss enters through its gradient ``grad_T`` at the outputs: the sweep
    carries the linear terminal loss ``T(z) = <grad_T, z>``, for which (the transport
    being linear) ``V(p_i, x) = <grad_T, Z(p_i, x)>`` exactly, layer by layer. With
    ``grad_T = dT/dz`` evaluated at each depth's output this gives the gradients of the
    network's loss ``T(Z(p_i, x))``: what backpropagation gives, which is how
    ``InImNet(backward="adjoint")`` uses it. The recursions, from ``Lam(0, x) = grad_T``,
    ``Lam_w(0, x) = 0``, with ``h_i = p_i - p_{i-1}``:

    ```text
    Lam_i   = Lam_{i-1}   - h_i [grad Lam_{i-1}   . Phi_i + (grad_x Phi_i)^T Lam_{i-1}]
    Lam_w,i = Lam_w,{i-1} - h_i [grad Lam_w,{i-1} . Phi_i + (grad_w Phi_i)^T Lam_{i-1}]
    ```

    (eqs. (15) and (32)), with the nested Jacobians ``grad Lam . Phi``
    computed matrix-free and exactly (nested ``torch.func.jvp`` over ``vjp``), whatever
    ``model.closure`` is: for a ``"crop"`` or ``"jet"`` model this is the gradient of the
    exact discrete network, and its difference with backpropagation through the truncated
    model is the closure's error.

    Parameters
    ----------
    model : InImNet
    x : Tensor, shape (B, dim)
    grad_T : Tensor, shape (B, dim) or (n, B, dim)
        One terminal-loss gradient for every depth (all depths from one set of fields),
        or one per depth (``grad_T[i]`` for depth ``p_i``; carried side by side).
    form : {"discrete", "paper"}, default "discrete"
        ``"discrete"`` takes the Jacobian of ``Lam`` at ``p_{i-1}``: the exact gradient of
        eq. (14), equal to backpropagation. ``"paper"`` takes it at ``p_i``,
        "updated first", as eq. (15) is printed and as the numpy core's
        ``method="disc"`` does; it differs by ``O(h^2)`` per layer and is offered to
        reproduce the paper and the core.

    Returns
    -------
    lam : Tensor, shape (n, B, dim)
        ``Lam(p_i, x) = grad_x <grad_T, Z(p_i, x)>`` (form "discrete").
    param_grads : dict of str to Tensor, shape (n, *param.shape)
        ``Lam_w(p_i, x)``, summed over the batch, for each of ``model.named_parameters()``.

    Notes
    -----
    Dropout draws fresh masks: call it in ``eval()`` mode, or seed, to compare with a
    forward pass. Batch norm in training mode uses the batch statistics and leaves the
    running ones unchanged. Cost: like ``closure="exact"``, exponential in the number of
    layers, with a parameter pullback through each ``Phi`` (``L`` times that for
    ``form="paper"``).
    """
    if not isinstance(model, InImNet):
        raise TypeError(f"`model` must be an InImNet, but got {type(model).__name__}")
    model._check_input(x)
    form = _choice(form, "form", FORMS)
    n, B, N = model.n_layers + 1, x.shape[0], model.dim
    if not isinstance(grad_T, torch.Tensor) or tuple(grad_T.shape) not in ((B, N), (n, B, N)):
        got = tuple(grad_T.shape) if isinstance(grad_T, torch.Tensor) else type(grad_T).__name__
        raise ValueError(f"`grad_T` must be a tensor of shape {(B, N)} or {(n, B, N)}, but "
                         f"got {got}")
    model._check_dtype(x)
    named = list(model.named_parameters())
    params = [p for _, p in named]
    per_depth = grad_T.ndim == 3
    g = grad_T.detach().to(x.dtype)
    g = g if per_depth else g[None]
    with torch.no_grad():
        lams, lws = _run_adjoint(model, x.detach(), g, params, form)
    j = (lambda i: i) if per_depth else (lambda i: 0)
    lam = torch.stack([lams[i][j(i)] for i in range(n)])
    grads = {name: torch.stack([lws[i][k][j(i)] for i in range(n)])
             for k, (name, _) in enumerate(named)}
    return lam, grads
