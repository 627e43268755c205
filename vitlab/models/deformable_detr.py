"""Deformable DETR (Zhu et al. 2021, "Deformable DETR: Deformable Transformers for End-to-End Object Detection").

DETR's dense attention over a feature map is replaced by attention to a few sampled points around a reference,
on several feature levels at once (layers/deform_attn.py), which lets it read fine maps and train ~10× faster:

    C3, C4, C5 = ResNet(images)                         §4.1  strides 8, 16, 32
    x_l = GN(Conv1×1(C_l)); x_4 = GN(Conv3×3/2(C5))      §4.1, App. A.2  L = 4 levels of width D, C6 at stride 64
    pos_l = Sine2D(mask_l) + e_l                        a learned level embedding e_l on the sine encoding
    memory = DeformEncoder^6(x, pos)                    every pixel of every level is a query, its own centre the
                                                        reference point
    q_pos, tgt = split(query_embed)                     §4.1  N = 300 queries: a position half and a target half
    ref = sigmoid(Linear(q_pos))                        a 2-d reference point per query
    hs_i = DeformDecoder_i(tgt, q_pos, ref, memory)     self-attention among queries, deformable cross-attention
    logits_i = Linear(hs_i)        (B, N, K)            sigmoid scores, no "no object" class (focal loss)
    boxes_i = sigmoid(MLP³(hs_i) + logit(ref_i))        the box predicted relative to the reference

Reference points and sampling are in [0, 1] of each image's own valid (unpadded) area: the valid ratios carry
them onto each padded level, so an image padded in a batch looks at the same pixels as alone.

Two options of §4.2: `with_box_refine` gives each decoder layer its own heads, and each layer's box (detached)
becomes the next layer's 4-d reference; `two_stage` (with box refinement) first scores every encoder pixel as an
object proposal with an extra head pair, and the top N proposals become the decoder's reference boxes and, through
their sine encoding, its queries.

Glossary: B batch, D width, L levels, S = Σ_l h_l·w_l pixels over levels, N queries, K classes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..layers.deform_attn import DeformableDecoderBlock, DeformableEncoderBlock, MSDeformAttn
from ..layers.pos_embed import sine_box_embed, sine_pos_embed_2d
from .backbones import RESNETS, ResNetBackbone, downsample_mask
from .denoising import DenoisingEmbedding, DenoisingQueries
from .family import ExportSpec, Model, ModelFamily, Paper, Release
from .labels import coco_91
from .registry import register_config, register_model
from .release_inputs import DETR_COCO
from .set_prediction import (
    BoxHead,
    DetectionOutput,
    SetPrediction,
    adapt_detector_checkpoint,
    check_detector_inputs,
    denoising_embedding,
    detector_export_spec,
    layered_output,
)


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """logit(x), with x clamped to [eps, 1 - eps] so that boxes at the image's edge stay finite."""
    x = x.clamp(0, 1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def relative_to(reference: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """A box head's output (B, N, 4) as box logits around the reference (B, N, 2 or 4): added to the reference's
    logit (its centre only, for a 2-d point)."""
    if reference.shape[-1] == 4:
        return delta + inverse_sigmoid(reference)
    return torch.cat([delta[..., :2] + inverse_sigmoid(reference), delta[..., 2:]], -1)


def valid_ratios(mask: torch.Tensor) -> torch.Tensor:
    """mask (B, h, w) True at padding -> (B, 2): the share of the map's width and height the image fills."""
    height, width = mask.shape[1:]
    return torch.stack([(~mask[:, 0, :]).sum(1) / width, (~mask[:, :, 0]).sum(1) / height], -1).float()


def encoder_reference_points(spatial_shapes: list[tuple[int, int]], ratios: torch.Tensor) -> torch.Tensor:
    """Each pixel's centre as a reference point: (B, S, L, 2) as (x, y), in [0, 1] of the valid area of each
    level. ratios (B, L, 2). A pixel of level l sits at the same place of the image on every level."""
    points = []
    for level, (height, width) in enumerate(spatial_shapes):
        y, x = torch.meshgrid(torch.arange(height, device=ratios.device) + 0.5,
                              torch.arange(width, device=ratios.device) + 0.5, indexing="ij")
        x = x.reshape(1, -1) / (ratios[:, None, level, 0] * width)  # (B, h·w), relative to its valid width
        y = y.reshape(1, -1) / (ratios[:, None, level, 1] * height)
        points.append(torch.stack([x, y], -1))
    return torch.cat(points, 1)[:, :, None] * ratios[:, None]  # (B, S, 1, 2) onto each level: (B, S, L, 2)


class DeformableTransformer(nn.Module):
    """The deformable encoder and decoder, the level embeddings and the queries' reference points (or, two-stage,
    the encoder's proposals). The heads are the detector's; the decoder is handed them for box refinement."""

    def __init__(self, dim: int = 256, num_heads: int = 8, enc_layers: int = 6, dec_layers: int = 6,
                 ffn_dim: int = 1024, dropout: float = 0.1, num_levels: int = 4, enc_points: int = 4,
                 dec_points: int = 4, two_stage: bool = False, num_proposals: int = 300) -> None:
        super().__init__()
        self.dim, self.num_levels, self.two_stage, self.num_proposals = dim, num_levels, two_stage, num_proposals
        self.encoder = nn.ModuleList(DeformableEncoderBlock(dim, ffn_dim, dropout, num_levels, num_heads, enc_points)
                                     for _ in range(enc_layers))
        self.decoder = nn.ModuleList(DeformableDecoderBlock(dim, ffn_dim, dropout, num_levels, num_heads, dec_points)
                                     for _ in range(dec_layers))
        self.level_embed = nn.Parameter(torch.empty(num_levels, dim))
        if two_stage:
            self.enc_output = nn.Linear(dim, dim)
            self.enc_output_norm = nn.LayerNorm(dim)
            self.pos_trans = nn.Linear(2 * dim, 2 * dim)
            self.pos_trans_norm = nn.LayerNorm(2 * dim)
        else:
            self.reference_points = nn.Linear(dim, 2)
        for param in self.parameters():  # Xavier on every matrix, then the deformable attention's own start
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
        for module in self.modules():
            if isinstance(module, MSDeformAttn):
                module.reset_parameters()
        if not two_stage:
            nn.init.zeros_(self.reference_points.bias)
        nn.init.normal_(self.level_embed)

    def box_queries(self, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two-stage: boxes (B, N, 4) in [0, 1] -> their queries' position and target (B, N, D) each, from the
        boxes' sine encoding."""
        return self.pos_trans_norm(self.pos_trans(sine_box_embed(boxes, self.dim))).split(self.dim, -1)

    def proposals(self, memory: torch.Tensor, padding_mask: torch.Tensor, spatial_shapes: list[tuple[int, int]]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two-stage: one proposal per encoder pixel, a box centred on it with a side of 0.05 · 2^level of the
        image, as logits (B, S, 4) (inf where padded or too near the edge), and the memory that scores them."""
        boxes, start = [], 0
        for level, (height, width) in enumerate(spatial_shapes):
            mask = padding_mask[:, start:start + height * width].view(-1, height, width)
            valid = torch.stack([(~mask[:, 0, :]).sum(1), (~mask[:, :, 0]).sum(1)], -1).float()  # (B, 2) w, h
            y, x = torch.meshgrid(torch.arange(height, device=memory.device, dtype=torch.float32),
                                  torch.arange(width, device=memory.device, dtype=torch.float32), indexing="ij")
            centre = (torch.stack([x, y], -1)[None] + 0.5) / valid[:, None, None, :]  # (B, h, w, 2)
            size = torch.full_like(centre, 0.05 * 2.0 ** level)
            boxes.append(torch.cat([centre, size], -1).flatten(1, 2))
            start += height * width
        boxes = torch.cat(boxes, 1)  # (B, S, 4)
        usable = ((boxes > 0.01) & (boxes < 0.99)).all(-1, keepdim=True) & ~padding_mask[..., None]
        logits = torch.log(boxes / (1 - boxes)).masked_fill(~usable, float("inf"))
        memory = self.enc_output_norm(self.enc_output(memory.masked_fill(~usable, 0.0)))
        return memory, logits

    def forward(self, sources: list[torch.Tensor], masks: list[torch.Tensor], positions: list[torch.Tensor],
                query_embed: torch.Tensor | None, heads: list[tuple[nn.Module, nn.Module]],
                box_refine: bool, denoising: tuple[DenoisingQueries, DenoisingEmbedding] | None = None
                ) -> tuple[list[torch.Tensor], list[torch.Tensor], DetectionOutput | None]:
        """sources, positions [(B, D, h_l, w_l)], masks [(B, h_l, w_l)] True at padding; query_embed (N, 2D) or
        None (two-stage); heads: the (class, box) pair of each decoder layer, then the proposals'; denoising: noised
        objects and their embeddings, decoded before the object queries (models/denoising.py).

        Returns each decoder layer's output (B, N, D) (with denoising (B, Q + N, D)), the reference each layer's
        boxes are relative to ((B, N, 2 or 4), in [0, 1]), and, two-stage, the encoder's proposal scores and
        boxes."""
        spatial_shapes = [tuple(s.shape[-2:]) for s in sources]  # symbolic in an exported graph
        x = torch.cat([s.flatten(2).transpose(1, 2) for s in sources], 1)  # (B, S, D)
        pos = torch.cat([p.flatten(2).transpose(1, 2) + self.level_embed[level]
                         for level, p in enumerate(positions)], 1)
        padding = torch.cat([m.flatten(1) for m in masks], 1)  # (B, S)
        ratios = torch.stack([valid_ratios(m) for m in masks], 1)  # (B, L, 2)
        reference = encoder_reference_points(spatial_shapes, ratios)
        for block in self.encoder:
            x = block(x, pos, reference, spatial_shapes, padding)
        memory, batch, encoder_output = x, x.shape[0], None

        if self.two_stage:
            scored, proposal_logits = self.proposals(memory, padding, spatial_shapes)
            class_head, box_head = heads[len(self.decoder)]
            scores = class_head(scored)  # (B, S, K)
            proposal_boxes = box_head(scored) + proposal_logits  # (B, S, 4) logits
            encoder_output = DetectionOutput(scores, proposal_boxes.sigmoid())
            top = scores[..., 0].topk(self.num_proposals, dim=1).indices  # the first class's score, as the paper
            top_boxes = proposal_boxes.gather(1, top[..., None].expand(-1, -1, 4)).detach()
            reference = top_boxes.sigmoid()
            query_pos, target = self.box_queries(reference)
        else:
            query_pos, target = query_embed.split(self.dim, -1)
            query_pos = query_pos.unsqueeze(0).expand(batch, -1, -1)  # (B, N, D)
            target = target.unsqueeze(0).expand(batch, -1, -1)
            reference = self.reference_points(query_pos).sigmoid()  # (B, N, 2)

        self_mask = None
        if denoising is not None:  # the noised objects go first, their boxes as references, the same paths
            queries, embedding = denoising
            if self.two_stage:  # the proposals' own way from a box to a query
                noised_pos, noised_target = self.box_queries(queries.boxes)
            else:
                noised_pos, noised_target = embedding.position(queries), 0.0
            noised_target = noised_target + embedding.content(queries)
            self_mask = queries.attention_mask(query_pos.shape[1])
            query_pos, target = torch.cat([noised_pos, query_pos], 1), torch.cat([noised_target, target], 1)
            reference = torch.cat([queries.boxes[..., :reference.shape[-1]], reference], 1)  # a point: the centre

        outputs, references, h = [], [], target
        for index, block in enumerate(self.decoder):
            scale = ratios if reference.shape[-1] == 2 else torch.cat([ratios, ratios], -1)
            h = block(h, query_pos, reference[:, :, None] * scale[:, None], memory, spatial_shapes, padding,
                      self_mask)
            outputs.append(h)
            references.append(reference)
            if box_refine:  # this layer's box is the next layer's reference, without a gradient through it
                reference = relative_to(reference, heads[index][1](h)).sigmoid().detach()
        return outputs, references, encoder_output


class DeformableDETR(Model):
    """images (B, C, H, W), padding_mask (B, H, W) True at padded pixels (None: no padding) -> DetectionOutput
    with logits (B, N, K) (sigmoid scores), pred_boxes (B, N, 4), aux_outputs, and enc_outputs when two-stage."""

    def __init__(self, backbone: ResNetBackbone, transformer: DeformableTransformer, num_classes: int,
                 num_queries: int, aux_loss: bool = True, with_box_refine: bool = False,
                 two_stage: bool = False, denoising: bool = False) -> None:
        super().__init__()
        if two_stage and not with_box_refine:
            raise ValueError("two_stage needs with_box_refine (the proposals' heads are the refining ones)")
        dim, levels = transformer.dim, transformer.num_levels
        self.backbone, self.transformer = backbone, transformer
        self.num_classes, self.num_queries, self.aux_loss = num_classes, num_queries, aux_loss
        self.with_box_refine, self.two_stage = with_box_refine, two_stage
        # a 1×1 conv per backbone map, then 3×3 stride-2 convs for the extra levels, each with GroupNorm(32)
        channels = list(backbone.channels)
        projections = [nn.Sequential(nn.Conv2d(c, dim, 1), nn.GroupNorm(32, dim)) for c in channels]
        for extra in range(levels - len(channels)):
            projections.append(nn.Sequential(nn.Conv2d(channels[-1] if extra == 0 else dim, dim, 3, 2, 1),
                                             nn.GroupNorm(32, dim)))
        self.input_proj = nn.ModuleList(projections)
        for projection in self.input_proj:
            nn.init.xavier_uniform_(projection[0].weight)
            nn.init.zeros_(projection[0].bias)
        if not two_stage:
            self.query_embed = nn.Embedding(num_queries, 2 * dim)  # query position | target, split in two
        class_head, box_head = nn.Linear(dim, num_classes), BoxHead(dim, dim)
        nn.init.constant_(class_head.bias, -math.log((1 - 0.01) / 0.01))  # every class at prior 0.01 (focal loss)
        nn.init.zeros_(box_head.layers[-1].weight)  # the first boxes are the references themselves
        nn.init.zeros_(box_head.layers[-1].bias)
        self.num_head_pairs = len(transformer.decoder) + (1 if two_stage else 0)  # two-stage: + the proposals'
        if with_box_refine:  # each layer's own pair; the later ones refine a box, so only the first sizes one
            self.class_embed = nn.ModuleList(copy.deepcopy(class_head) for _ in range(self.num_head_pairs))
            self.bbox_embed = nn.ModuleList(copy.deepcopy(box_head) for _ in range(self.num_head_pairs))
            nn.init.constant_(self.bbox_embed[0].layers[-1].bias[2:], -2.0)  # small boxes: sigmoid(-2) ≈ 0.12
        else:  # one pair, shared by every layer
            nn.init.constant_(box_head.layers[-1].bias[2:], -2.0)
            self.class_embed, self.bbox_embed = class_head, box_head
        if two_stage:  # the reference boxes are sized already
            for head in self.bbox_embed:
                nn.init.zeros_(head.layers[-1].bias[2:])
        # trained with denoising queries: their label embedding, and their box encoder where the model has no way
        # of its own from a box to a query (two-stage has: the proposals')
        self.denoising = DenoisingEmbedding(num_classes, dim, box_encoder=not two_stage) if denoising else None

    def heads(self) -> list[tuple[nn.Module, nn.Module]]:
        """The (class, box) head pair of each decoder layer, then (two-stage) the proposals' pair."""
        if self.with_box_refine:
            return list(zip(self.class_embed, self.bbox_embed))
        return [(self.class_embed, self.bbox_embed)] * self.num_head_pairs

    def levels(self, images: torch.Tensor, padding_mask: torch.Tensor | None
               ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The L projected maps (B, D, h_l, w_l) and their padding masks (B, h_l, w_l), True at padding."""
        features = self.backbone(images)
        sources = [projection(f) for projection, f in zip(self.input_proj, features)]
        for projection in self.input_proj[len(features):]:
            sources.append(projection(features[-1] if len(sources) == len(features) else sources[-1]))
        if padding_mask is None:
            padding_mask = torch.zeros(images.shape[0], *images.shape[2:], dtype=torch.bool, device=images.device)
        return sources, [downsample_mask(padding_mask, s.shape[-2:]) for s in sources]

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        return detector_export_spec(self, example)

    def adapt_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return adapt_detector_checkpoint(self, state)

    def classifier_keys(self) -> tuple[str, ...]:
        return tuple(key for key in self.state_dict() if key.startswith("class_embed."))

    def forward(self, images: torch.Tensor, padding_mask: torch.Tensor | None = None,
                denoising: DenoisingQueries | None = None) -> DetectionOutput:
        """denoising: noised objects to decode beside the object queries (training with DN-DETR's denoising task;
        their predictions come back as the output's `denoising`)."""
        check_detector_inputs(images, padding_mask)
        return self.detect(*self.levels(images, padding_mask), denoising=denoising)

    def detect(self, sources: list[torch.Tensor], masks: list[torch.Tensor],
               denoising: DenoisingQueries | None = None) -> DetectionOutput:
        """The detections from the projected maps [(B, D, h_l, w_l)] and their masks [(B, h_l, w_l)]: the
        transformer and the heads. Padding beyond an image's valid area changes nothing here."""
        positions = [sine_pos_embed_2d(~m, self.transformer.dim, offset=-0.5).permute(0, 3, 1, 2).to(s.dtype)
                     for m, s in zip(masks, sources)]
        heads = self.heads()
        hs, references, encoder_output = self.transformer(
            sources, masks, positions, None if self.two_stage else self.query_embed.weight, heads,
            self.with_box_refine, None if denoising is None else (denoising, denoising_embedding(self)))
        layers = [(class_head(h), relative_to(reference, box_head(h)).sigmoid())  # (B, [Q +] N, K), (…, 4)
                  for (class_head, box_head), h, reference in zip(heads, hs, references)]
        return layered_output(layers if self.aux_loss else layers[-1:], denoising, encoder_output)


@register_config
@dataclass(frozen=True)
class DeformableDETRConfig(SetPrediction, ModelFamily):
    family: ClassVar[str] = "deformable_detr"
    tasks: ClassVar[tuple[str, ...]] = ("detection",)
    focal: ClassVar[bool] = True
    title: ClassVar[str] = "Deformable DETR"
    description: ClassVar[str] = ("Deformable DETR (Zhu et al., ICLR 2021): DETR whose attention samples a few "
                                  "points of a multi-scale feature pyramid")
    paper: ClassVar[Paper | None] = Paper(
        "Deformable DETR: Deformable Transformers for End-to-End Object Detection",
        "Zhu, Xizhou and others", "ICLR", 2021, "2010.04159")
    columns: ClassVar[str] = "depth: encoder + decoder layers"
    # SenseTime's releases as Hugging Face hosts them (transformers' key names, timm's ResNet-50); the originals are
    # Google Drive files (fundamentalvision/Deformable-DETR's README). The figure: box AP on COCO val2017 from that
    # README. The revisions pin the commits whose model.safetensors the Hugging Face file pages show
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        Release("deformable_detr_resnet50.coco", "SenseTime/deformable-detr", "huggingface", "model.safetensors",
                revision="83ecd26945199939cb82806f988debdb71e6f43e",
                sha256="caf1e3e61283c6ce35cd2d9adaa7033cf40997d4dfe434003bcdb9085cc8cf9b", licence="apache-2.0",
                metric={"box_ap": 44.5}, dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO,
                note="revision: the Hugging Face page shows its first 7 digits (main), the full id is a third-party "
                     "audit's (LibreYOLO); the official file is Google Drive "
                     "1nDWZWHuRwtwGden77NLM9JoWe-YisJnA, which needs a browser"),
        Release("deformable_detr_resnet50.coco_box_refine", "SenseTime/deformable-detr-with-box-refine",
                "huggingface", "model.safetensors", revision="2e9e461623a8fdc296e19666c46c8a4389a3a6fe",
                sha256="4113700fe8aade398808424b7c5c1304cfbf886adc6450a6ca5d50a702be3373", licence="apache-2.0",
                metric={"box_ap": 46.2}, dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO,
                overrides={"with_box_refine": True},
                note="revision: the Hugging Face page shows its first 7 digits (main), the full id is a third-party "
                     "audit's (LibreYOLO); the official file is Google Drive "
                     "1JYKyRYzUH7uo9eVfDaVCiaIGZb5YTCuI, which needs a browser"),
        Release("deformable_detr_resnet50.coco_two_stage", "SenseTime/deformable-detr-with-box-refine-two-stage",
                "huggingface", "model.safetensors", revision="52c5a7f4ad20bbf8e384c5f6033a25bf0aacff33",
                sha256="411bb4238a834d40fff651b1b5b7d6dd80c2dd28be1747eec7b6918674e85de6", licence="apache-2.0",
                metric={"box_ap": 46.9}, dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO,
                overrides={"with_box_refine": True, "two_stage": True},
                note="sha256 from a third-party audit (LibreYOLO), not seen on the Hugging Face page; the official "
                     "file is Google Drive 15I03A7hNTpwuLNdfuEmW9_taZMNVssEp, which needs a browser"),
    )}
    int8_fp32: ClassVar[dict[str, str]] = {
        "*.sampling_offsets": "where each query samples the feature maps: an error here moves the sampling point",
        "*.attention_weights": "the sampling points' weights, through a softmax",
        "bbox_embed*": "the box head: its output, through a sigmoid, is the box (and the next layer's reference)",
        "reference_points": "the queries' reference points, which every sampling offset is added to",
    }
    num_classes: int = 91  # COCO's category ids run to 90; the paper's code sizes the head by the largest id + 1
    backbone: str = "resnet50"
    backbone_stages: tuple[int, ...] = (2, 3, 4)  # C3, C4, C5
    frozen_bn: bool = True
    frozen_stages: int = 2  # the stem and layer1, as the paper
    in_chans: int = 3
    num_levels: int = 4  # the backbone's maps plus 3×3 stride-2 convolutions for the rest
    dim: int = 256
    num_heads: int = 8
    enc_layers: int = 6
    dec_layers: int = 6
    ffn_dim: int = 1024
    dropout: float = 0.1
    enc_points: int = 4
    dec_points: int = 4
    num_queries: int = 300
    with_box_refine: bool = False
    two_stage: bool = False
    aux_loss: bool = True
    denoising: bool = False  # the label (and box) embeddings of denoising training (DN-DETR); training only
    img_size: int = 800  # recorded for the data pipeline (the shorter side in the paper); any size works

    def __post_init__(self) -> None:
        if self.backbone not in RESNETS:
            raise ValueError(f"unknown backbone {self.backbone!r}; choose one of {', '.join(RESNETS)}")
        if self.num_levels < len(self.backbone_stages):
            raise ValueError(f"num_levels ({self.num_levels}) must be at least the backbone's maps "
                             f"{self.backbone_stages}")
        if self.dim % 32:
            raise ValueError(f"dim must be divisible by 32 (GroupNorm(32) on every level), got {self.dim}")
        if self.two_stage and not self.with_box_refine:
            raise ValueError("two_stage needs with_box_refine=True, as in the paper's code")

    def build(self) -> DeformableDETR:
        backbone = ResNetBackbone(self.backbone, max(self.backbone_stages), tuple(self.backbone_stages),
                                  frozen_bn=self.frozen_bn, frozen_stages=self.frozen_stages, in_chans=self.in_chans)
        transformer = DeformableTransformer(self.dim, self.num_heads, self.enc_layers, self.dec_layers, self.ffn_dim,
                                            self.dropout, self.num_levels, self.enc_points, self.dec_points,
                                            self.two_stage, self.num_queries)
        model = DeformableDETR(backbone, transformer, self.num_classes, self.num_queries, self.aux_loss,
                               self.with_box_refine, self.two_stage, self.denoising)
        model.config = self
        return model


@register_model
def deformable_detr_resnet50() -> DeformableDETRConfig:
    """The paper's single-scale-query Deformable DETR on ResNet-50 (C3–C5 + C6, 6 + 6 layers of width 256, FFN
    1024, 300 queries, 4 points per head and level); `with_box_refine=True` and `two_stage=True` give its
    "++" variants."""
    return DeformableDETRConfig()


@register_model
def deformable_detr_small() -> DeformableDETRConfig:
    """detr_small's sizes, deformable: ResNet-18 C3–C5 plus C6 (16², 8², 4² and 2² maps of a 128-pixel scene),
    trained from scratch with ordinary batch norm and nothing frozen; 3 + 3 layers of width 128, 8 heads, FFN 512,
    25 queries, 4 points per head and level, 10 classes. The same sizes as detr_small, so that a comparison of
    the two measures the attention, not the width."""
    return DeformableDETRConfig(num_classes=10, backbone="resnet18", frozen_bn=False, frozen_stages=0, dim=128,
                                num_heads=8, enc_layers=3, dec_layers=3, ffn_dim=512, num_queries=25, img_size=128)
