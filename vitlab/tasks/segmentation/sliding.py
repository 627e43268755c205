"""Sliding-window inference (the paper's test mode): the image covered by crop × crop windows every `stride`
pixels, the last window flush with each edge, each window's logits added where it lies and divided by how many
windows cover each pixel. An image no larger than one window is one forward pass at its own size."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def window_starts(length: int, crop: int, stride: int) -> list[int]:
    """Window offsets along one side: every `stride`, the last one ending at the edge."""
    if length <= crop:
        return [0]
    starts = list(range(0, length - crop, stride))
    return [*starts, length - crop]


@torch.no_grad()
def sliding_window_logits(model: nn.Module, images: torch.Tensor, crop: int, stride: int,
                          batch_size: int = 8) -> torch.Tensor:
    """images (B, C, H, W) -> logits (B, K, H, W), averaged over the overlapping windows."""
    B, _, H, W = images.shape
    if max(H, W) <= crop:
        return model(images).logits
    padded = F.pad(images, (0, max(0, crop - W), 0, max(0, crop - H)))  # a side shorter than a window: pad it
    ph, pw = padded.shape[-2:]
    boxes = [(y, x) for y in window_starts(ph, crop, stride) for x in window_starts(pw, crop, stride)]
    total = count = None
    for start in range(0, len(boxes), batch_size):
        chunk = boxes[start:start + batch_size]
        windows = torch.cat([padded[:, :, y:y + crop, x:x + crop] for y, x in chunk])  # (len(chunk)·B, C, crop, crop)
        logits = model(windows).logits.view(len(chunk), B, -1, crop, crop)
        if total is None:
            total = logits.new_zeros(B, logits.shape[2], ph, pw)
            count = logits.new_zeros(1, 1, ph, pw)
        for (y, x), window in zip(chunk, logits):
            total[:, :, y:y + crop, x:x + crop] += window
            count[:, :, y:y + crop, x:x + crop] += 1
    return (total / count)[:, :, :H, :W]
