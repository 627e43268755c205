"""Denoising training (DN-DETR) for DETR and Deformable DETR: the self-attention mask against one written out by
hand, no leak in either forbidden direction (the matching queries' outputs do not move when the denoising queries
do, nor one group's when another's do), the noise within its stated ranges, the reconstruction losses against
their formulas, inference identical with and without the option for the same weights, and every detector variant
training with it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vitlab.models import create_model
from vitlab.models.denoising import DenoisingQueries, noised_queries

Y, n = True, False  # may attend, may not
DETECTORS = {
    "detr": ("detr_small", {"enc_layers": 1, "dec_layers": 2, "dim": 32, "num_heads": 4, "ffn_dim": 64,
                            "num_queries": 5, "num_classes": 4, "dropout": 0.0}),
    "deformable": ("deformable_detr_small", {"enc_layers": 1, "dec_layers": 2, "dim": 32, "num_heads": 4,
                                             "ffn_dim": 64, "num_queries": 5, "num_classes": 4, "dropout": 0.0}),
    "box_refine": ("deformable_detr_small", {"enc_layers": 1, "dec_layers": 2, "dim": 32, "num_heads": 4,
                                             "ffn_dim": 64, "num_queries": 5, "num_classes": 4, "dropout": 0.0,
                                             "with_box_refine": True}),
    "two_stage": ("deformable_detr_small", {"enc_layers": 1, "dec_layers": 2, "dim": 32, "num_heads": 4,
                                            "ffn_dim": 64, "num_queries": 5, "num_classes": 4, "dropout": 0.0,
                                            "with_box_refine": True, "two_stage": True}),
}


def targets_of(counts: list[int], num_classes: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for count in counts:
        centre = torch.rand(count, 2, generator=generator) * 0.5 + 0.25
        size = torch.rand(count, 2, generator=generator) * 0.3 + 0.1
        labels = torch.randint(0, num_classes, (count,), generator=generator)
        out.append({"labels": labels, "boxes": torch.cat([centre, size], 1)})
    return out


def test_the_attention_mask_is_the_one_written_out_by_hand():
    # image 0 has two objects, image 1 one (its second slot in each group is padding); two groups of M = 2 slots,
    # so Q = 4 denoising queries (group 0: slots 0, 1; group 1: slots 2, 3), then N = 3 matching queries
    queries = noised_queries(targets_of([2, 1]), groups=2, box_noise=0.4, label_noise=0.2, num_classes=4)
    assert queries.object.tolist() == [[0, 1, 0, 1], [0, -1, 0, -1]]
    image_0 = [[Y, Y, n, n, Y, Y, Y],
               [Y, Y, n, n, Y, Y, Y],
               [n, n, Y, Y, Y, Y, Y],
               [n, n, Y, Y, Y, Y, Y],
               [n, n, n, n, Y, Y, Y],
               [n, n, n, n, Y, Y, Y],
               [n, n, n, n, Y, Y, Y]]
    image_1 = [[Y, n, n, n, Y, Y, Y],  # the padding slots (columns 1 and 3) are seen by no one
               [Y, n, n, n, Y, Y, Y],
               [n, n, Y, n, Y, Y, Y],
               [n, n, Y, n, Y, Y, Y],
               [n, n, n, n, Y, Y, Y],
               [n, n, n, n, Y, Y, Y],
               [n, n, n, n, Y, Y, Y]]
    assert queries.attention_mask(3).tolist() == [[image_0], [image_1]]


def test_the_noise_stays_within_its_stated_ranges_and_flips_the_stated_share_of_labels():
    targets = targets_of([400, 250], num_classes=10, seed=1)
    torch.manual_seed(2)
    queries = noised_queries(targets, groups=5, box_noise=0.4, label_noise=0.2, num_classes=10)
    assert queries.num_queries == 5 * 400 and queries.groups == 5
    valid = queries.valid
    b, slot = torch.nonzero(valid, as_tuple=True)
    clean = torch.stack([targets[int(i)]["boxes"][int(j)] for i, j in zip(b, queries.object[b, slot])])
    labels = torch.stack([targets[int(i)]["labels"][int(j)] for i, j in zip(b, queries.object[b, slot])])
    noised = queries.boxes[b, slot]
    # centres move by at most 0.4 · half the side, sides scale within [0.6, 1.4]; these boxes stay inside the image
    assert ((noised[:, :2] - clean[:, :2]).abs() <= 0.4 * clean[:, 2:] / 2 + 1e-6).all()
    ratio = noised[:, 2:] / clean[:, 2:]
    assert ((ratio >= 0.6 - 1e-6) & (ratio <= 1.4 + 1e-6)).all()
    assert ratio.min() < 0.65 and ratio.max() > 1.35  # the whole range is used
    # a label is replaced with probability 0.2 by a uniform one of 10 classes: it changes with 0.2 · 9 / 10
    changed = (queries.labels[b, slot] != labels).float().mean().item()
    assert abs(changed - 0.18) < 0.015
    assert valid.sum() == 5 * 650
    still = noised_queries(targets, groups=2, box_noise=0.0, label_noise=0.0, num_classes=10)
    assert torch.equal(still.boxes[0, :400], targets[0]["boxes"]) and torch.equal(still.labels[1, 400:650],
                                                                                   targets[1]["labels"])
    edge = [{"labels": torch.tensor([1]), "boxes": torch.tensor([[0.99, 0.01, 0.5, 0.5]])}]
    boxes = noised_queries(edge, groups=50, box_noise=1.0, label_noise=0.0, num_classes=2).boxes
    assert boxes[..., :2].min() >= 0 and boxes[..., :2].max() <= 1 and boxes[..., 2:].min() >= 1e-4
    assert noised_queries([{"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}], 3, 0.4, 0.2,
                          10) is None


def giou_by_hand(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Generalised IoU of box pairs (V, 4) cxcywh, from its definition: IoU − (hull − union) / hull."""
    def corners(x):
        return x[:, 0] - x[:, 2] / 2, x[:, 1] - x[:, 3] / 2, x[:, 0] + x[:, 2] / 2, x[:, 1] + x[:, 3] / 2
    ax0, ay0, ax1, ay1 = corners(a)
    bx0, by0, bx1, by1 = corners(b)
    inter = (torch.min(ax1, bx1) - torch.max(ax0, bx0)).clamp(min=0) * (torch.min(ay1, by1) - torch.max(ay0, by0)
                                                                         ).clamp(min=0)
    union = a[:, 2] * a[:, 3] + b[:, 2] * b[:, 3] - inter
    hull = (torch.max(ax1, bx1) - torch.min(ax0, bx0)) * (torch.max(ay1, by1) - torch.min(ay0, by0))
    return inter / union - (hull - union) / hull


