"""Inference over overlapping tiles: a model that reads fixed-size inputs applied to an image of any size.

The image is covered by tile × tile windows every `stride` pixels, the last window flush with each edge; windows
go through the model in batches; each output lands where its window lies (× `scale` for super-resolution). Where
windows overlap, `blend` decides:

    mean     each window counts alike: the sum divided by the number of windows covering the pixel (SETR's rule).
             A window's edge pixels, worst predicted for want of context, weigh as much as a neighbour's centre, and
             the seam shows as a grid in restored images.
    window   each window's pixels weigh min(1, d_y / o) · min(1, d_x / o), d the distance to the window's nearer
             edge along that axis and o the overlap: a linear ramp across the shared band, so a tile fades out
             where the next fades in. Edges on the image's border are not ramped (nothing else covers them).
    centre   each pixel from the one window in which it lies farthest from an edge (the image's border not
             counting): each tile's centre kept, IPT's official rule.

A side shorter than one tile is padded first and the padding cut off at the end. SETR's sliding-window test
(tasks/segmentation) and IPT's and EDSR's `forward_chop` (models/ipt.py, models/edsr.py) are all this.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

BLENDS = ("mean", "window", "centre")
# The restorers' default, by measurement (benchmarks/results/ipt_restoration.md): "mean" left pixels near a tile's
# edge up to 0.5 dB behind the rest; "window" and "centre" keep the gap under 0.3 dB and tie, with "window" as good
# or better at the edges in three of four cases.
BLEND = "window"


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


def edge_distances(start: int, tile: int, length: int, scale: int) -> torch.Tensor:
    """(tile·scale,) the distance of each output pixel of a window at `start` (input pixels) from the window's
    nearer edge along one axis, in output pixels measured to pixel centres; an edge on the image's border
    (start 0, or end at `length`) is infinitely far."""
    side = tile * scale
    index = torch.arange(side, dtype=torch.float32) + 0.5
    before = index if start > 0 else torch.full_like(index, torch.inf)
    after = side - index if start + tile < length else torch.full_like(index, torch.inf)
    return torch.minimum(before, after)


def tiled_apply(fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, tile: int, stride: int,
                batch_size: int = 8, scale: int = 1, pad_mode: str = "constant", blend: str = "mean"
                ) -> torch.Tensor:
    """fn over overlapping tiles of images (B, C, H, W) -> (B, K, H·scale, W·scale), overlaps blended by `blend`
    (one of BLENDS, the module's docstring says how).

    fn: (n, C, tile, tile) -> (n, K, tile·scale, tile·scale), called with at most batch_size·B tiles at a time
    (batch_size window positions, each for the B images). The sums are accumulated in float32 on the outputs'
    device and returned in the outputs' dtype.
    """
    if stride < 1 or stride > tile:
        raise ValueError(f"the stride between tiles must be in 1..tile ({tile}), got {stride}")
    if blend not in BLENDS:
        raise ValueError(f"blend must be one of {', '.join(BLENDS)}, got {blend!r}")
    B, _, H, W = images.shape
    padded = pad_to_tile(images, tile, pad_mode)
    ph, pw = padded.shape[-2:]
    boxes = [(y, x) for y in window_starts(ph, tile, stride) for x in window_starts(pw, tile, stride)]
    out_tile = tile * scale
    ramp = (tile - stride) * scale  # the band two neighbours share, in output pixels
    total = weight = out_dtype = None
    for start in range(0, len(boxes), batch_size):
        chunk = boxes[start:start + batch_size]
        windows = torch.cat([padded[:, :, y:y + tile, x:x + tile] for y, x in chunk])  # (len(chunk)·B, C, tile, tile)
        outputs = fn(windows)
        outputs = outputs.reshape(len(chunk), B, -1, out_tile, out_tile)
        if total is None:
            out_dtype = outputs.dtype
            total = outputs.new_zeros(B, outputs.shape[2], ph * scale, pw * scale, dtype=torch.float32)
            # mean, window: the weights summed; centre: the best distance from an edge so far
            weight = outputs.new_zeros(1, 1, ph * scale, pw * scale, dtype=torch.float32)
        for (y, x), window in zip(chunk, outputs):
            d_y = edge_distances(y, tile, ph, scale).to(total.device)[:, None]  # (tile·s, 1)
            d_x = edge_distances(x, tile, pw, scale).to(total.device)[None, :]  # (1, tile·s)
            region = (slice(None), slice(None), slice(y * scale, y * scale + out_tile),
                      slice(x * scale, x * scale + out_tile))
            if blend == "centre":
                distance = torch.minimum(d_y, d_x)
                better = distance > weight[region]
                total[region] = torch.where(better, window.float(), total[region])
                weight[region] = torch.where(better, distance, weight[region])
                continue
            if blend == "window" and ramp > 0:
                w = (d_y / ramp).clamp(max=1) * (d_x / ramp).clamp(max=1)
            else:
                w = torch.ones(out_tile, out_tile, device=total.device)
            total[region] += window * w
            weight[region] += w
    out = total if blend == "centre" else total / weight
    return out[:, :, :H * scale, :W * scale].to(out_dtype)
