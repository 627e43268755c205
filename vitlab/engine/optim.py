"""AdamW with weight decay only where it belongs, and the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

# Tokens and tables that are embeddings, not weights: decaying them towards zero only hurts (as in timm, DeiT).
NO_DECAY_NAMES = ("pos_embed", "cls_token", "dist_token")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices and convolution kernels decay; biases, norm scales, position embeddings and
    class tokens (every parameter with fewer than 2 dimensions, or named in NO_DECAY_NAMES) do not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.split(".")[-1] in NO_DECAY_NAMES:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.999)) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas)


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier: linear from ~0 to 1 over the warm-up, then half a cosine down to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Stepped once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, min_ratio)
    )
