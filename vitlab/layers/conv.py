"""Convolutional blocks: of image restoration networks (EDSR, Lim et al. 2017; IPT's heads and tails), and of
VQGAN's autoencoder (Esser et al. 2021).

    ResBlock      x + res_scale · conv(act(conv(x)))          no BatchNorm: it hurts restoration (EDSR §3.1)
    Upsampler     ×2ᵏ: k × [conv 3×3 to 4C → PixelShuffle(2)];  ×3: conv 3×3 to 9C → PixelShuffle(3);  ×1: nothing
    MeanShift     x − rgb_range · mean (sign −1) or x + rgb_range · mean (sign +1), per channel, divided by std

Sub-module names follow EDSR's code (`body.0`, `body.2`; the upsampler's convolutions at 0, 2, ...), which IPT's
release reuses, so their checkpoints load as they are.

    NormResBlock  skip(x) + conv(SiLU(GN(conv(SiLU(GN(x))))))   VQGAN's: GroupNorm, SiLU, a 1×1 skip on a new width
    Downsample    pad right and bottom, 3×3 conv of stride 2;   Upsample: nearest ×2, 3×3 conv

Shapes: (B, C, H, W) throughout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def same_conv(in_channels: int, out_channels: int, kernel_size: int, bias: bool = True) -> nn.Conv2d:
    """A convolution that keeps the spatial size (odd kernels): padding kernel_size // 2."""
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=bias)


class ResBlock(nn.Module):
    """x + res_scale · conv(act(conv(x))), both convolutions C -> C with `kernel_size` (IPT's heads use 5)."""

    def __init__(self, channels: int, kernel_size: int = 3, res_scale: float = 1.0,
                 act_layer: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.body = nn.Sequential(same_conv(channels, channels, kernel_size), act_layer(),
                                  same_conv(channels, channels, kernel_size))
        self.res_scale = res_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.body(x)
        return x + (branch if self.res_scale == 1 else branch * self.res_scale)


class Upsampler(nn.Sequential):
    """(B, C, H, W) -> (B, C, H·scale, W·scale) by sub-pixel convolution (Shi et al. 2016): a 3×3 convolution
    makes scale² channels per output channel, PixelShuffle rearranges them into a scale × scale block. Powers of 2
    repeat the ×2 step; scale 1 is the identity (an empty Sequential, as in EDSR, so indices match)."""

    def __init__(self, scale: int, channels: int) -> None:
        if scale == 3:
            layers = [same_conv(channels, 9 * channels, 3), nn.PixelShuffle(3)]
        elif scale >= 1 and scale & (scale - 1) == 0:
            layers = []
            for _ in range(int(math.log2(scale))):
                layers += [same_conv(channels, 4 * channels, 3), nn.PixelShuffle(2)]
        else:
            raise ValueError(f"upsampling scale must be 1, 3 or a power of 2, got {scale}")
        super().__init__(*layers)
        self.scale = scale


class MeanShift(nn.Module):
    """Per-channel (x + sign · rgb_range · mean) / std, the fixed input normalisation (sign −1) and its inverse at
    the output (sign +1; std 1 makes the two exact inverses).

    Stored as a frozen 1×1 convolution's `weight` (C, C, 1, 1) and `bias` (C,), buffers rather than parameters so
    that no optimizer touches them, under EDSR's names so that released checkpoints carry them.
    """

    def __init__(self, rgb_range: float = 255.0, mean: tuple[float, ...] = (0.4488, 0.4371, 0.4040),
                 std: tuple[float, ...] = (1.0, 1.0, 1.0), sign: int = -1) -> None:
        super().__init__()
        std_t = torch.tensor(std)
        self.register_buffer("weight", torch.diag(1 / std_t).view(len(std), len(std), 1, 1))
        self.register_buffer("bias", sign * rgb_range * torch.tensor(mean) / std_t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias)


# ---- the convolutional autoencoder of VQGAN (Esser et al. 2021), after DDPM's U-Net (Ho et al. 2020) ----------
class NormResBlock(nn.Module):
    """x + conv(SiLU(GN(conv(SiLU(GN(x)))))), with a 1×1 convolution on the skip path when the width changes.

    GroupNorm rather than BatchNorm: the statistics of one image, so that a batch of one behaves as in training.
    (B, in_channels, H, W) -> (B, out_channels, H, W). Names follow taming-transformers' ResnetBlock, whose
    `nin_shortcut` is `shortcut` here.
    """

    def __init__(self, in_channels: int, out_channels: int | None = None, dropout: float = 0.0,
                 num_groups: int = 32, eps: float = 1e-6) -> None:
        super().__init__()
        out_channels = out_channels or in_channels
        self.norm1 = nn.GroupNorm(num_groups, in_channels, eps=eps)
        self.conv1 = same_conv(in_channels, out_channels, 3)
        self.norm2 = nn.GroupNorm(num_groups, out_channels, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = same_conv(out_channels, out_channels, 3)
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.shortcut(x) + h


class Downsample(nn.Module):
    """(B, C, H, W) -> (B, C, H/2, W/2): a 3×3 convolution of stride 2 after padding one pixel on the right and at
    the bottom only (taming's and diffusers' layout, so their weights give their outputs)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    """(B, C, H, W) -> (B, C, 2H, 2W): nearest-neighbour ×2, then a 3×3 convolution."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = same_conv(channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
