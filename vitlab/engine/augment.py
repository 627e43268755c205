"""DeiT's data-efficient augmentation recipe (Touvron et al. 2021, Table 8), as batch operations on tensors.

    RandAugment (Cubuk et al. 2020)      N random image operations of magnitude M, per image
    random erasing (Zhong et al. 2020)   a random rectangle of each image replaced by noise, with probability p
    Mixup (Zhang et al. 2018)            x = λ·x_i + (1-λ)·x_j, y = λ·y_i + (1-λ)·y_j,  λ ~ Beta(α, α)
    CutMix (Yun et al. 2019)             a box of x_j pasted into x_i, y mixed by the box's area

The image operations are torchvision's (transforms v2). They draw from torch's global generator, whose state
every checkpoint saves, so a resumed run still sees the same augmentations.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchvision.transforms import v2


def rand_augment(num_ops: int, magnitude: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """images (B, C, H, W) float in [0, 1] -> same shape; each image gets its own `num_ops` operations."""
    if not 0 <= magnitude <= 30 or num_ops < 1:
        raise ValueError(f"RandAugment needs --randaugment-ops >= 1 and a magnitude in 0..30 (DeiT uses 2 and 9), "
                         f"got {num_ops} and {magnitude}")
    op = v2.RandAugment(num_ops=num_ops, magnitude=magnitude)
    return lambda images: torch.stack([op(image) for image in images])


def random_erasing(probability: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """images (B, C, H, W) -> same shape; each image independently loses a random box to Gaussian noise."""
    if not 0 < probability <= 1:
        raise ValueError(f"--random-erasing is a probability in (0, 1], got {probability}")
    op = v2.RandomErasing(p=probability, value="random")  # DeiT/timm erase with per-pixel noise
    return lambda images: torch.stack([op(image) for image in images])


def mixup_cutmix(mixup_alpha: float, cutmix_alpha: float, num_classes: int):
    """A function (images (B, C, H, W), labels (B,)) -> (mixed images, soft targets (B, num_classes)), or None
    when both are off. With both on, each batch uses one of the two, chosen at random (as DeiT does)."""
    if mixup_alpha < 0 or cutmix_alpha < 0:
        raise ValueError(f"--mixup and --cutmix are Beta(α, α) parameters, 0 (off) or more; got {mixup_alpha} "
                         f"and {cutmix_alpha}")
    ops = []
    if mixup_alpha > 0:
        ops.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        ops.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    if not ops:
        return None
    return ops[0] if len(ops) == 1 else v2.RandomChoice(ops)


def compose(*ops: Callable[[torch.Tensor], torch.Tensor] | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The given batch operations applied in order (None entries skipped); None if there are none."""
    ops = tuple(op for op in ops if op is not None)
    if not ops:
        return None

    def apply(images: torch.Tensor) -> torch.Tensor:
        for op in ops:
            images = op(images)
        return images

    return apply
