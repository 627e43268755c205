"""From DETR's outputs to detections in pixels: every query is a detection, scored by its most likely class other
than "no object". No NMS: the set loss taught the queries not to duplicate each other (§3.1).

With `sigmoid` (Deformable DETR's per-class sigmoid scores) the detections are the `top_k` best (query, class)
pairs over all queries × classes, as its paper's code does: a query may give two classes' boxes."""

from __future__ import annotations

import torch
from torchvision.ops import box_convert

from .detection_output import DetectionOutput


@torch.no_grad()
def postprocess(outputs: DetectionOutput, image_sizes: torch.Tensor, threshold: float = 0.0, sigmoid: bool = False,
                top_k: int = 100) -> list[dict[str, torch.Tensor]]:
    """image_sizes (B, 2) as (height, width) in pixels -> per image "scores" (n,), "labels" (n,) in 0 … K-1 and
    "boxes" (n, 4) XYXY pixels, for the n queries scoring above `threshold` (all N at 0), best first."""
    boxes = box_convert(outputs.pred_boxes.float(), "cxcywh", "xyxy")  # (B, N, 4) in [0, 1]
    if sigmoid:
        probs = outputs.logits.float().sigmoid()  # (B, N, K)
        classes = probs.shape[-1]
        scores, index = probs.flatten(1).topk(min(top_k, probs[0].numel()), dim=1)  # (B, k) over N·K pairs
        labels = index % classes
        boxes = boxes.gather(1, (index // classes)[..., None].expand(-1, -1, 4))
    else:
        probs = outputs.logits.float().softmax(-1)[..., :-1]  # (B, N, K): the no-object column left out
        scores, labels = probs.max(-1)  # (B, N)
    height, width = image_sizes.float().unbind(-1)
    boxes = boxes * torch.stack([width, height, width, height], dim=-1)[:, None, :]
    results = []
    for s, lab, box in zip(scores, labels, boxes):
        keep = s > threshold
        order = s[keep].argsort(descending=True)
        results.append({"scores": s[keep][order], "labels": lab[keep][order], "boxes": box[keep][order]})
    return results