@pytest.mark.parametrize("name", ["detr", "deformable"])
def test_the_reconstruction_losses_are_their_formulas(name):
    from vitlab.models.detection_output import DetectionOutput

    preset, overrides = DETECTORS[name]
    config = create_model(preset, **overrides).config
    criterion = config.build_criterion()
    targets = targets_of([2, 1])
    queries = noised_queries(targets, groups=2, box_noise=0.4, label_noise=0.2, num_classes=4)
    torch.manual_seed(3)
    columns = 5 if name == "detr" else 4  # DETR's "no object" column

    def random_output(n):
        return DetectionOutput(torch.randn(2, n, columns), torch.rand(2, n, 4) * 0.5 + 0.25)
    main = random_output(5)
    main.aux_outputs = [random_output(5)]
    noised = random_output(queries.num_queries)
    noised.aux_outputs = [random_output(queries.num_queries)]
    main.denoising = noised
    losses = criterion(main, targets, queries)

    # the valid slots, in (image, slot) order, and the objects they came from
    slots = [(0, 0, 0), (0, 1, 1), (0, 2, 0), (0, 3, 1), (1, 0, 0), (1, 2, 0)]
    for suffix, layer in (("_dn", noised), ("_dn_0", noised.aux_outputs[0])):
        logits = torch.stack([layer.logits[b, s] for b, s, _ in slots])
        boxes = torch.stack([layer.pred_boxes[b, s] for b, s, _ in slots])
        labels = torch.stack([targets[b]["labels"][j] for b, _, j in slots])
        clean = torch.stack([targets[b]["boxes"][j] for b, _, j in slots])
        if name == "detr":  # the cross-entropy's mean over the six queries
            ce = -torch.stack([logits[i].log_softmax(-1)[labels[i]] for i in range(6)]).mean()
        else:  # focal loss (α 0.25, γ 2) of every class of every query, summed, over six
            p = logits.sigmoid()
            one_hot = F.one_hot(labels, 4).float()
            p_t = p * one_hot + (1 - p) * (1 - one_hot)
            alpha = 0.25 * one_hot + 0.75 * (1 - one_hot)
            ce = (alpha * (1 - p_t) ** 2 * -p_t.log()).sum() / 6
        torch.testing.assert_close(losses["loss_ce" + suffix], ce)
        torch.testing.assert_close(losses["loss_bbox" + suffix], (boxes - clean).abs().sum() / 6)
        torch.testing.assert_close(losses["loss_giou" + suffix], (1 - giou_by_hand(boxes, clean)).sum() / 6)
    weights = {"loss_ce": 1.0 if name == "detr" else 2.0, "loss_bbox": 5.0, "loss_giou": 2.0}
    extra = sum(weights[key] * losses[key + s] for key in weights for s in ("_dn", "_dn_0"))
    main.denoising = None
    torch.testing.assert_close(losses["loss"], criterion(main, targets)["loss"] + extra)


