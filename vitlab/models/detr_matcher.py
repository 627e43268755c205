"""DETR's bipartite matching (Carion et al. 2020, §3.1, eq. 1): each object gets the one prediction whose
matching cost is lowest, no prediction gets two objects, and the rest are left to predict "no object".

    cost(i, j) = −w_class · p̂_i(c_j) + w_L1 · ‖b_j − b̂_i‖₁ − w_GIoU · GIoU(b_j, b̂_i)

over predictions i and objects j of one image, with p̂ the softmax probabilities and boxes in normalised
(cx, cy, w, h); the class term uses the probability, not its log, as the paper's code does. The optimal
assignment is found by the Hungarian algorithm (`scipy.optimize.linear_sum_assignment`).

With `focal` (Deformable DETR, trained with the sigmoid focal loss) the class term is the focal loss of calling
the prediction the object's class minus that of not calling it, with p = sigmoid(logit):
α (1 − p)^γ (−log p) − (1 − α) p^γ (−log(1 − p)), α = 0.25, γ = 2, and w_class = 2.

Shapes: B images, N predictions per image, K + 1 classes, M_b objects in image b.
"""

from __future__ import annotations

import torch
from torchvision.ops import box_convert, generalized_box_iou

Match = tuple[torch.Tensor, torch.Tensor]  # (prediction indices, object indices), both (M_b,) int64


class HungarianMatcher:
    def __init__(self, cost_class: float = 1.0, cost_bbox: float = 5.0, cost_giou: float = 2.0, focal: bool = False,
                 alpha: float = 0.25, gamma: float = 2.0) -> None:
        if cost_class == cost_bbox == cost_giou == 0:
            raise ValueError("the matching costs cannot all be 0: nothing would decide which prediction is whose")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
        self.focal, self.alpha, self.gamma = focal, alpha, gamma

    def cost_matrix(self, logits: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor,
                    target_boxes: torch.Tensor) -> torch.Tensor:
        """logits (P, K + 1) (focal: (P, K)), boxes (P, 4), labels (M,), target_boxes (M, 4) cxcywh -> cost (P, M)."""
        if self.focal:
            p = logits[:, labels].sigmoid()  # (P, M)
            positive = self.alpha * (1 - p) ** self.gamma * -(p + 1e-8).log()
            negative = (1 - self.alpha) * p ** self.gamma * -(1 - p + 1e-8).log()
            class_cost = positive - negative
        else:
            class_cost = -logits.softmax(-1)[:, labels]  # (P, M): the probability given to each object's class
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
        # imported here: scipy.optimize costs a third of a second, and every vitlab command imports this module
        from scipy.optimize import linear_sum_assignment

        matches = []
        for b, block in enumerate(cost.split(sizes, dim=-1)):  # block: (B, N, M_b); image b's own is block[b]
            rows, cols = linear_sum_assignment(block[b].numpy())
            matches.append((torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64)))
        return matches
