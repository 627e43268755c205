"""Deformable DETR's focal matching, loss and top-k post-processing against transformers' implementation of the
paper's code, and the two-stage proposals' class-agnostic loss against the formula."""

import pytest
import torch
from torchvision.ops import box_convert, sigmoid_focal_loss

from vitlab.models.detection_output import DetectionOutput
from vitlab.models.detr_criterion import SetCriterion
from vitlab.models.detr_matcher import HungarianMatcher
from vitlab.models.detr_postprocess import postprocess

from .test_detection import random_boxes, random_targets


def focal_outputs(B=3, N=7, K=4, layers=3, seed=0):
    """Sigmoid-score outputs: K columns, no "no object" one."""
    generator = torch.Generator().manual_seed(seed)

    def layer():
        return DetectionOutput(torch.randn(B, N, K, generator=generator) * 2,
                               random_boxes(B * N, generator).view(B, N, 4))

    final = layer()
    final.aux_outputs = [layer() for _ in range(layers - 1)]
    return final


def hf_targets(targets):
    return [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets]


def test_focal_matcher_equals_transformers():
    from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher

    outputs, targets = focal_outputs(B=3, N=9), random_targets([2, 5, 3])
    theirs = DeformableDetrHungarianMatcher(class_cost=2, bbox_cost=5, giou_cost=2)(
        {"logits": outputs.logits, "pred_boxes": outputs.pred_boxes}, hf_targets(targets))
    mine = HungarianMatcher(2, 5, 2, focal=True)(outputs.logits, outputs.pred_boxes, targets)
    for (r1, c1), (r2, c2) in zip(mine, theirs):
        assert torch.equal(r1, r2) and torch.equal(c1, c2)


@pytest.mark.parametrize("counts", [[3, 1, 4], [0, 2, 0]])
def test_focal_set_loss_equals_transformers(counts):
    from transformers.loss.loss_deformable_detr import DeformableDetrHungarianMatcher, DeformableDetrImageLoss

    outputs, targets = focal_outputs(B=3, N=6, K=4), random_targets(counts)
    reference = DeformableDetrImageLoss(DeformableDetrHungarianMatcher(class_cost=2, bbox_cost=5, giou_cost=2), 4,
                                        focal_alpha=0.25, losses=["labels", "boxes", "cardinality"])

    def as_dict(o):
        return {"logits": o.logits, "pred_boxes": o.pred_boxes}

    theirs = reference({**as_dict(outputs), "auxiliary_outputs": [as_dict(a) for a in outputs.aux_outputs]},
                       hf_targets(targets))
    ours = SetCriterion(4, HungarianMatcher(2, 5, 2, focal=True), class_weight=2, focal=True)(outputs, targets)
    for key in ("loss_ce", "loss_bbox", "loss_giou", "loss_ce_0", "loss_bbox_1", "loss_giou_1", "cardinality_error"):
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-5, rtol=1e-5)
    # the paper weighs its focal term 2 (transformers' default coefficient is 1)
    weights = {"loss_ce": 2, "loss_bbox": 5, "loss_giou": 2}
    total = sum(weights[k.rstrip("_0123456789")] * v for k, v in theirs.items() if k.startswith("loss_"))
    torch.testing.assert_close(ours["loss"], total, atol=1e-5, rtol=1e-5)


def test_two_stage_proposals_are_scored_whatever_their_class():
    outputs, targets = focal_outputs(B=2, N=5, K=3, layers=1), random_targets([2, 3], K=3)
    generator = torch.Generator().manual_seed(5)
    proposals = DetectionOutput(torch.randn(2, 20, 3, generator=generator),
                                random_boxes(40, generator).view(2, 20, 4))
    outputs.enc_outputs = proposals
    matcher = HungarianMatcher(2, 5, 2, focal=True)
    losses = SetCriterion(3, matcher, class_weight=2, focal=True)(outputs, targets)
    agnostic = [{**t, "labels": torch.zeros_like(t["labels"])} for t in targets]
    matches = matcher(proposals.logits, proposals.pred_boxes, agnostic)
    one_hot = torch.zeros_like(proposals.logits)
    for b, (rows, _) in enumerate(matches):
        one_hot[b, rows, 0] = 1.0  # "an object", in the first column
    expected = sigmoid_focal_loss(proposals.logits, one_hot, 0.25, 2.0, "sum") / 5  # the 5 objects
    torch.testing.assert_close(losses["loss_ce_enc"], expected)
    without = SetCriterion(3, matcher, class_weight=2, focal=True)(
        DetectionOutput(outputs.logits, outputs.pred_boxes), targets)
    enc_total = sum(w * losses[f"{k}_enc"] for k, w in (("loss_ce", 2), ("loss_bbox", 5), ("loss_giou", 2)))
    torch.testing.assert_close(losses["loss"], without["loss"] + enc_total)


def test_top_k_postprocess_equals_transformers():
    from transformers.models.deformable_detr.image_processing_deformable_detr import DeformableDetrImageProcessor

    outputs = focal_outputs(B=2, N=30, K=5, layers=1)
    sizes = torch.tensor([[100, 150], [64, 48]])
    hf_out = type("Out", (), {"logits": outputs.logits, "pred_boxes": outputs.pred_boxes})()
    theirs = DeformableDetrImageProcessor().post_process_object_detection(hf_out, threshold=0.0,
                                                                           target_sizes=sizes, top_k=100)
    for mine, their in zip(postprocess(outputs, sizes, sigmoid=True), theirs):
        torch.testing.assert_close(mine["scores"], their["scores"])
        torch.testing.assert_close(mine["boxes"], their["boxes"])
        assert torch.equal(mine["labels"], their["labels"])
    boxes = box_convert(outputs.pred_boxes[0], "cxcywh", "xyxy") * torch.tensor([150, 100, 150, 100])
    best = outputs.logits[0].sigmoid().flatten().argmax()
    torch.testing.assert_close(postprocess(outputs, sizes, sigmoid=True)[0]["boxes"][0], boxes[best // 5])
