"""The default per-layer dynamics ``Phi(p_i, x)``: the paper's MLP (appendix,
AppendixHyperparameters)."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import torch
from torch import nn

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "softplus": nn.Softplus,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "sigmoid": nn.Sigmoid,
}


def make_activation(activation: Any) -> Callable[[], nn.Module]:
    """``activation`` as a factory of modules: a name in ``ACTIVATIONS`` or a callable
    returning an ``nn.Module`` (e.g. ``torch.nn.Tanh``)."""
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {', '.join(map(repr, ACTIVATIONS))} "
                             f"or a callable returning a torch.nn.Module, but got {activation!r}")
        return ACTIVATIONS[activation]
    if callable(activation):
        return activation
    raise TypeError(f"`activation` must be a name or a callable returning a torch.nn.Module, "
                    f"but got {activation!r} (type {type(activation).__name__})")


class MLP(nn.Module):
    """The paper's per-layer dynamics: an MLP of ``layers`` linear layers mapping
    ``(B, dim) -> (B, dim)``.

    ``layers - 1`` hidden layers of width ``round(inflation * dim)`` (the paper's
    "inflation factor", the size ratio between the intermediate and the input layers),
    each followed by the activation and, if ``dropout > 0``, dropout; the last layer maps
    back to ``dim`` with neither ("dropout regularisation for every layer except the
    last", appendix AppendixHyperparameters). ``layers`` is the paper's ``n`` of Table
    Table 1 (2 or 3); ``layers=1`` is a single affine map.

    Parameters
    ----------
    dim : int
        Input and output size.
    layers : int, default 2
        Number of linear layers.
    inflation : float, default 2
        Hidden width over ``dim``.
    dropout : float, default 0.0
        Dropout probability after every hidden layer.
    activation : str or callable, default "tanh"
        ``"tanh"``, ``"relu"``, ``"softplus"``, ``"elu"``, ``"gelu"``, ``"silu"``,
        ``"sigmoid"``, or a callable returning a module. Prefer a smooth one with
        ``closure="exact"`` or ``"jet"``: their nested Jacobians differentiate ``Phi``
        more than once.
    """

    def __init__(self, dim: int, layers: int = 2, inflation: float = 2, dropout: float = 0.0,
                 activation: Any = "tanh") -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(f"`dim` must be a positive integer, but got {dim!r}")
        if isinstance(layers, bool) or not isinstance(layers, numbers.Integral) or layers < 1:
            raise ValueError(f"`hidden_layers` must be an integer >= 1, but got {layers!r}")
        if isinstance(inflation, bool) or not (isinstance(inflation, numbers.Real)
                                               and math.isfinite(inflation) and inflation > 0):
            raise ValueError(f"`inflation` must be a positive number, but got {inflation!r}")
        if isinstance(dropout, bool) or not (isinstance(dropout, numbers.Real)
                                             and 0.0 <= dropout < 1.0):
            raise ValueError(f"`dropout` must be in [0, 1), but got {dropout!r}")
        dim, layers = int(dim), int(layers)
        act = make_activation(activation)
        width = max(1, int(round(inflation * dim)))
        sizes = [dim] + [width] * (layers - 1) + [dim]
        mods: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            mods.append(nn.Linear(a, b))
            if i < layers - 1:
                mods.append(act())
                if dropout > 0:
                    mods.append(nn.Dropout(dropout))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
