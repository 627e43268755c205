"""DeiT's data-efficient augmentation recipe (Touvron et al. 2021, Table 8), as batch operations on tensors.

    RandAugment (Cubuk et al. 2020)      N random image operations of magnitude M, per image
    random erasing (Zhong et al. 2020)   a random rectangle of each image replaced by noise, with probability p
    Mixup (Zhang et al. 2018)            x = λ·x_i + (1-λ)·x_j, y = λ·y_i + (1-λ)·y_j,  λ ~ Beta(α, α)
    CutMix (Yun et al. 2019)             a box of x_j pasted into x_i, y mixed by the box's area

The image operations are torchvision's (transforms v2). They draw from torch's global generator, whose state
every checkpoint saves, so a resumed run still sees the same augmentations.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import v2

from .options import OptionError

# RandAugment's 14 operations in torchvision's order, with the strength at each of 31 magnitude bins (None: the
# operation has no strength) and whether a coin flip negates it. The order and the bins are what torchvision's
# v2.RandAugment draws from, so that both make the same choices from the same random stream.
NUM_MAGNITUDE_BINS = 31
RAND_AUGMENT_OPS: tuple[tuple[str, Callable[[int, int], torch.Tensor | None], bool], ...] = (
    ("Identity", lambda height, width: None, False),
    ("ShearX", lambda height, width: torch.linspace(0.0, 0.3, NUM_MAGNITUDE_BINS), True),
    ("ShearY", lambda height, width: torch.linspace(0.0, 0.3, NUM_MAGNITUDE_BINS), True),
    ("TranslateX", lambda height, width: torch.linspace(0.0, 150.0 / 331.0 * width, NUM_MAGNITUDE_BINS), True),
    ("TranslateY", lambda height, width: torch.linspace(0.0, 150.0 / 331.0 * height, NUM_MAGNITUDE_BINS), True),
    ("Rotate", lambda height, width: torch.linspace(0.0, 30.0, NUM_MAGNITUDE_BINS), True),
    ("Brightness", lambda height, width: torch.linspace(0.0, 0.9, NUM_MAGNITUDE_BINS), True),
    ("Color", lambda height, width: torch.linspace(0.0, 0.9, NUM_MAGNITUDE_BINS), True),
    ("Contrast", lambda height, width: torch.linspace(0.0, 0.9, NUM_MAGNITUDE_BINS), True),
    ("Sharpness", lambda height, width: torch.linspace(0.0, 0.9, NUM_MAGNITUDE_BINS), True),
    ("Posterize", lambda height, width: (8 - torch.arange(NUM_MAGNITUDE_BINS) / ((NUM_MAGNITUDE_BINS - 1) / 4))
     .round().int(), False),
    ("Solarize", lambda height, width: torch.linspace(1.0, 0.0, NUM_MAGNITUDE_BINS), False),
    ("AutoContrast", lambda height, width: None, False),
    ("Equalize", lambda height, width: None, False),
)


def apply_rand_augment_op(images: torch.Tensor, name: str, strength: float) -> torch.Tensor:
    """One RandAugment operation at one strength on a batch (N, C, H, W) float in [0, 1]; nearest-neighbour
    sampling and a black fill for the geometric ones, as torchvision's RandAugment by default."""
    geometric = dict(interpolation=v2.InterpolationMode.NEAREST, fill=None)
    if name == "Identity":
        return images
    if name in ("ShearX", "ShearY"):
        # the paper's shear matrix (1, s, 0; 0, 1, 0) is a shear angle of atan(s), about the top-left corner
        angle = math.degrees(math.atan(strength))
        shear = [angle, 0.0] if name == "ShearX" else [0.0, angle]
        return TF.affine(images, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, center=[0, 0], **geometric)
    if name in ("TranslateX", "TranslateY"):
        shift = [int(strength), 0] if name == "TranslateX" else [0, int(strength)]
        return TF.affine(images, angle=0.0, translate=shift, scale=1.0, shear=[0.0, 0.0], **geometric)
    if name == "Rotate":
        return TF.rotate(images, angle=strength, **geometric)
    if name == "Brightness":
        return TF.adjust_brightness(images, brightness_factor=1.0 + strength)
    if name == "Color":
        return TF.adjust_saturation(images, saturation_factor=1.0 + strength)
    if name == "Contrast":
        return TF.adjust_contrast(images, contrast_factor=1.0 + strength)
    if name == "Sharpness":
        return TF.adjust_sharpness(images, sharpness_factor=1.0 + strength)
    if name == "Posterize":
        return TF.posterize(images, bits=int(strength))
    if name == "Solarize":
        return TF.solarize(images, threshold=strength)
    if name == "AutoContrast":
        return TF.autocontrast(images)
    if name == "Equalize":
        return TF.equalize(images)
    raise ValueError(f"unknown RandAugment operation {name!r}; choose one of "
                     f"{', '.join(op for op, _, _ in RAND_AUGMENT_OPS)}")


def rand_augment(num_ops: int, magnitude: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """images (B, C, H, W) float in [0, 1] -> same shape; each image gets its own `num_ops` operations.

    The choices are drawn image by image exactly as torchvision's `v2.RandAugment` draws them (operation, then
    the sign of its strength), so a batch comes out as if each image had gone through it alone, but each
    operation then runs once on all the images that drew it: ~14 calls per round instead of one per image.
    """
    if not 0 <= magnitude <= 30 or num_ops < 1:
        raise ValueError(f"RandAugment needs randaugment_ops >= 1 and a magnitude (randaugment) in 0..30 (DeiT uses "
                         f"2 and 9), got {num_ops} and {magnitude}")

    def apply(images: torch.Tensor) -> torch.Tensor:
        B, C, H, W = images.shape
        strengths = [(name, None if (values := bins(H, W)) is None else float(values[magnitude]), signed)
                     for name, bins, signed in RAND_AUGMENT_OPS]
        # choices[r][i] = (operation, strength) of round r for image i, drawn image by image like torchvision
        choices: list[list[tuple[str, float]]] = [[] for _ in range(num_ops)]
        for _ in range(B):
            for r in range(num_ops):
                name, strength, signed = strengths[int(torch.randint(len(strengths), ()))]
                if strength is None:
                    strength = 0.0
                elif signed and torch.rand(()) <= 0.5:
                    strength = -strength
                choices[r].append((name, strength))
        out = images.clone()
        for round_choices in choices:
            groups: dict[tuple[str, float], list[int]] = {}
            for i, choice in enumerate(round_choices):
                groups.setdefault(choice, []).append(i)
            for (name, strength), rows in groups.items():
                index = torch.tensor(rows)
                out[index] = apply_rand_augment_op(out[index], name, strength)
        return out

    return apply


def random_erasing(probability: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """images (B, C, H, W) -> same shape; each image independently loses a random box to Gaussian noise."""
    if not 0 < probability <= 1:
        raise OptionError("random_erasing", f"is a probability in (0, 1], got {probability}")
    op = v2.RandomErasing(p=probability, value="random")  # DeiT/timm erase with per-pixel noise
    return lambda images: torch.stack([op(image) for image in images])


def mixup_cutmix(mixup_alpha: float, cutmix_alpha: float, num_classes: int):
    """A function (images (B, C, H, W), labels (B,)) -> (mixed images, soft targets (B, num_classes)), or None
    when both are off. With both on, each batch uses one of the two, chosen at random (as DeiT does)."""
    if mixup_alpha < 0 or cutmix_alpha < 0:
        raise ValueError(f"mixup and cutmix are Beta(α, α) parameters, 0 (off) or more; got {mixup_alpha} "
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
