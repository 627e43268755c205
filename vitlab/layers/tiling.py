"""Inference over overlapping tiles: a model that reads fixed-size inputs applied to an image of any size.

The image is covered by tile × tile windows every `stride` pixels, the last window flush with each edge; windows
go through the model in batches; each output lands where its window lies (× `scale` for super-resolution) and is
divided by the number of windows covering each output pixel, so overlaps are averaged. A side shorter than one
tile is padded first and the padding cut off at the end. SETR's sliding-window test (tasks/segmentation) and IPT's
`forward_chop` (models/ipt.py) are both this.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def window_starts(length: int, tile: int, stride: int) -> list[int]:
    """Window offsets along one side: every `stride`, the last one ending at the edge."""
    if length <= tile:
        return [0]
    starts = list(range(0, length - tile, stride))
    return [*starts, length - tile]


def pad_to_tile(images: torch.Tensor, tile: int, mode: str = "constant") -> torch.Tensor:
    """images (B, C, H, W) padded on the bottom and right to at least tile × tile. `mode` as F.pad's; "reflect"
    falls back to "replicate" where a side is too short to mirror."""
    H, W = images.shape[-2:]
    pad = (0, max(0, tile - W), 0, max(0, tile - H))
    if not any(pad):
        return images
    if mode == "reflect" and (pad[1] >= W or pad[3] >= H):
        mode = "replicate"
    return F.pad(images, pad, mode=mode)


def tiled_apply(fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, tile: int, stride: int,
                batch_size: int = 8, scale: int = 1, pad_mode: str = "constant") -> torch.Tensor:
    """fn over overlapping tiles of images (B, C, H, W) -> (B, K, H·scale, W·scale), overlaps averaged.

    fn: (n, C, tile, tile) -> (n, K, tile·scale, tile·scale), called with at most batch_size·B tiles at a time
    (batch_size window positions, each for the B images). The sums are accumulated in float32 on the outputs'
    device and returned in the outputs' dtype.
    """
    if stride < 1 or stride > tile:
        raise ValueError(f"the stride between tiles must be in 1..tile ({tile}), got {stride}")
    B, _, H, W = images.shape
    padded = pad_to_tile(images, tile, pad_mode)
    ph, pw = padded.shape[-2:]
    boxes = [(y, x) for y in window_starts(ph, tile, stride) for x in window_starts(pw, tile, stride)]
    out_tile = tile * scale
    total = count = out_dtype = None
    for start in range(0, len(boxes), batch_size):
        chunk = boxes[start:start + batch_size]
        windows = torch.cat([padded[:, :, y:y + tile, x:x + tile] for y, x in chunk])  # (len(chunk)·B, C, tile, tile)
        outputs = fn(windows)
        outputs = outputs.reshape(len(chunk), B, -1, out_tile, out_tile)
        if total is None:
            out_dtype = outputs.dtype
            total = outputs.new_zeros(B, outputs.shape[2], ph * scale, pw * scale, dtype=torch.float32)
            count = outputs.new_zeros(1, 1, ph * scale, pw * scale, dtype=torch.float32)
        for (y, x), window in zip(chunk, outputs):
            y, x = y * scale, x * scale
            total[:, :, y:y + out_tile, x:x + out_tile] += window
            count[:, :, y:y + out_tile, x:x + out_tile] += 1
    return (total / count)[:, :, :H * scale, :W * scale].to(out_dtype)
