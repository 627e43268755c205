"""AdamW with weight decay only where it belongs, and the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import fnmatch
import math

import torch
from torch import nn

from ..models.family import Model


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float | None = None,
                 lr_scales: dict[str, float] | None = None) -> list[dict]:
    """Matrices and convolution kernels decay; parameters with fewer than 2 dimensions (biases, norm scales) do not,
    nor those the model names in its `no_weight_decay()` hook (position embeddings, class tokens: embeddings, not
    weights; decaying them towards zero only hurts, as in timm and DeiT).

    layer_decay (fine-tuning; BEiT §3.4, used by DeiT III, MAE) needs the model's layer groups: `layer_id(name)`
    in 0 … num_layer_groups − 1 (for ViT: 0 the embeddings, i + 1 block i of L, L + 1 the final norm and head).
    A parameter of layer id k gets lr · layer_decay^(num_layer_groups − 1 − k): block i of L gets
    lr · layer_decay^(L − i), the embeddings lr · layer_decay^(L + 1), the final norm and head lr.
    lr_scales multiplies the lr of the parameters whose names start with a prefix ({"backbone.": 0.1}: DETR's
    backbone at a tenth) or, for a key with a `*`, match it as a glob ({"*.sampling_offsets.*": 0.1}: Deformable
    DETR's offset predictors); the first key that matches wins. Each group carries its factor as "lr_scale"; its
    "lr" starts at lr · lr_scale, which the schedulers then multiply.
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    no_decay = set(model.no_weight_decay()) if isinstance(model, Model) else set()  # a plain module: every matrix
    top = _top_layer_id(model, layer_decay)
    lr_scales = lr_scales or {}
    groups: dict[tuple[int, float, bool], dict] = {}
    if layer_decay is None:  # always the two groups, decaying first
        for decays in (True, False):
            groups[0, 1.0, decays] = {"params": [], "weight_decay": weight_decay if decays else 0.0, "lr_scale": 1.0}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decays = param.ndim > 1 and name not in no_decay
        layer = model.layer_id(name) if layer_decay is not None else 0
        factor = next((f for key, f in lr_scales.items()
                       if (fnmatch.fnmatchcase(name, key) if "*" in key else name.startswith(key))), 1.0)
        scale = (layer_decay ** (top - layer) if layer_decay is not None else 1.0) * factor
        group = groups.setdefault((layer, factor, decays), {
            "params": [], "weight_decay": weight_decay if decays else 0.0, "lr_scale": scale})
        group["params"].append(param)
    return [groups[key] for key in sorted(groups, key=lambda key: (key[0], key[1] != 1.0, key[1], not key[2]))]


def _top_layer_id(model: nn.Module, layer_decay: float | None) -> int:
    """The largest layer id of the model's layer groups (whose learning rate layer decay leaves unscaled)."""
    if layer_decay is None:
        return 0
    if not 0 < layer_decay <= 1:
        raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
    if not isinstance(model, Model) or model.num_layer_groups == 0:
        raise ValueError(
            f"layer_decay={layer_decay} needs a model with layer groups (Model.num_layer_groups and layer_id(name), "
            f"as ViT and DeiT have); {type(model).__name__} has none: leave layer_decay at None"
        )
    return model.num_layer_groups - 1


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.999),
                    layer_decay: float | None = None, eps: float = 1e-8,
                    lr_scales: dict[str, float] | None = None, kind: str = "adamw",
                    momentum: float = 0.9) -> torch.optim.Optimizer:
    """AdamW (kind="adamw") or SGD with momentum (kind="sgd") over `param_groups`."""
    groups = param_groups(model, weight_decay, layer_decay, lr_scales)
    for group in groups:
        group["lr"] = lr * group["lr_scale"]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if kind != "adamw":
        raise ValueError(f"optimizer must be 'adamw' or 'sgd', got {kind!r}")
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps)


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier: linear from ~0 to 1 over the warm-up, then half a cosine down to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_poly(step: int, total_steps: int, warmup_steps: int, power: float = 0.9, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier: linear warm-up to 1, then (1 − t/T)^power from 1 down to `min_ratio` (the "poly"
    schedule of DeepLab and SETR; mmcv's, with min_lr = lr · min_ratio)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * (1.0 - progress) ** power


def build_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Stepped once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, min_ratio)
    )


def inverse_sqrt(step: int, dim: int, warmup_steps: int, scale: float = 1.0) -> float:
    """The learning rate of Vaswani et al. §5.3, eq. 3, times `scale`:

        lr = scale · dim^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)        (step counted from 1)

    It rises linearly for `warmup_steps` steps, peaks at scale · (dim · warmup_steps)^-0.5, then decays as
    1/√step. scale = 1 is the paper's schedule; `inverse_sqrt_scale` gives the scale for a chosen peak.
    """
    step = max(step, 1)
    return scale * dim ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def inverse_sqrt_scale(peak_lr: float, dim: int, warmup_steps: int) -> float:
    """The `scale` of `inverse_sqrt` whose peak (at step = warmup_steps) is `peak_lr`."""
    return peak_lr * (dim * warmup_steps) ** 0.5
