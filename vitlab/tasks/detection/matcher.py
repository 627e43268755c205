"""DETR's bipartite matching (Carion et al. 2020, §3.1, eq. 1): each object gets the one prediction whose
matching cost is lowest, no prediction gets two objects, and the rest are left to predict "no object".

    cost(i, j) = −w_class · p̂_i(c_j) + w_L1 · ‖b_j − b̂_i‖₁ − w_GIoU · GIoU(b_j, b̂_i)

over predictions i and objects j of one image, with p̂ the softmax probabilities and boxes in normalised
(cx, cy, w, h); the class term uses the probability, not its log, as the paper's code does. The optimal
assignment is found by the Hungarian algorithm (`scipy.optimize.linear_sum_assignment`).

Shapes: B images, N predictions per image, K + 1 classes, M_b objects in image b.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment
from torchvision.ops import box_convert, generalized_box_iou

Match = tuple[torch.Tensor, torch.Tensor]  # (prediction indices, object indices), both (M_b,) int64


class HungarianMatcher:
    def __init__(self, cost_class: float = 1.0, cost_bbox: float = 5.0, cost_giou: float = 2.0) -> None:
        if cost_class == cost_bbox == cost_giou == 0:
            raise ValueError("the matching costs cannot all be 0: nothing would decide which prediction is whose")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou

    def cost_matrix(self, logits: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor,
                    target_boxes: torch.Tensor) -> torch.Tensor:
        """logits (P, K + 1), boxes (P, 4), labels (M,), target_boxes (M, 4) cxcywh -> cost (P, M)."""
        probs = logits.softmax(-1)  # (P, K + 1)
        class_cost = -probs[:, labels]  # (P, M): the probability each prediction gives each object's class
        l1_cost = torch.cdist(boxes, target_boxes, p=1)  # (P, M)
        giou_cost = -generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"),
                                         box_convert(target_boxes, "cxcywh", "xyxy"))  # (P, M)
        return self.cost_bbox * l1_cost + self.cost_class * class_cost + self.cost_giou * giou_cost

    @torch.no_grad()
    def __call__(self, logits: torch.Tensor, boxes: torch.Tensor, targets: list[dict[str, torch.Tensor]]
                 ) -> list[Match]:
        """logits (B, N, K + 1), boxes (B, N, 4) cxcywh in [0, 1]; targets[b]: "labels" (M_b,), "boxes" (M_b, 4)
        normalised cxcywh. Returns, per image, the matched (prediction, object) index pairs sorted by prediction.

        One cost matrix for the whole batch (every prediction against every object, one set of matmuls), cut into
        each image's block for the assignment."""
        B, N, _ = logits.shape
        sizes = [len(t["labels"]) for t in targets]
        if sum(sizes) == 0:
            empty = torch.empty(0, dtype=torch.int64)
            return [(empty, empty) for _ in targets]
        labels = torch.cat([t["labels"] for t in targets])
        target_boxes = torch.cat([t["boxes"] for t in targets])
        cost = self.cost_matrix(logits.flatten(0, 1).float(), boxes.flatten(0, 1).float(), labels,
                                target_boxes.float())
        cost = cost.view(B, N, -1).cpu()  # (B, N, ΣM)
        matches = []
        for b, block in enumerate(cost.split(sizes, dim=-1)):  # block: (B, N, M_b); image b's own is block[b]
            rows, cols = linear_sum_assignment(block[b].numpy())
            matches.append((torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64)))
        return matches
