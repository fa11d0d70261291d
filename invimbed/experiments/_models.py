"""The networks of the paper's experiments (appendix AppendixHyperparameters).

- :func:`mnist_encoder` / :func:`mnist_decoder`: the rotating-MNIST autoencoder of
  Yildiz et al. (ODE2VAE) as reused by Vialard et al. and the paper (16 base filters).
- :func:`balls_encoder` / :func:`balls_decoder`: the same family for 32 x 32 bouncing
  balls, the encoder taking the first 3 frames as 3 channels.
- :class:`ConvAutoencoderPhi`: the paper's fully convolutional autoencoder (appendix
  BBConvHypSubsection) as one InImNet layer on flattened 4 x 32 x 32 inputs.
- :class:`LatentInImNet`: encoder -> InImNet on the latent state with the time appended
  -> decoder, the outputs of every depth from one pass.
- :class:`LatentODE`: the baseline, the same encoder/decoder with a neural ODE in the
  latent space integrated by torchdiffeq's ``odeint_adjoint`` (dopri5).
- :class:`ConvInImNet`: InImNet in pixel space whose layers are
  :class:`ConvAutoencoderPhi`.

Every model maps ``(x0, times)`` to predicted frames: ``x0`` the conditioning frames
``(B, C, H, W)``, ``times`` ``(T,)``; ``forward`` returns ``(B, T, H, W)`` at the trained
depth, ``all_depths`` ``(n_depths, B, T, H, W)`` (InImNet models only).
"""

from __future__ import annotations

import torch
from torch import nn

from ..nn import InImNet
from ..nn import MLP

__all__ = ["ConvAutoencoderPhi", "ConvInImNet", "LatentInImNet", "LatentODE", "balls_decoder",
           "balls_encoder", "mnist_decoder", "mnist_encoder"]


def mnist_encoder(latent: int, n_filt: int = 16, in_channels: int = 1) -> nn.Module:
    """28 x 28 -> 14 -> 7 -> 4 (conv 5x5 stride 2) -> linear to ``latent``."""
    return nn.Sequential(
        nn.Conv2d(in_channels, n_filt, 5, stride=2, padding=2), nn.BatchNorm2d(n_filt), nn.ReLU(),
        nn.Conv2d(n_filt, 2 * n_filt, 5, stride=2, padding=2), nn.BatchNorm2d(2 * n_filt),
        nn.ReLU(),
        nn.Conv2d(2 * n_filt, 4 * n_filt, 5, stride=2, padding=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * n_filt * 16, latent),
    )


