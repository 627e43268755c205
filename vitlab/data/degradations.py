"""The degradations IPT learns to undo, generated from clean photographs on the fly.

    denoise30, denoise50   x + N(0, σ²) on the 0–255 scale, σ = 30 or 50, clamped to [0, 255] and rounded (an 8-bit
                           image, as a user's noisy file would be)
    sr2, sr3, sr4          bicubic downscaling by 2, 3, 4 with PIL's `Image.resize(..., BICUBIC)`: antialiased (its
                           kernel widens by the scale, as MATLAB's imresize does), 8-bit output; the clean image is
                           first cropped to a multiple of the scale
    derain                 synthetic rain streaks added to the image: sparse drops smeared along one direction per
                           image (a motion-blur line kernel of random length and angle), softened, scaled to a random
                           brightness, added to every channel, clamped and rounded (the additive model of Rain100L)

Images are uint8 tensors (3, H, W). Every function draws its randomness from the `torch.Generator` it is given,
so a degradation is reproducible under a seed (`generator_for(seed, index, name)` at evaluation).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

NOISE_SIGMAS = {"denoise30": 30.0, "denoise50": 50.0}
SR_SCALES = {"sr2": 2, "sr3": 3, "sr4": 4}
DEGRADATIONS = (*SR_SCALES, *NOISE_SIGMAS, "derain")


def scale_of(name: str) -> int:
    check_degradation(name)
    return SR_SCALES.get(name, 1)


def check_degradation(name: str) -> None:
    if name not in DEGRADATIONS:
        raise ValueError(f"unknown degradation {name!r}; expected one of {', '.join(DEGRADATIONS)}")


def generator_for(seed: int, index: int, name: str) -> torch.Generator:
    """A generator fixed by (seed, image index, degradation): the same noise for the same test image every time."""
    digest = hashlib.sha256(f"{seed}/{index}/{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2 ** 63 - 1))


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(0, 255).round().to(torch.uint8)


def add_gaussian_noise(image: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """image (3, H, W) uint8 -> the same plus N(0, σ²) noise, clamped and rounded to uint8."""
    noise = torch.randn(image.shape, generator=generator) * sigma
    return to_uint8(image.float() + noise)


def modcrop(image: torch.Tensor, scale: int) -> torch.Tensor:
    """(3, H, W) cropped at the bottom and right to multiples of the scale."""
    H, W = image.shape[-2:]
    return image[..., : H - H % scale, : W - W % scale]


def bicubic_downscale(image: torch.Tensor, scale: int) -> torch.Tensor:
    """(3, H, W) uint8 with H, W multiples of scale -> (3, H / scale, W / scale) uint8, by PIL's bicubic."""
    H, W = image.shape[-2:]
    if H % scale or W % scale:
        raise ValueError(f"crop the image to a multiple of the scale first (modcrop): {H}×{W} at ×{scale}")
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    small = pil.resize((W // scale, H // scale), Image.BICUBIC)
    return torch.from_numpy(np.asarray(small).copy()).permute(2, 0, 1)


def bicubic_upscale(image: torch.Tensor, scale: int) -> torch.Tensor:
    """(3, h, w) uint8 -> (3, h·scale, w·scale) uint8 by PIL's bicubic: the SR baseline every paper reports."""
    h, w = image.shape[-2:]
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    return torch.from_numpy(np.asarray(pil.resize((w * scale, h * scale), Image.BICUBIC)).copy()).permute(2, 0, 1)


def baseline(lq: torch.Tensor, name: str) -> torch.Tensor:
    """What doing nothing gives, at the target's size: the bicubic upscaling of an SR input, the noisy or rainy
    input itself otherwise. lq (3, h, w) uint8."""
    scale = scale_of(name)
    return bicubic_upscale(lq, scale) if scale > 1 else lq


def line_kernel(length: int, angle_deg: float) -> torch.Tensor:
    """(k, k) a normalised anti-aliased line of `length` pixels at `angle_deg` from the vertical."""
    k = length if length % 2 else length + 1
    kernel = torch.zeros(k, k)
    theta = math.radians(angle_deg)
    centre = (k - 1) / 2
    for t in torch.linspace(-(length - 1) / 2, (length - 1) / 2, 4 * length):
        y, x = centre + float(t) * math.cos(theta), centre + float(t) * math.sin(theta)
        y0, x0 = math.floor(y), math.floor(x)
        for yy, xx in ((y0, x0), (y0 + 1, x0), (y0, x0 + 1), (y0 + 1, x0 + 1)):
            if 0 <= yy < k and 0 <= xx < k:
                kernel[yy, xx] += (1 - abs(y - yy)) * (1 - abs(x - xx))
    return kernel / kernel.sum()


def rain_layer(height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """(H, W) float in [0, 255]: streaks of one random direction (within 25° of the vertical), length 12–36
    pixels, density 0.3–1.5 % of pixels, peak brightness 120–220."""
    def uniform(low: float, high: float) -> float:
        return low + (high - low) * torch.rand((), generator=generator).item()

    density, length = uniform(0.003, 0.015), round(uniform(12, 36))
    angle, brightness = uniform(-25, 25), uniform(120, 220)
    drops = (torch.rand(1, 1, height, width, generator=generator) < density).float()
    drops = drops * (0.5 + 0.5 * torch.rand(1, 1, height, width, generator=generator))  # drops of varying strength
    kernel = line_kernel(length, angle)
    streaks = F.conv2d(drops, kernel[None, None], padding=kernel.shape[-1] // 2)[0, 0]
    streaks = streaks / streaks.max().clamp_min(1e-6)
    return streaks.clamp(0, 1) ** 0.8 * brightness


def add_rain(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """image (3, H, W) uint8 -> the same with rain streaks added, clamped and rounded to uint8."""
    rain = rain_layer(*image.shape[-2:], generator)
    return to_uint8(image.float() + rain[None])


def degrade(clean: torch.Tensor, name: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """clean (3, H, W) uint8 -> (degraded input, target), both uint8. For super-resolution the target is the clean
    image cropped to a multiple of the scale and the input is (H / s, W / s); otherwise both are (H, W)."""
    check_degradation(name)
    if name in SR_SCALES:
        target = modcrop(clean, SR_SCALES[name])
        return bicubic_downscale(target, SR_SCALES[name]), target
    if name in NOISE_SIGMAS:
        return add_gaussian_noise(clean, NOISE_SIGMAS[name], generator), clean
    return add_rain(clean, generator), clean
