"""Bicubic upsampling by an integer factor as PIL computes it, in torch: the baseline a super-resolution network's
global residual adds to (Kim et al. 2016, VDSR: predict the difference from the bicubic image).

Keys's cubic convolution kernel with a = −0.5 (PIL's and MATLAB's; torch's own `bicubic` uses −0.75):

    k(t) = (a + 2)|t|³ − (a + 3)|t|² + 1        |t| ≤ 1
           a|t|³ − 5a|t|² + 8a|t| − 4a          1 < |t| < 2
           0                                    otherwise

Output pixel s·m + r (phase r of s) sits at input coordinate m + (r + ½)/s − ½ (pixel centres aligned), so it
reads the five inputs m − 2 … m + 2 with weights k(centre − offset), the same for every m: one small convolution
per phase. Taps that fall outside the image are dropped and the rest renormalised, as PIL does, rather than
padding with copies of the edge. Width first, then height (PIL's order); unlike PIL nothing is rounded to 8 bits
between the passes, so the result is within a grey level of `PIL.Image.resize(..., BICUBIC)`.

Shapes: (B, C, H, W) -> (B, C, H·s, W·s).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TAPS = 2  # the kernel reaches two input pixels each side


def cubic_kernel(t: torch.Tensor, a: float = -0.5) -> torch.Tensor:
    t = t.abs()
    near = (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    far = a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return torch.where(t <= 1, near, torch.where(t < 2, far, torch.zeros_like(t)))


def phase_weights(scale: int) -> torch.Tensor:
    """(scale, 2·TAPS + 1): row r weighs the inputs m − 2 … m + 2 of output pixel scale·m + r."""
    centre = (torch.arange(scale, dtype=torch.float64) + 0.5) / scale - 0.5
    offsets = torch.arange(-TAPS, TAPS + 1, dtype=torch.float64)
    return cubic_kernel(centre[:, None] - offsets[None, :])


def _upsample_last_axis(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(..., L) -> (..., L·s) for weights (s, 5)."""
    *lead, length = x.shape
    scale = weights.shape[0]
    kernel = weights.to(x.dtype)[:, None, :]  # (s, 1, 5): one output channel per phase
    rows = x.reshape(-1, 1, length)
    summed = F.conv1d(F.pad(rows, (TAPS, TAPS)), kernel)  # (N, s, L), outside taps read zeros
    # the weight of the taps inside the image, per phase and position: 1 except near the edges
    inside = F.conv1d(F.pad(torch.ones_like(rows[:1]), (TAPS, TAPS)), kernel)  # (1, s, L)
    phases = summed / inside
    return phases.transpose(1, 2).reshape(*lead, length * scale)  # interleave: position m, then phase r


def bicubic_upsample(images: torch.Tensor, scale: int) -> torch.Tensor:
    """images (B, C, H, W) -> (B, C, H·scale, W·scale), PIL's bicubic (a = −0.5, edge taps renormalised), not
    clamped. scale 1 returns the images themselves."""
    if scale == 1:
        return images
    if scale < 1 or int(scale) != scale:
        raise ValueError(f"bicubic_upsample takes a whole factor of at least 1, got {scale}")
    weights = phase_weights(int(scale))
    wide = _upsample_last_axis(images, weights)  # (B, C, H, W·s)
    return _upsample_last_axis(wide.transpose(-1, -2), weights).transpose(-1, -2)
