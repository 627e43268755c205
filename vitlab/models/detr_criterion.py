"""DETR's set loss (Carion et al. 2020, §3.1, eq. 2 and appendix A.2), given the matching of matcher.py:

    L = Σ_i [ −log p̂_σ(i)(c_i) ]                       cross-entropy over all N predictions; an unmatched prediction's
                                                        target is "no object", whose weight is eos_coef (0.1)
      + Σ_{i: c_i ≠ ∅} [ w_L1 ‖b_i − b̂_σ(i)‖₁ + w_GIoU (1 − GIoU(b_i, b̂_σ(i))) ] / number of objects

The box terms are divided by the number of objects in the whole batch (summed over processes under torchrun),
so that every object weighs the same whatever image and process it lies in. With auxiliary outputs every earlier
decoder layer gets the same loss with its own matching (keys `loss_ce_0`, `loss_bbox_0`, …). The class error
(the share of matched objects whose class is not the arg-max) and the cardinality error (|predicted objects −
objects| per image) are logged, not trained.

With `focal` (Deformable DETR, Zhu et al. 2021, §A.2) the class term is the sigmoid focal loss (Lin et al. 2017;
α = 0.25, γ = 2) of every prediction against its matched class one-hot (all zeros when unmatched: there is no
"no object" column), summed and divided by the number of objects, weighed 2. A two-stage model's proposals
(`enc_outputs`) get the same loss against class-agnostic targets (every object of class 0), keys `…_enc`.

With denoising queries (models/denoising.py; DN-DETR, Li et al. 2022) every decoder layer's predictions for them
get the same three terms with the same weights, without matching: each valid denoising query against the object
it was noised from, the divisor the number of those queries (objects × groups, averaged over processes). The class
term is the cross-entropy's mean over them (DETR; none of them is "no object") or the focal loss's sum over them
divided by their number (Deformable DETR). Keys `…_dn` (final layer), `…_dn_0`, … (earlier layers).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou, sigmoid_focal_loss

from .denoising import DenoisingQueries
from .detection_output import DetectionOutput
from .detr_matcher import HungarianMatcher, Match


class SetCriterion:
    def __init__(self, num_classes: int, matcher: HungarianMatcher, eos_coef: float = 0.1, class_weight: float = 1.0,
                 bbox_weight: float = 5.0, giou_weight: float = 2.0,
                 mean_over_processes: Callable[[float], float] | None = None, focal: bool = False,
                 focal_alpha: float = 0.25) -> None:
        self.num_classes, self.matcher, self.eos_coef = num_classes, matcher, eos_coef
        self.focal, self.focal_alpha = focal, focal_alpha
        self.weights = {"loss_ce": class_weight, "loss_bbox": bbox_weight, "loss_giou": giou_weight}
        self.class_weights = torch.ones(num_classes + 1)
        self.class_weights[-1] = eos_coef  # "no object" is most predictions' target: down-weighted (§4)
        # under torchrun the trainer's mean of a number over the processes (models/ know no process group)
        self.mean_over_processes = mean_over_processes or (lambda value: value)

    def num_objects(self, targets: list[dict[str, torch.Tensor]]) -> float:
        """Objects per process, averaged over processes (the box terms' divisor), at least 1."""
        return max(self.mean_over_processes(float(sum(len(t["labels"]) for t in targets))), 1.0)

    def __call__(self, outputs: DetectionOutput, targets: list[dict[str, torch.Tensor]],
                 denoising: DenoisingQueries | None = None) -> dict[str, torch.Tensor]:
        """targets[b]: "labels" (M_b,) in 0 … K-1, "boxes" (M_b, 4) normalised cxcywh; denoising: the noised
        objects the model was given, whose predictions are outputs.denoising. Returns "loss" (the weighted total)
        and every term by name."""
        num_objects = self.num_objects(targets)
        losses: dict[str, torch.Tensor] = {}
        total = torch.zeros((), device=outputs.logits.device)
        layers = [("", outputs)] + [(f"_{i}", aux) for i, aux in enumerate(outputs.aux_outputs)]
        for suffix, layer in layers:  # the final layer, then each earlier one with its own matching
            matches = self.matcher(layer.logits, layer.pred_boxes, targets)
            terms = self.layer_losses(layer, targets, matches, num_objects)
            total = total + sum(self.weights[name] * value for name, value in terms.items())
            losses.update({name + suffix: value for name, value in terms.items()})
            if not suffix:
                losses.update(self.logged(layer, targets, matches))
        if outputs.enc_outputs is not None:  # two-stage proposals: is there an object, whatever its class
            agnostic = [{**t, "labels": torch.zeros_like(t["labels"])} for t in targets]
            matches = self.matcher(outputs.enc_outputs.logits, outputs.enc_outputs.pred_boxes, agnostic)
            terms = self.layer_losses(outputs.enc_outputs, agnostic, matches, num_objects)
            total = total + sum(self.weights[name] * value for name, value in terms.items())
            losses.update({name + "_enc": value for name, value in terms.items()})
        if denoising is not None:
            if outputs.denoising is None:
                raise ValueError("denoising queries were given but the outputs hold no predictions of theirs")
            terms = self.denoising_losses(outputs.denoising, targets, denoising)
            total = total + sum(self.weights[name.split("_dn")[0]] * value for name, value in terms.items())
            losses.update(terms)
        losses["loss"] = total
        return losses

    def denoising_losses(self, outputs: DetectionOutput, targets: list[dict[str, torch.Tensor]],
                         denoising: DenoisingQueries) -> dict[str, torch.Tensor]:
        """The class and box terms of every layer's denoising predictions (B, Q, ·) against the objects their
        queries came from: the valid ones, as one set matched to itself."""
        image, slot = torch.nonzero(denoising.valid, as_tuple=True)  # (V,) each
        obj = denoising.object[image, slot]
        labels = torch.stack([targets[int(b)]["labels"][int(j)] for b, j in zip(image, obj)]) if len(obj) else \
            torch.zeros(0, dtype=torch.int64)
        boxes = torch.stack([targets[int(b)]["boxes"][int(j)] for b, j in zip(image, obj)]) if len(obj) else \
            torch.zeros(0, 4)
        flat_targets = [{"labels": labels.to(outputs.logits.device), "boxes": boxes.to(outputs.logits.device)}]
        identity = [(torch.arange(len(obj)), torch.arange(len(obj)))]
        count = max(self.mean_over_processes(float(len(obj))), 1.0)
        losses = {}
        layers = [("_dn", outputs)] + [(f"_dn_{i}", aux) for i, aux in enumerate(outputs.aux_outputs)]
        for suffix, layer in layers:
            flat = DetectionOutput(layer.logits[image, slot][None], layer.pred_boxes[image, slot][None])  # (1, V, ·)
            terms = self.layer_losses(flat, flat_targets, identity, count)
            losses.update({name + suffix: value for name, value in terms.items()})
        return losses

    def layer_losses(self, outputs: DetectionOutput, targets: list[dict[str, torch.Tensor]], matches: list[Match],
                     num_objects: float) -> dict[str, torch.Tensor]:
        logits, boxes = outputs.logits, outputs.pred_boxes  # (B, N, K + 1) (focal: (B, N, K)), (B, N, 4)
        batch_index, pred_index = self.matched_predictions(matches, logits.device)
        labels = torch.cat([t["labels"][j] for t, (_, j) in zip(targets, matches)]).to(logits.device)
        if self.focal:
            one_hot = torch.zeros_like(logits, dtype=torch.float32)
            one_hot[batch_index, pred_index, labels] = 1.0
            loss_ce = sigmoid_focal_loss(logits.float(), one_hot, self.focal_alpha, 2.0, "sum") / num_objects
        else:
            target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)
            target_classes[batch_index, pred_index] = labels
            loss_ce = F.cross_entropy(logits.transpose(1, 2).float(), target_classes,
                                      self.class_weights.to(logits.device))  # weighted mean over the B·N predictions
        matched = boxes[batch_index, pred_index].float()  # (ΣM, 4)
        target_boxes = torch.cat([t["boxes"][j] for t, (_, j) in zip(targets, matches)]).float()
        loss_bbox = F.l1_loss(matched, target_boxes, reduction="sum") / num_objects
        giou = torch.diag(generalized_box_iou(box_convert(matched, "cxcywh", "xyxy"),
                                              box_convert(target_boxes, "cxcywh", "xyxy")))
        loss_giou = (1 - giou).sum() / num_objects
        return {"loss_ce": loss_ce, "loss_bbox": loss_bbox, "loss_giou": loss_giou}

    @torch.no_grad()
    def logged(self, outputs: DetectionOutput, targets: list[dict[str, torch.Tensor]], matches: list[Match]
               ) -> dict[str, torch.Tensor]:
        logits = outputs.logits
        batch_index, pred_index = self.matched_predictions(matches, logits.device)
        labels = torch.cat([t["labels"][j] for t, (_, j) in zip(targets, matches)])
        if len(labels):
            correct = (logits[batch_index, pred_index].argmax(-1) == labels).float().mean()
            class_error = 100 * (1 - correct)
        else:
            class_error = torch.zeros((), device=logits.device)
        if self.focal:  # without a "no object" class, a prediction is an object where a class scores above ½
            predicted = (logits.max(-1).values > 0).sum(1).float()
        else:
            predicted = (logits.argmax(-1) != self.num_classes).sum(1).float()  # (B,): predictions that are objects
        counts = torch.tensor([float(len(t["labels"])) for t in targets], device=logits.device)
        return {"class_error": class_error, "cardinality_error": F.l1_loss(predicted, counts)}

    @staticmethod
    def matched_predictions(matches: list[Match], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The (image, prediction) index of every matched prediction, both (ΣM,), on `device` (the matcher's
        indices come from scipy, on the CPU)."""
        batch_index = torch.cat([torch.full_like(i, b) for b, (i, _) in enumerate(matches)])
        return batch_index.to(device), torch.cat([i for i, _ in matches]).to(device)
