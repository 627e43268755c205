"""Denoising training for DETR-style detectors (DN-DETR, Li et al., CVPR 2022; as DINO uses it).

The Hungarian matching of DETR is unstable early in training: one query is matched to one object now and to
another a step later, so its gradient keeps changing its mind. DN-DETR adds a second, easy task beside it: hand
the decoder the ground-truth objects themselves, noised, as extra queries, and train it to give back the clean
ones. Those queries need no matching (each knows which object it came from), so they teach the decoder to refine
a box and name a class from the first step.

    labels'  = a random class with probability label_noise, else the label         (label flipping)
    cx'      = cx + u · box_noise · w / 2,  cy' = cy + u · box_noise · h / 2        (centre shifting, u ~ U(−1, 1))
    w'       = w · (1 + u · box_noise),     h' = h · (1 + u · box_noise)             (box scaling)

The objects of an image fill `groups` groups of M slots each (M the most objects of any image in the batch; an
image with fewer leaves padding slots), every group noised afresh: Q = groups · M denoising queries per image,
put before the N matching queries. A query's content is its noised label's embedding; its position comes from its
noised box (a sine encoding through a small MLP, or the model's own proposal path for a two-stage Deformable
DETR), and Deformable DETR's reference point is the noised box (its centre, where the references are points).

The decoder's self-attention is masked so that nothing leaks (`DenoisingQueries.attention_mask`):

    matching queries    see the matching queries only — they could otherwise read the answers off the
                        denoising queries, which inference does not have
    a denoising query   sees its own group and the matching queries; never another group (the same objects
                        noised otherwise) nor a padding slot

So the matching queries compute exactly what they compute without denoising, and inference (which has none) is
the model's own. The denoising queries' outputs, after every decoder layer, are scored against the objects they
came from with the detector's own class and box losses (models/detr_criterion.py, `denoising_losses`).

Shapes: B images, M slots per group, G groups, Q = G·M denoising queries, N matching queries, T = Q + N, D width.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from ..layers.pos_embed import sine_box_embed


@dataclass
class DenoisingQueries:
    """One batch's noised objects: labels (B, Q) int64; boxes (B, Q, 4) normalised (cx, cy, w, h); object (B, Q)
    the index in its image's targets of the object each slot holds, −1 at padding; groups G."""

    labels: torch.Tensor
    boxes: torch.Tensor
    object: torch.Tensor
    groups: int

    @property
    def num_queries(self) -> int:
        return self.labels.shape[1]

    @property
    def valid(self) -> torch.Tensor:
        """(B, Q) True where a slot holds an object."""
        return self.object >= 0

    def attention_mask(self, num_matching: int) -> torch.Tensor:
        """(B, 1, T, T) bool, True where query row may attend to key column; rows and columns in the decoder's
        order, the Q denoising queries first, then the N matching ones."""
        B, Q = self.labels.shape
        T, M = Q + num_matching, Q // self.groups
        device = self.labels.device
        group = torch.arange(Q, device=device) // M  # (Q,)
        allowed = torch.zeros(B, T, T, dtype=torch.bool, device=device)
        allowed[:, Q:, Q:] = True  # matching sees matching, and nothing else
        allowed[:, :Q, Q:] = True  # every denoising query sees the matching queries
        same_group = group[:, None] == group[None, :]  # (Q, Q)
        allowed[:, :Q, :Q] = same_group & self.valid[:, None, :]  # its own group's objects, no padding slot
        return allowed[:, None]


def noised_queries(targets: list[dict[str, torch.Tensor]], groups: int, box_noise: float, label_noise: float,
                   num_classes: int, generator: torch.Generator | None = None) -> DenoisingQueries | None:
    """targets[b]: "labels" (M_b,), "boxes" (M_b, 4) normalised cxcywh -> the batch's denoising queries, or None
    when no image has an object. Noise as the module's docstring says; boxes are clamped to the image (centres in
    [0, 1], sides in [1e-4, 1])."""
    if groups < 1:
        raise ValueError(f"denoising needs at least one group, got {groups}")
    most = max((len(t["labels"]) for t in targets), default=0)
    if most == 0:
        return None
    B, Q = len(targets), groups * most
    device = targets[0]["boxes"].device
    labels = torch.zeros(B, Q, dtype=torch.int64, device=device)
    boxes = torch.full((B, Q, 4), 0.5, device=device)
    obj = torch.full((B, Q), -1, dtype=torch.int64, device=device)
    for b, target in enumerate(targets):
        count = len(target["labels"])
        for g in range(groups):
            slots = slice(g * most, g * most + count)
            labels[b, slots] = target["labels"].to(device)
            boxes[b, slots] = target["boxes"].to(device).float()
            obj[b, slots] = torch.arange(count, device=device)

    def uniform(*shape: int) -> torch.Tensor:  # U(−1, 1)
        return torch.rand(*shape, generator=generator, device=device) * 2 - 1

    flip = torch.rand(B, Q, generator=generator, device=device) < label_noise
    random_labels = torch.randint(0, num_classes, (B, Q), generator=generator, device=device)
    labels = torch.where(flip, random_labels, labels)
    centre, size = boxes[..., :2], boxes[..., 2:]
    centre = (centre + uniform(B, Q, 2) * box_noise * size / 2).clamp(0.0, 1.0)
    size = (size * (1 + uniform(B, Q, 2) * box_noise)).clamp(1e-4, 1.0)
    return DenoisingQueries(labels, torch.cat([centre, size], -1), obj, groups)


class DenoisingEmbedding(nn.Module):
    """What a detector trained with denoising learns for its denoising queries: a class's content vector
    (`label_embed`, (K, D)) and, unless the model has a path of its own from boxes to queries, the box encoder
    (`box_embed`: the boxes' sine encoding (2D) -> D by a two-layer MLP, as DAB-DETR's `ref_point_head`). Only
    training uses them."""

    def __init__(self, num_classes: int, dim: int, box_encoder: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.label_embed = nn.Embedding(num_classes, dim)
        self.box_embed = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, dim)) if box_encoder \
            else None

    def content(self, queries: DenoisingQueries) -> torch.Tensor:
        """(B, Q, D): each query's noised label's embedding."""
        return self.label_embed(queries.labels)

    def position(self, queries: DenoisingQueries) -> torch.Tensor:
        """(B, Q, D): each query's noised box, encoded."""
        return self.box_embed(sine_box_embed(queries.boxes, self.dim))


def split_denoising(hidden: torch.Tensor, queries: DenoisingQueries | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A decoder layer's output (…, T, D) -> (matching (…, N, D), denoising (…, Q, D) or None)."""
    if queries is None:
        return hidden, None
    Q = queries.num_queries
    return hidden[..., Q:, :], hidden[..., :Q, :]


def fit_denoising_tensors(state: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint for a detector with or without denoising embeddings (`denoising.*`): a model that trains with
    denoising and a checkpoint without them (a release) starts its own fresh ones, with a warning; a checkpoint's
    embeddings that the model has no place for are training's alone and are left out."""
    mine = [key for key in target if key.startswith("denoising.")]
    theirs = [key for key in state if key.startswith("denoising.")]
    if mine and not theirs:
        warnings.warn("the checkpoint has no denoising embeddings: they start fresh, to be learnt with the "
                      "denoising queries", stacklevel=3)
        return {**state, **{key: target[key] for key in mine}}
    if theirs and not mine:
        return {key: value for key, value in state.items() if not key.startswith("denoising.")}
    return state
