"""Sliding-window inference (the paper's test mode): the image covered by crop × crop windows every `stride`
pixels, the last window flush with each edge, each window's logits added where it lies and divided by how many
windows cover each pixel (layers/tiling.py's "mean", SETR's rule; "window" and "centre" weigh each window's edges
less). An image no larger than one window is one forward pass, zero-padded to the window."""

from __future__ import annotations

import torch
from torch import nn

from ...layers.tiling import tiled_apply, window_starts

__all__ = ["sliding_window_logits", "window_starts"]


@torch.no_grad()
def sliding_window_logits(model: nn.Module, images: torch.Tensor, crop: int, stride: int,
                          batch_size: int = 8, blend: str = "mean") -> torch.Tensor:
    """images (B, C, H, W) -> logits (B, K, H, W), the overlapping windows' blended as `blend` says (a side
    shorter than a window is padded with zeros, the normalised mean)."""
    height, width = images.shape[-2:]
    if max(height, width) <= crop:
        if (height, width) == (crop, crop):
            return model(images).logits
        # smaller than one window: zero-padded to it (the normalised mean), as the windows of a larger image are
        padded = torch.nn.functional.pad(images, (0, crop - width, 0, crop - height))
        return model(padded).logits[..., :height, :width]
    return tiled_apply(lambda windows: model(windows).logits, images, crop, stride, batch_size, blend=blend)
