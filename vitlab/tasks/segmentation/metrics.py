"""Segmentation metrics from one confusion matrix accumulated over the whole evaluation set: per-class IoU, mIoU and
pixel accuracy, as mmseg and the SETR paper report them (IoU over all pixels of the set, not averaged per image).

IoU_c = TP_c / (TP_c + FP_c + FN_c); a class that is neither in the ground truth nor predicted anywhere has no IoU
(NaN) and is left out of the mean. Pixels labelled `ignore_index` count nowhere.
"""

from __future__ import annotations

import math

import torch

from ...data.segmentation import IGNORE_INDEX


def confusion_matrix(prediction: torch.Tensor, target: torch.Tensor, num_classes: int,
                     ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """prediction, target: class indices of any (same) shape -> (K, K) int64 counts, row = true class, column =
    predicted class."""
    if prediction.shape != target.shape:
        raise ValueError(f"prediction {tuple(prediction.shape)} and target {tuple(target.shape)} must have one shape")
    keep = target != ignore_index
    target, prediction = target[keep].long(), prediction[keep].long()
    if target.numel() and (int(target.max()) >= num_classes or int(target.min()) < 0):
        raise ValueError(f"target holds classes outside 0 … {num_classes - 1} (and {ignore_index} to ignore)")
    return torch.bincount(target * num_classes + prediction, minlength=num_classes ** 2).view(num_classes, num_classes)


def scores(matrix: torch.Tensor) -> dict[str, float | list[float]]:
    """A (K, K) confusion matrix -> {"miou", "pixel_acc", "iou_per_class" (NaN where a class is absent)}."""
    matrix = matrix.double()
    true_positive = matrix.diagonal()
    union = matrix.sum(0) + matrix.sum(1) - true_positive
    iou = torch.where(union > 0, true_positive / union.clamp(min=1), torch.full_like(union, math.nan))
    present = ~iou.isnan()
    total = matrix.sum()
    return {"miou": float(iou[present].mean()) if present.any() else 0.0,
            "pixel_acc": float(true_positive.sum() / total) if total > 0 else 0.0,
            "iou_per_class": [float(v) for v in iou]}
