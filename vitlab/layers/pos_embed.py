"""Position embeddings: learnable, fixed sin-cos (1-D and 2-D), and resampling to a new patch grid.

Self-attention is blind to order, so each token gets a vector that says where it came from, added to it
(ViT paper eq. 1). Shapes: N tokens, D width, h × w patch grid, P prefix tokens (class/distillation tokens).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sincos_1d(num_positions: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The fixed encoding of Vaswani et al. §3.5: PE[pos, 2i] = sin(pos / T^(2i/D)), PE[pos, 2i+1] = cos(same).

    Returns (num_positions, dim). dim must be even.
    """
    if dim % 2:
        raise ValueError(f"sin-cos position embeddings need an even width, got dim={dim}")
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (N, 1)
    # 1 / T^(2i/D) for i = 0 .. D/2-1: geometric wavelengths from 2π to 2π·T
    inv_freq = torch.exp(-math.log(temperature) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (D/2,)
    angles = positions * inv_freq  # (N, D/2)
    pe = torch.empty(num_positions, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def sincos_2d(grid_size: tuple[int, int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """2-D fixed encoding: half the channels encode the patch row, half the column, each half Vaswani's
    interleaved sin/cos (MAE's code orders them otherwise: `sincos_2d_mae`).

    Returns (h·w, dim) in row-major grid order. dim must be divisible by 4.
    """
    h, w = grid_size
    if dim % 4:
        raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4, got dim={dim}")
    rows = sincos_1d(h, dim // 2, temperature)  # (h, D/2)
    cols = sincos_1d(w, dim // 2, temperature)  # (w, D/2)
    grid = torch.cat(
        [rows[:, None, :].expand(h, w, dim // 2), cols[None, :, :].expand(h, w, dim // 2)], dim=-1
    )  # (h, w, D)
    return grid.reshape(h * w, dim)


def sine_pos_embed_2d(valid: torch.Tensor, dim: int, temperature: float = 10000.0, normalize: bool = True,
                      scale: float = 2 * math.pi, eps: float = 1e-6, offset: float = 0.0) -> torch.Tensor:
    """DETR's 2-D sine encoding of a feature map's pixels (Carion et al. 2020, §3.2 and appendix A.4).

    valid: (B, H, W) bool, True at real pixels and False at padding. Returns (B, H, W, dim): the first dim/2 channels
    encode the row, the last dim/2 the column, each as sin, cos pairs of Vaswani et al.'s wavelengths
    (channel 2i: sin(p / T^(2i/(dim/2))), channel 2i + 1: cos of the same). A pixel's position p counts the real
    pixels up to it (1-based), so padding does not shift where an image's own pixels are; with `normalize` it is
    divided by the image's own height or width and scaled to (0, scale], the same encoding at any image size.
    `offset` is added to the positions before that division: Deformable DETR's code uses −0.5, pixel centres.
    """
    if dim % 4:
        raise ValueError(f"the 2-D sine encoding needs a width divisible by 4, got dim={dim}")
    counts = valid.float()
    rows, cols = counts.cumsum(1), counts.cumsum(2)  # (B, H, W): 1-based positions among the real pixels
    if normalize:
        # the last row holds each column's number of real rows
        rows = (rows + offset) / (rows[:, -1:, :] + eps) * scale
        cols = (cols + offset) / (cols[:, :, -1:] + eps) * scale
    half = dim // 2
    pair = torch.arange(half, device=valid.device) // 2  # i for channels 2i and 2i + 1
    inv_freq = temperature ** (-2.0 * pair.float() / half)  # (half,)
    angles_y = rows[..., None] * inv_freq  # (B, H, W, half)
    angles_x = cols[..., None] * inv_freq
    even = torch.arange(half, device=valid.device) % 2 == 0
    pos_y = torch.where(even, angles_y.sin(), angles_y.cos())
    pos_x = torch.where(even, angles_x.sin(), angles_x.cos())
    return torch.cat([pos_y, pos_x], dim=-1)


def sine_box_embed(boxes: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The sine encoding of boxes (…, 4) in [0, 1] -> (…, 2·dim): each coordinate times 2π at dim/2 frequencies, as
    sin, cos pairs, the four coordinates one after another (Deformable DETR's two-stage queries; DN-DETR's and
    DAB-DETR's box queries)."""
    features = dim // 2
    inv_freq = temperature ** (-2 * (torch.arange(features, device=boxes.device) // 2) / features)
    angles = boxes[..., None] * (2 * math.pi) * inv_freq  # (…, 4, features)
    return torch.stack([angles[..., 0::2].sin(), angles[..., 1::2].cos()], -1).flatten(-3)


def resample_pos_embed(
    pos_embed: torch.Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """Resize the patch part of a position embedding to a new grid; prefix tokens are kept as they are.

    pos_embed: (1, P + h·w, D) -> (1, P + h'·w', D). `old_grid` defaults to a square grid. When the grid does
    not change the input is returned unchanged. This is how a model trained at 224×224 runs at 384×384
    (ViT paper §3.2, "Fine-tuning and higher resolution").
    """
    _, total, D = pos_embed.shape
    num_patches = total - num_prefix_tokens
    if old_grid is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            raise ValueError(
                f"cannot infer the grid of a position embedding with {num_patches} patch positions "
                f"(+{num_prefix_tokens} prefix tokens): it is not square; pass old_grid=(h, w)"
            )
        old_grid = (side, side)
    if old_grid[0] * old_grid[1] != num_patches:
        raise ValueError(
            f"old_grid {old_grid} holds {old_grid[0] * old_grid[1]} positions, but the embedding has {num_patches} "
            f"patch positions (+{num_prefix_tokens} prefix tokens)"
        )
    new_grid = tuple(new_grid)
    if tuple(old_grid) == new_grid:
        return pos_embed
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    # (1, h·w, D) -> (1, D, h, w): interpolate as an image whose channels are the embedding dimensions
    patches = patches.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2).float()
    patches = F.interpolate(patches, size=new_grid, mode=mode, antialias=antialias, align_corners=False)
    patches = patches.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D).to(pos_embed.dtype)
    return torch.cat([prefix, patches], dim=1)


def sincos_2d_mae(grid_size: tuple[int, int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The 2-D fixed encoding as MAE's (and MoCo v3's) code lays it out: the first half of the channels encodes
    the patch column, the second the row, each half all its sines, then all its cosines, at frequencies
    1 / T^(k / (D/4)), k = 0 … D/4 − 1. The same information as `sincos_2d`, in another order; MAE's released
    decoders were trained on this one. Returns (h·w, dim) in row-major grid order. dim must be divisible by 4."""
    h, w = grid_size
    if dim % 4:
        raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4, got dim={dim}")
    quarter = dim // 4
    inv_freq = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (D/4,)

    def half(positions: torch.Tensor) -> torch.Tensor:  # (h·w,) -> (h·w, D/2)
        angles = positions[:, None] * inv_freq
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)

    rows, cols = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                                indexing="ij")
    return torch.cat([half(cols.reshape(-1)), half(rows.reshape(-1))], dim=1).float()


def sincos_pos_embed(grid_size: tuple[int, int], dim: int, num_prefix_tokens: int = 1,
                     layout: str = "interleaved") -> torch.Tensor:
    """Fixed embedding for a ViT: zeros for the prefix tokens, 2-D sin-cos for the patches (`sincos_2d`, or
    `sincos_2d_mae` with layout="blocks": the column's then the row's, sines then cosines). (1, P + h·w, D)."""
    prefix = torch.zeros(num_prefix_tokens, dim)
    table = sincos_2d_mae(grid_size, dim) if layout == "blocks" else sincos_2d(grid_size, dim)
    return torch.cat([prefix, table])[None]


def learned_pos_embed(grid_size: tuple[int, int], dim: int, num_prefix_tokens: int = 1) -> nn.Parameter:
    """Learnable embedding, truncated normal with std 0.02 (the ViT/timm initialisation). (1, P + h·w, D)."""
    table = torch.zeros(1, num_prefix_tokens + grid_size[0] * grid_size[1], dim)
    return nn.Parameter(nn.init.trunc_normal_(table, std=0.02))
