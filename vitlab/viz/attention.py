"""Where a ViT looks: attention probabilities of every layer and head, and attention rollout.

Collecting runs each block's explicit attention path (which returns the probabilities) for that one pass; the
model's own forward keeps the fused kernel. Shapes: L layers, B batch, heads, N tokens (prefix + patches),
P prefix tokens, h × w patch grid.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.inference_mode()
def collect_attention(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """images (B, C, H, W) -> attention probabilities (L, B, heads, N, N), softmax rows over keys."""
    x = model.embed(images)
    maps = []
    for block in model.blocks:
        x, probs = block.forward_with_attn(x)
        maps.append(probs)
    return torch.stack(maps)


def fuse_heads(attention: torch.Tensor, head_fusion: str = "mean") -> torch.Tensor:
    """(..., heads, N, N) -> (..., N, N) by the mean, max or min over heads."""
    if head_fusion == "mean":
        return attention.mean(dim=-3)
    if head_fusion == "max":
        return attention.amax(dim=-3)
    if head_fusion == "min":
        return attention.amin(dim=-3)
    raise ValueError(f"head_fusion must be 'mean', 'max' or 'min', got {head_fusion!r}")


def attention_rollout(attention: torch.Tensor, head_fusion: str = "mean", discard_ratio: float = 0.0) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how much each token at the output draws on each input token.

    attention: (L, B, heads, N, N). Per layer: fuse the heads; optionally zero the lowest `discard_ratio` of
    each row (never the diagonal); add the identity for the residual connection; renormalise the rows; then
    multiply the layers, last on the left: R = Â_L ··· Â_1. Returns (B, N, N), rows summing to 1.
    """
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), got {discard_ratio}")
    L, B, _, N, _ = attention.shape
    eye = torch.eye(N, dtype=attention.dtype, device=attention.device)
    rollout = eye.expand(B, N, N)
    for layer in range(L):
        a = fuse_heads(attention[layer].float(), head_fusion)  # (B, N, N)
        if discard_ratio > 0:
            a = _discard_lowest(a, discard_ratio)
        a = a + eye  # the residual path carries each token's own input
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a @ rollout
    return rollout


def _discard_lowest(a: torch.Tensor, ratio: float) -> torch.Tensor:
    """Zero the lowest `ratio` of the off-diagonal entries of each row. a: (B, N, N)."""
    N = a.shape[-1]
    k = int(ratio * (N - 1))
    if k == 0:
        return a
    diagonal = torch.eye(N, dtype=torch.bool, device=a.device)
    ranked = a.masked_fill(diagonal, float("inf"))
    lowest = ranked.topk(k, dim=-1, largest=False).indices  # (B, N, k)
    return a.scatter(-1, lowest, 0.0)


def token_map(rows: torch.Tensor, num_prefix_tokens: int, grid: tuple[int, int]) -> torch.Tensor:
    """The attention of the class token (or, without one, the mean over all tokens) to the patches.

    rows: (..., N, N) -> (..., h, w), normalised to a maximum of 1 per map.
    """
    if num_prefix_tokens > 0:
        weights = rows[..., 0, num_prefix_tokens:]
    else:
        weights = rows.mean(dim=-2)
    maps = weights.reshape(*weights.shape[:-1], *grid)
    return maps / maps.flatten(-2).amax(-1)[..., None, None].clamp(min=1e-12)


def rollout_map(model: nn.Module, images: torch.Tensor, head_fusion: str = "mean", discard_ratio: float = 0.0,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rollout map (B, h, w) and the attention tensor (L, B, heads, N, N) for a batch of images."""
    attention = collect_attention(model, images)
    grid = model.patch_embed.grid_for(images.shape[-2], images.shape[-1])
    rollout = attention_rollout(attention, head_fusion, discard_ratio)
    return token_map(rollout, model.num_prefix_tokens, grid), attention


def layer_head_maps(model: nn.Module, attention: torch.Tensor, grid: tuple[int, int], layer: int = -1) -> torch.Tensor:
    """Raw class-token attention of every head of one layer: (B, heads, h, w)."""
    return token_map(attention[layer], model.num_prefix_tokens, grid)


def image_attention(model: nn.Module, image, preprocessing, head_fusion: str = "mean", discard_ratio: float = 0.0,
                    layer: int = -1):
    """What a classifier looks at in one PIL image, seen through its preprocessing (a data.Preprocessing: a run's
    evaluation transform, a release's). Returns (shown, rollout (h, w), heads (heads, h, w), probs (classes,)):
    `shown` is the part of the image the preprocessing keeps, at the input's own resolution."""
    if not -len(model.blocks) <= layer < len(model.blocks):
        raise ValueError(f"layer must be in {-len(model.blocks)}..{len(model.blocks) - 1}, got {layer}")
    width, height = image.size
    resized_h, resized_w = preprocessing.resized_shape(height, width)
    crop_h, crop_w = preprocessing.crop or (resized_h, resized_w)
    keep_w, keep_h = round(width * min(crop_w, resized_w) / resized_w), round(height * min(crop_h, resized_h) /
                                                                               resized_h)
    left, top = (width - keep_w) // 2, (height - keep_h) // 2
    shown = image.crop((left, top, left + keep_w, top + keep_h))
    x = preprocessing(image)[None]  # (1, C, H, W)
    rollout, attention = rollout_map(model, x, head_fusion, discard_ratio)
    heads = layer_head_maps(model, attention, model.patch_embed.grid_for(*x.shape[-2:]), layer)
    with torch.inference_mode():
        probs = model(x).softmax(-1)[0]
    return shown, rollout[0], heads[0], probs