def pair(name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same detector without and with denoising embeddings, sharing every other weight."""
    preset, overrides = DETECTORS[name]
    torch.manual_seed(0)
    plain = create_model(preset, **overrides)
    torch.manual_seed(1)
    with_dn = create_model(preset, denoising=True, **overrides)
    missing, unexpected = with_dn.load_state_dict(plain.state_dict(), strict=False)
    assert unexpected == [] and missing and all(key.startswith("denoising.") for key in missing)
    return plain, with_dn


def images_and_targets():
    torch.manual_seed(4)
    images = torch.randn(2, 3, 64, 64)
    mask = torch.zeros(2, 64, 64, dtype=torch.bool)
    mask[1, :, 48:] = True
    return images, mask, targets_of([3, 1])


@pytest.mark.parametrize("name", list(DETECTORS))
def test_inference_is_the_same_with_and_without_the_option_and_the_matching_queries_see_no_denoising_query(name):
    plain, with_dn = pair(name)
    images, mask, targets = images_and_targets()
    plain.eval(), with_dn.eval()
    with torch.no_grad():
        a, b = plain(images, mask), with_dn(images, mask)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.pred_boxes, b.pred_boxes) and b.denoising is None
    # in training (dropout 0), the object queries' predictions do not move when denoising queries are added, nor
    # when those change; one group's do not move when another group's queries change
    plain.train(), with_dn.train()
    torch.manual_seed(5)
    queries = noised_queries(targets, groups=2, box_noise=0.4, label_noise=0.2, num_classes=4)
    moved = DenoisingQueries(queries.labels.clone(), queries.boxes.clone(), queries.object, queries.groups)
    M = queries.num_queries // 2
    moved.labels[:, M:] = (moved.labels[:, M:] + 1) % 4  # group 1 only
    moved.boxes[:, M:, :2] = 1 - moved.boxes[:, M:, :2]
    with torch.no_grad():
        alone = plain(images, mask)
        first, second = with_dn(images, mask, denoising=queries), with_dn(images, mask, denoising=moved)
    for out in (first, second):
        torch.testing.assert_close(out.logits, alone.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.pred_boxes, alone.pred_boxes, atol=1e-5, rtol=1e-5)
        for aux, aux_alone in zip(out.aux_outputs, alone.aux_outputs):
            torch.testing.assert_close(aux.pred_boxes, aux_alone.pred_boxes, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(first.denoising.logits[:, :M], second.denoising.logits[:, :M], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(first.denoising.logits[:, M:], second.denoising.logits[:, M:])
    assert first.denoising.logits.shape[:2] == (2, 2 * 3) and len(first.denoising.aux_outputs) == 1


@pytest.mark.parametrize("name", list(DETECTORS))
def test_every_detector_trains_with_denoising_and_the_embeddings_learn(name):
    _, model = pair(name)
    model.train()
    criterion = model.config.build_criterion()
    images, mask, targets = images_and_targets()
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    totals = []
    for step in range(4):
        torch.manual_seed(step)
        queries = noised_queries(targets, groups=3, box_noise=0.4, label_noise=0.2, num_classes=4)
        losses = criterion(model(images, mask, denoising=queries), targets, queries)
        optimizer.zero_grad()
        losses["loss"].backward()
        assert model.denoising.label_embed.weight.grad.abs().sum() > 0
        if model.denoising.box_embed is not None:
            assert model.denoising.box_embed[0].weight.grad.abs().sum() > 0
        else:  # two-stage: the noised boxes take the proposals' path
            assert model.transformer.pos_trans.weight.grad.abs().sum() > 0
        optimizer.step()
        totals.append(losses["loss_bbox_dn"].item())
        assert math.isfinite(losses["loss"].item())
    assert totals[-1] < totals[0]


def test_a_model_without_the_embeddings_says_how_to_get_them_and_releases_load_into_one_with_them():
    plain, with_dn = pair("detr")
    images, mask, targets = images_and_targets()
    queries = noised_queries(targets, groups=1, box_noise=0.4, label_noise=0.2, num_classes=4)
    with pytest.raises(ValueError, match="denoising=True"):
        plain(images, mask, denoising=queries)
    # a checkpoint without denoising embeddings (a release) into a model with them: they start fresh, with a warning;
    # the other way round they are left out
    with pytest.warns(UserWarning, match="no denoising embeddings"):
        adapted = with_dn.adapt_checkpoint(plain.state_dict())
    assert with_dn.load_state_dict(adapted, strict=True)
    assert plain.load_state_dict(plain.adapt_checkpoint(with_dn.state_dict()), strict=True)
