"""Restoration metrics as IPT (and EDSR before it) reports them, and RGB PSNR beside them.

    quantize   the output as an 8-bit image would store it: ×255, clamped to [0, 255], rounded
    Y          16 + (65.738 R + 129.057 G + 25.064 B) / 256          ITU-R BT.601 luma, the official coefficients
    PSNR       10 log10(255² / MSE) over the image less a border of `scale` pixels (none for scale 1)
    SSIM       Wang et al. 2004: 11×11 Gaussian window, σ 1.5, K1 0.01, K2 0.03, population variances, averaged
               over the pixels whose window lies inside the image (scikit-image's `structural_similarity` with
               gaussian_weights=True, use_sample_covariance=False, data_range=255)

PSNR and SSIM are computed per image and averaged over images. Inputs are (B, 3, H, W) in [0, 1] (outputs,
quantised here) and targets (B, 3, H, W) in [0, 1] holding 8-bit values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Y_COEFFICIENTS = (65.738, 129.057, 25.064)  # over 256, on the 0-255 scale


def quantize(images: torch.Tensor) -> torch.Tensor:
    """(…) in [0, 1] -> the same on the 0–255 scale, clamped and rounded to integers (as float)."""
    return images.mul(255).clamp(0, 255).round()


def rgb_to_y(images255: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) on the 0–255 scale -> (B, 1, H, W) luma in [16, 235]."""
    coefficients = images255.new_tensor(Y_COEFFICIENTS).view(1, 3, 1, 1) / 256
    return 16 + (images255 * coefficients).sum(dim=1, keepdim=True)


def shave(images: torch.Tensor, border: int) -> torch.Tensor:
    return images[..., border:-border, border:-border] if border > 0 else images


def psnr(a: torch.Tensor, b: torch.Tensor, data_range: float = 255.0) -> torch.Tensor:
    """Per image: a, b (B, C, H, W) -> (B,) in dB; identical images give inf."""
    mse = (a.double() - b.double()).pow(2).flatten(1).mean(dim=1)
    return 10 * torch.log10(data_range ** 2 / mse)


def gaussian_window(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """(size, size), summing to 1."""
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim(a: torch.Tensor, b: torch.Tensor, data_range: float = 255.0, size: int = 11, sigma: float = 1.5
         ) -> torch.Tensor:
    """Per image: a, b (B, C, H, W) -> (B,), the mean SSIM over channels and valid window positions."""
    a, b = a.double(), b.double()
    C = a.shape[1]
    window = gaussian_window(size, sigma).to(a.device).expand(C, 1, size, size)

    def local_mean(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, window, groups=C)  # no padding: only windows inside the image

    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_a, mu_b = local_mean(a), local_mean(b)
    var_a = local_mean(a * a) - mu_a ** 2
    var_b = local_mean(b * b) - mu_b ** 2
    cov = local_mean(a * b) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))
    return ssim_map.flatten(1).mean(dim=1)


def restoration_scores(output: torch.Tensor, target: torch.Tensor, scale: int = 1) -> dict[str, torch.Tensor]:
    """output (B, 3, H, W) in [0, 1] (quantised here), target (B, 3, H, W) in [0, 1] -> per image (B,):
    psnr_y and ssim_y on the Y channel less a border of `scale` (none for 1), and psnr_rgb on all three channels
    less the same border."""
    if output.shape != target.shape:
        raise ValueError(f"output {tuple(output.shape)} and target {tuple(target.shape)} must have the same shape")
    border = scale if scale > 1 else 0
    out255, ref255 = quantize(output), target.mul(255).round()
    out_y, ref_y = shave(rgb_to_y(out255), border), shave(rgb_to_y(ref255), border)
    return {"psnr_y": psnr(out_y, ref_y), "ssim_y": ssim(out_y, ref_y),
            "psnr_rgb": psnr(shave(out255, border), shave(ref255, border))}


def mean_finite(values: list[float]) -> float:
    """The mean of per-image scores; an exact restoration (inf dB) is counted at 100 dB so one does not swamp it."""
    return sum(min(v, 100.0) for v in values) / len(values) if values else math.nan
