"""What the set-prediction detectors (DETR, Deformable DETR) share, whichever family builds them: the checks of
their inputs, the box head, the export of their graph, the adaptation of a checkpoint for other classes, and the
`SetPrediction` part of a family's config that builds the matcher, the set loss and the post-processing the family
is trained and read with. Each family's file imports this module and no other family's.

Glossary: B batch, H × W image, D width, N object queries, K classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from .adapt import adapt_input_channels, fresh_classifiers
from .denoising import DenoisingEmbedding, fit_denoising_tensors
from .detection_output import DetectionOutput, layered_output
from .detr_criterion import SetCriterion
from .detr_matcher import HungarianMatcher
from .detr_postprocess import postprocess
from .family import ExportSpec

__all__ = ["BoxHead", "DetectionOutput", "SetPrediction", "adapt_detector_checkpoint", "check_detector_inputs",
           "denoising_embedding", "detector_export_spec", "layered_output"]


def check_detector_inputs(images: torch.Tensor, padding_mask: torch.Tensor | None) -> None:
    """A detector's inputs: images (B, C, H, W) and, if any, padding_mask (B, H, W) True at padded pixels."""
    if images.ndim != 4:
        raise ValueError(f"expected images (B, C, H, W), got shape {tuple(images.shape)}")
    if padding_mask is not None and padding_mask.shape != (images.shape[0], *images.shape[2:]):
        raise ValueError(f"padding_mask must be (B, H, W) = {(images.shape[0], *images.shape[2:])}, True at "
                         f"padded pixels; got shape {tuple(padding_mask.shape)}")


def denoising_embedding(model: nn.Module) -> DenoisingEmbedding:
    """The model's denoising embeddings, or an error that says how to get a model with them."""
    if model.denoising is None:
        raise ValueError("this model was built without denoising embeddings: build it with denoising=True (vitlab "
                         "train --dn-groups N does) to train with denoising queries")
    return model.denoising


EXPORT_MIN_SIDE = 256  # 4 pixels of the coarsest map at stride 64


def detector_export_spec(model: nn.Module, example: tuple[torch.Tensor, ...] | None = None) -> ExportSpec:
    """images (B, 3, H, W), padding_mask (B, H, W) -> logits (B, N, K[+1]), pred_boxes (B, N, 4), in eval mode (the
    last decoder layer's); batch and image size free. An example of images alone gets a mask of no padding."""
    if example is None:
        size = model.config.img_size
        example = (torch.randn(2, 3, size, size),)
    images = example[0]
    # traced at no less than EXPORT_MIN_SIDE a side: torch.export makes an axis of size 1 a constant (its 0/1
    # specialisation), and an image whose coarsest map is one pixel high or wide (64 pixels at Deformable DETR's
    # stride 64) would give a graph that holds that map's size fixed while the image's stays free
    height, width = (max(side, EXPORT_MIN_SIDE) for side in images.shape[-2:])
    if (height, width) != tuple(images.shape[-2:]) or len(example) == 1:
        images = torch.randn(*images.shape[:-2], height, width, dtype=images.dtype)
        example = (images, torch.zeros(images.shape[0], height, width, dtype=torch.bool))

    def detect(m: nn.Module, images: torch.Tensor, padding_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = m(images, padding_mask)
        return out.logits, out.pred_boxes

    return ExportSpec("detector", detect, ("images", "padding_mask"), ("logits", "pred_boxes"), example,
                      ({0: "batch", 2: "height", 3: "width"}, {0: "batch", 1: "height", 2: "width"}))


def adapt_detector_checkpoint(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A detector's checkpoint for another class count (COCO's 91 category ids, say) starts this model's fresh
    class heads, with a warning, and keeps everything else: backbone, transformer, queries, box heads, as the DETR
    family's maintainers advise for fine-tuning. The input convolution adapts to other channels; denoising
    embeddings start fresh where the checkpoint has none (models/denoising.py)."""
    target = model.state_dict()
    state = fit_denoising_tensors(state, target)
    state = adapt_input_channels(state, target, "backbone.conv1.weight")
    heads = [key for key in target if key.startswith("class_embed.")]
    rows = next((state[k].shape[0] for k in heads if k in state and state[k].ndim > 0), None)
    extra = target[heads[0]].shape[0] - model.num_classes  # DETR's "no object" row
    return fresh_classifiers(state, target, heads, None if rows is None else rows - extra, model.num_classes)


class BoxHead(nn.Module):
    """The 3-layer perceptron of §3.2 with ReLU between layers: (…, D) -> (…, 4), before the sigmoid."""

    def __init__(self, dim: int, hidden: int, out: int = 4, num_layers: int = 3) -> None:
        super().__init__()
        widths = [dim] + [hidden] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, [*widths[1:], out]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else layer(x).relu()
        return x


class SetPrediction:
    """What a DETR-style detector's config builds beside its model, as the official `build(args)` returns (model,
    criterion, postprocessors): the Hungarian matcher and set loss it is trained with, and the rule that turns its
    outputs into detections. `focal`: per-class sigmoid scores, the focal cost and loss weighed 2, top-k over
    (query, class) pairs (Deformable DETR); else a softmax with a "no object" class (DETR)."""

    focal: ClassVar[bool] = False

    @staticmethod
    def pack_outputs(outputs: list[torch.Tensor]) -> DetectionOutput:
        """A runtime's graph outputs (logits, pred_boxes) -> the detector's DetectionOutput."""
        return DetectionOutput(outputs[0], outputs[1])

    def summary(self) -> dict:
        """An encoder–decoder's sizes: its depth is encoder + decoder layers; no patches."""
        return {"image": self.img_size, "patch": None, "dim": self.dim, "depth": f"{self.enc_layers}+{self.dec_layers}",
                "heads": self.num_heads, "classes": self.num_classes}

    def build_criterion(self, cost_class: float | None = None, cost_bbox: float = 5.0, cost_giou: float = 2.0,
                        eos_coef: float = 0.1, class_weight: float | None = None, bbox_weight: float = 5.0,
                        giou_weight: float = 2.0, mean_over_processes: Callable[[float], float] | None = None):
        """The set criterion (models/detr_criterion.py) with its matcher; None weights: the family's (2 with the
        focal loss, 1 with the softmax)."""
        default_class = 2.0 if self.focal else 1.0
        cost_class = default_class if cost_class is None else cost_class
        class_weight = default_class if class_weight is None else class_weight
        matcher = HungarianMatcher(cost_class, cost_bbox, cost_giou, focal=self.focal)
        return SetCriterion(self.num_classes, matcher, eos_coef, class_weight, bbox_weight, giou_weight,
                            mean_over_processes=mean_over_processes, focal=self.focal)

    def postprocess(self, outputs: DetectionOutput, image_sizes: torch.Tensor, threshold: float = 0.0
                    ) -> list[dict[str, torch.Tensor]]:
        """Detections in pixels (models/detr_postprocess.py) scored the family's way; image_sizes (B, 2) as (H, W)."""
        return postprocess(outputs, image_sizes, threshold, sigmoid=self.focal)
