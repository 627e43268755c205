"""What a set-prediction detector (DETR, Deformable DETR) returns: `DetectionOutput`, the last decoder layer's
predictions with every earlier layer's beside them. Below the matcher, the loss and the post-processing, which read
it, and the families, which make it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .denoising import DenoisingQueries, split_denoising


@dataclass
class DetectionOutput:
    """What a DETR predicts for a batch: logits (B, N, K + 1), the last column "no object" (Deformable DETR: (B, N,
    K) sigmoid scores, no such column); pred_boxes (B, N, 4) normalised (cx, cy, w, h) in [0, 1]; aux_outputs: the
    same for each earlier decoder layer, first layer first; enc_outputs: a two-stage model's proposals; denoising:
    what the denoising queries predict (models/denoising.py), in training with them only."""

    logits: torch.Tensor
    pred_boxes: torch.Tensor
    aux_outputs: list[DetectionOutput] = field(default_factory=list)
    enc_outputs: DetectionOutput | None = None
    denoising: DetectionOutput | None = None  # training with denoising queries: their predictions, the same layout


def layered_output(layers: list[tuple[torch.Tensor, torch.Tensor]], denoising: DenoisingQueries | None = None,
                   enc_outputs: DetectionOutput | None = None) -> DetectionOutput:
    """Each decoder layer's (logits, boxes), first layer first, -> the DetectionOutput of the last with the
    earlier ones as aux_outputs; with denoising queries, their share of every layer split off into `denoising`."""
    matching = [tuple(split_denoising(t, denoising)[0] for t in layer) for layer in layers]
    out = DetectionOutput(*matching[-1], [DetectionOutput(*layer) for layer in matching[:-1]], enc_outputs)
    if denoising is not None:
        noised = [tuple(split_denoising(t, denoising)[1] for t in layer) for layer in layers]
        out.denoising = DetectionOutput(*noised[-1], [DetectionOutput(*layer) for layer in noised[:-1]])
    return out