def mnist_decoder(latent: int, n_filt: int = 16) -> nn.Module:
    """``latent`` -> linear to 4 n_filt x 4 x 4 -> transposed convs 6 -> 13 -> 28 -> 28,
    sigmoid."""
    return nn.Sequential(
        nn.Linear(latent, 4 * n_filt * 16), nn.Unflatten(1, (4 * n_filt, 4, 4)),
        nn.ConvTranspose2d(4 * n_filt, 8 * n_filt, 3, stride=1, padding=0),
        nn.BatchNorm2d(8 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(8 * n_filt, 4 * n_filt, 5, stride=2, padding=1),
        nn.BatchNorm2d(4 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(4 * n_filt, 2 * n_filt, 5, stride=2, padding=1, output_padding=1),
        nn.BatchNorm2d(2 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(2 * n_filt, 1, 5, stride=1, padding=2), nn.Sigmoid(),
    )


def _conv_encoder(in_channels: int, n_filt: int) -> list[nn.Module]:
    """32 -> 16 -> 8 -> 4, Keras ``Conv2D(.., 5, strides=2, padding='same')``."""
    return [
        nn.Conv2d(in_channels, n_filt, 5, stride=2, padding=2), nn.BatchNorm2d(n_filt), nn.ReLU(),
        nn.Conv2d(n_filt, 2 * n_filt, 5, stride=2, padding=2), nn.BatchNorm2d(2 * n_filt),
        nn.ReLU(),
        nn.Conv2d(2 * n_filt, 4 * n_filt, 5, stride=2, padding=2), nn.ReLU(),
    ]


def _conv_decoder(out_channels: int, n_filt: int) -> list[nn.Module]:
    """4 -> 8 -> 16 -> 32 -> 32, Keras ``Conv2DTranspose(.., padding='same')``."""
    return [
        nn.ConvTranspose2d(4 * n_filt, 8 * n_filt, 3, stride=2, padding=1, output_padding=1),
        nn.BatchNorm2d(8 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(8 * n_filt, 4 * n_filt, 5, stride=2, padding=2, output_padding=1),
        nn.BatchNorm2d(4 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(4 * n_filt, 2 * n_filt, 5, stride=2, padding=2, output_padding=1),
        nn.BatchNorm2d(2 * n_filt), nn.ReLU(),
        nn.ConvTranspose2d(2 * n_filt, out_channels, 5, stride=1, padding=2),
    ]


def balls_encoder(latent: int, n_filt: int = 16, in_frames: int = 3) -> nn.Module:
    """``in_frames`` x 32 x 32 -> 4 n_filt x 4 x 4 -> linear to ``latent``."""
    return nn.Sequential(*_conv_encoder(in_frames, n_filt), nn.Flatten(),
                         nn.Linear(4 * n_filt * 16, latent))


def balls_decoder(latent: int, n_filt: int = 16) -> nn.Module:
    """``latent`` -> linear to 4 n_filt x 4 x 4 -> 32 x 32, sigmoid."""
    return nn.Sequential(nn.Linear(latent, 4 * n_filt * 16),
                         nn.Unflatten(1, (4 * n_filt, 4, 4)), *_conv_decoder(1, n_filt),
                         nn.Sigmoid())


class ConvAutoencoderPhi(nn.Module):
    """The paper's convolutional InImNet layer (appendix BBConvHypSubsection): the fully
    convolutional autoencoder of Vialard et al. without its final sigmoid, acting on
    flattened ``channels x size x size`` vectors, ``(B, C H W) -> (B, C H W)``."""

    def __init__(self, channels: int = 4, size: int = 32, n_filt: int = 16) -> None:
        super().__init__()
        self.shape = (channels, size, size)
        self.net = nn.Sequential(*_conv_encoder(channels, n_filt), *_conv_decoder(channels, n_filt))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(x.shape[0], *self.shape)).reshape(x.shape[0], -1)


def _with_time(z0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """``[z0_b, t_k]`` for every (b, k): shape (B * T, latent + 1), b major."""
    B, T = z0.shape[0], times.shape[0]
    z = z0[:, None, :].expand(B, T, z0.shape[1])
    t = times.to(z0)[None, :, None].expand(B, T, 1)
    return torch.cat([z, t], dim=-1).reshape(B * T, -1)


class LatentInImNet(nn.Module):
    """Encoder -> InImNet on ``[latent, t]`` -> decoder of the first ``latent`` outputs.

    The frame at time ``t_k`` is ``decoder(Z(p, [enc(x0), t_k])[:latent])``; the output
    at ``p = 0`` is the input itself, so that row of a sample grid shows the encoded
    first frame at every time. Trained on the depth ``p_min`` (the last of ``depths``).
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module, latent: int, *, p_min: float,
                 hidden_layers: int = 2, inflation: float = 2, dropout: float = 0.3,
                 closure: str = "crop", shared: bool = False, depths=None) -> None:
        super().__init__()
        self.encoder, self.decoder, self.latent = encoder, decoder, latent
        self.inimnet = InImNet(latent + 1, p_min, depths=depths, shared=shared,
                               hidden_layers=hidden_layers, inflation=inflation,
                               dropout=dropout, closure=closure)

    @property
    def depths(self) -> torch.Tensor:
        return self.inimnet.depths

    def all_depths(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        """Predicted frames at every depth, ``(n_depths, B, T, H, W)``."""
        B, T = x0.shape[0], times.shape[0]
        Z = self.inimnet(_with_time(self.encoder(x0), times))        # (n, B T, latent + 1)
        n = Z.shape[0]
        img = self.decoder(Z[..., :self.latent].reshape(n * B * T, self.latent))
        return img.reshape(n, B, T, *img.shape[-2:])

    def forward(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        """Predicted frames at ``p_min``, ``(B, T, H, W)``: the decoder runs on the
        deepest output only (the other depths' outputs are formed but not decoded)."""
        B, T = x0.shape[0], times.shape[0]
        Z = self.inimnet(_with_time(self.encoder(x0), times))[-1]
        img = self.decoder(Z[:, :self.latent])
        return img.reshape(B, T, *img.shape[-2:])


class _ODEFunc(nn.Module):
    def __init__(self, latent: int, hidden_layers: int, inflation: float) -> None:
        super().__init__()
        self.mlp = MLP(latent, hidden_layers, inflation, 0.0, "tanh")
        self.nfe = 0

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        self.nfe += 1
        return self.mlp(z)


class LatentODE(nn.Module):
    """The baseline: encoder -> ``dz/dt = f(z)`` (an MLP like InImNet's Phi, without
    dropout, which an adaptive solver cannot integrate) from ``z(0) = enc(x0)`` over the
    frame times by ``torchdiffeq.odeint_adjoint`` (dopri5, the adjoint-method family
    the paper compares against) -> decoder at every frame time."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, latent: int, *,
                 hidden_layers: int = 2, inflation: float = 2, method: str = "dopri5",
                 rtol: float = 1e-3, atol: float = 1e-4, adjoint: bool = True) -> None:
        super().__init__()
        self.encoder, self.decoder, self.latent = encoder, decoder, latent
        self.func = _ODEFunc(latent, hidden_layers, inflation)
        self.method, self.rtol, self.atol, self.adjoint = method, rtol, atol, adjoint

    def forward(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        from torchdiffeq import odeint, odeint_adjoint

        B, T = x0.shape[0], times.shape[0]
        z0 = self.encoder(x0)
        solve = odeint_adjoint if self.adjoint else odeint
        kw = {"adjoint_params": tuple(self.func.parameters())} if self.adjoint else {}
        z = solve(self.func, z0, times.to(z0), method=self.method, rtol=self.rtol,
                  atol=self.atol, **kw)                           # (T, B, latent)
        img = self.decoder(z.transpose(0, 1).reshape(B * T, self.latent))
        return img.reshape(B, T, *img.shape[-2:])


class ConvInImNet(nn.Module):
    """InImNet in pixel space (appendix BBConvHypSubsection): the input is the first
    ``in_frames`` frames plus a channel filled with the time, flattened to
    ``(in_frames + 1) * size**2``; each layer is a :class:`ConvAutoencoderPhi`; the
    prediction is the first channel of the output."""

    def __init__(self, *, p_min: float, in_frames: int = 3, size: int = 32, n_filt: int = 16,
                 closure: str = "crop", depths=None) -> None:
        super().__init__()
        c = in_frames + 1
        self.shape = (c, size, size)
        self.inimnet = InImNet(c * size * size, p_min, depths=depths, closure=closure,
                               phi=lambda i: ConvAutoencoderPhi(c, size, n_filt))

    @property
    def depths(self) -> torch.Tensor:
        return self.inimnet.depths

    def _inputs(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        B, T = x0.shape[0], times.shape[0]
        size = self.shape[1]
        frames = x0[:, None].expand(B, T, *x0.shape[1:])
        t = times.to(x0)[None, :, None, None, None].expand(B, T, 1, size, size)
        return torch.cat([frames, t], dim=2).reshape(B * T, -1)

    def all_depths(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        B, T = x0.shape[0], times.shape[0]
        Z = self.inimnet(self._inputs(x0, times))
        n = Z.shape[0]
        return Z.reshape(n, B, T, *self.shape)[:, :, :, 0]

    def forward(self, x0: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        B, T = x0.shape[0], times.shape[0]
        Z = self.inimnet(self._inputs(x0, times))[-1]
        return Z.reshape(B, T, *self.shape)[:, :, 0]
