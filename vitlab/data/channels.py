"""Bring an image to the number of channels a model expects: 1 (grayscale) or 3 (RGB).

Images with transparency are composited onto white first. Converting straight to RGB would expose whatever
colour the transparent pixels happen to store (often black), which differs between files that look the same.
"""

from __future__ import annotations

import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image

__all__ = ["MODES", "convert_pil", "convert_tensor"]

MODES = {1: "L", 3: "RGB"}  # channels -> Pillow mode


def _check_channels(channels: int) -> str:
    if channels not in MODES:
        raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}.")
    return MODES[channels]


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info


def convert_pil(image: Image.Image, channels: int) -> Image.Image:
    """Convert a Pillow image of any mode (L, RGB, RGBA, LA, P, CMYK, ...) to mode ``L`` or ``RGB``."""
    mode = _check_channels(channels)
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return image if image.mode == mode else image.convert(mode)


def convert_tensor(image: torch.Tensor, channels: int) -> torch.Tensor:
    """Convert ``image: (..., C, H, W)`` with C = 1 or 3 to ``(..., channels, H, W)``, keeping the dtype."""
    _check_channels(channels)
    have = image.shape[-3] if image.ndim >= 3 else None
    if have not in (1, 3):
        raise ValueError(
            f"expected an image tensor of shape (..., C, H, W) with C = 1 or 3, got shape {tuple(image.shape)}. "
            "Drop an alpha channel or move channels first (permute) before converting."
        )
    if have == channels:
        return image
    if channels == 3:
        return image.expand(*image.shape[:-3], 3, *image.shape[-2:]).clone()
    return TF.rgb_to_grayscale(image, num_output_channels=1)
