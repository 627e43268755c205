"""Evaluation: loss, accuracy, per-class accuracy and the confusion matrix over a loader."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ...engine.speed import autocast


class MirrorAveraged(nn.Module):
    """Test-time flip: a classifier's logits for each image and for its left-right mirror, averaged, (B, C, H, W)
    -> (B, K). A model trained on randomly flipped images has learnt that a mirrored image is the same class; asked
    both ways, its errors on one view are partly outvoted by the other. The model is called once, on the images
    followed by their mirrors (2B, C, H, W): one batch for a runtime, and what `mirror_mean` undoes."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return mirror_mean(self.model(torch.cat([images, images.flip(-1)])))


def mirror_mean(logits: torch.Tensor) -> torch.Tensor:
    """(2B, K) logits of B images followed by their mirrors -> (B, K), each image's mean of the two."""
    own, mirrored = logits.chunk(2)
    return (own + mirrored) / 2


def with_test_time_flip(model: nn.Module, flip: bool) -> nn.Module:
    return MirrorAveraged(model) if flip else model


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    loader,
    device: str | torch.device = "cpu",
    bf16: bool = False,
    num_classes: int | None = None,
    desc: str = "evaluate",
) -> dict[str, Any]:
    """Returns loss (mean cross-entropy, no smoothing), accuracy (a fraction), per_class_accuracy (list),
    confusion (list of rows: true class; columns: predicted class), num_images and images_per_s."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    num_classes = num_classes or model.num_classes
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    loss_sum, seen, start = 0.0, 0, time.perf_counter()
    for images, labels in tqdm(loader, desc=desc, leave=False, dynamic_ncols=True, mininterval=1.0):
        images, labels = images.to(device), labels.to(device)
        with autocast(device, torch.bfloat16 if bf16 else None):
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        predicted = logits.argmax(-1)
        # confusion[true, predicted] += 1, counted in one bincount
        confusion += torch.bincount(labels.cpu() * num_classes + predicted.cpu(), minlength=num_classes**2).view(
            num_classes, num_classes
        )
        seen += labels.shape[0]
    model.train(was_training)
    per_class_total = confusion.sum(1).clamp(min=1)
    return {
        "loss": loss_sum / max(seen, 1),
        "accuracy": confusion.diag().sum().item() / max(seen, 1),
        "per_class_accuracy": (confusion.diag() / per_class_total).tolist(),
        "confusion": confusion.tolist(),
        "num_images": seen,
        "images_per_s": seen / (time.perf_counter() - start),
    }
