"""DETR (Carion et al. 2020, "End-to-End Object Detection with Transformers"): detection as set prediction.

    f = Backbone(images)                              §3.2  a ResNet's last map, (B, C, H/32, W/32)
    z = Conv1×1(f), flattened to h·w tokens            §3.2  (B, h·w, D)
    pos = Sine2D(padding mask)                         §3.2, A.4  added to queries and keys, never to values
    memory = Encoder^6(z, pos)                         post-norm self-attention blocks, padding masked
    hs = Decoder^6(0, memory, pos, query_pos=queries)  N learned object queries, decoded in parallel
    logits = Linear(hs)        (B, N, K + 1)           K classes and one "no object" ∅
    boxes = sigmoid(MLP³(hs))  (B, N, 4)               normalised (cx, cy, w, h)

The decoder's output after every layer goes through the decoder's final LayerNorm and the shared heads: the
earlier layers' predictions are the auxiliary outputs that the loss supervises too (§3.2, "Auxiliary decoding
losses"). There are no anchors and no NMS: the loss matches predictions to objects one to one (tasks/detection).

The blocks are vitlab's shared ones (`layers/blocks.py`, whose docstring explains where positions go); this file
adds the backbone, the queries, the heads and the stacking. `DETR(backbone, transformer, num_classes,
num_queries)` takes its parts as in the paper's code; `DETRConfig.build()` assembles them.

Glossary: B batch, H × W image, h × w feature map, D width, N object queries, K classes, L decoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..layers.blocks import DecoderBlock, EncoderBlock, PostNormEncoderBlock, PreNormDecoderBlock
from ..layers.pos_embed import sine_pos_embed_2d
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


class DetrTransformer(nn.Module):
    """The encoder–decoder of DETR: post-norm blocks (pre-norm with `pre_norm`), the decoder's final LayerNorm
    applied to every layer's output (so the auxiliary heads read normalised features, as the official code does).
    """

    def __init__(self, dim: int = 256, num_heads: int = 8, enc_layers: int = 6, dec_layers: int = 6,
                 ffn_dim: int = 2048, dropout: float = 0.1, pre_norm: bool = False) -> None:
        super().__init__()
        options = {"mlp_ratio": ffn_dim / dim, "qkv_bias": True, "proj_drop": dropout, "attn_drop": dropout,
                   "norm_layer": nn.LayerNorm, "act_layer": nn.ReLU}
        encoder_block = EncoderBlock if pre_norm else PostNormEncoderBlock
        decoder_block = PreNormDecoderBlock if pre_norm else DecoderBlock
        self.encoder = nn.ModuleList(encoder_block(dim, num_heads, **options) for _ in range(enc_layers))
        self.encoder_norm = nn.LayerNorm(dim) if pre_norm else nn.Identity()  # a pre-norm stack ends unnormalised
        self.decoder = nn.ModuleList(decoder_block(dim, num_heads, **options) for _ in range(dec_layers))
        self.decoder_norm = nn.LayerNorm(dim)
        self.dim = dim
        for param in self.parameters():  # Xavier on every matrix, as the official code initialises
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, query_pos: torch.Tensor,
                padding_mask: torch.Tensor | None = None,
                denoising: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> list[torch.Tensor]:
        """tokens (B, M, D), pos (B, M, D), query_pos (N, D), padding_mask (B, M) True at padded tokens or None;
        denoising: the denoising queries' content and position (B, Q, D) each and the self-attention mask (B, 1, T,
        T), put before the object queries (models/denoising.py).

        Returns each decoder layer's normalised output, (B, N, D) (with denoising (B, Q + N, D)), first layer
        first."""
        memory = tokens
        for block in self.encoder:
            memory = block(memory, key_padding_mask=padding_mask, pos=pos)
        memory = self.encoder_norm(memory)
        query_pos = query_pos.unsqueeze(0).expand(tokens.shape[0], -1, -1)  # (B, N, D): the same queries per image
        x = torch.zeros_like(query_pos)  # the target starts empty: the queries say only where to look (§3.2)
        self_mask = None
        if denoising is not None:
            content, position, self_mask = denoising
            x, query_pos = torch.cat([content, x], 1), torch.cat([position, query_pos], 1)  # (B, T, D)
        outputs = []
        for block in self.decoder:
            x = block(x, memory, self_mask, memory_key_padding_mask=padding_mask, pos=pos, query_pos=query_pos)
            outputs.append(self.decoder_norm(x))
        return outputs


class DETR(Model):
    """images (B, C, H, W), padding_mask (B, H, W) True at padded pixels (None: no padding) -> DetectionOutput."""

    def __init__(self, backbone: ResNetBackbone, transformer: DetrTransformer, num_classes: int, num_queries: int,
                 aux_loss: bool = True, denoising: bool = False) -> None:
        super().__init__()
        dim = transformer.dim
        self.backbone = backbone
        self.input_proj = nn.Conv2d(backbone.num_channels, dim, kernel_size=1)  # C -> D channels
        self.transformer = transformer
        self.query_embed = nn.Embedding(num_queries, dim)  # N learned object queries
        self.class_embed = nn.Linear(dim, num_classes + 1)  # + 1: "no object"
        self.bbox_embed = BoxHead(dim, dim)
        self.num_classes, self.num_queries, self.aux_loss = num_classes, num_queries, aux_loss
        # trained with denoising queries: their label and box embeddings (training only)
        self.denoising = DenoisingEmbedding(num_classes, dim) if denoising else None

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
        features = self.backbone(images)[-1]  # (B, C, h, w)
        B, _, h, w = features.shape
        if padding_mask is None:
            mask = None
            valid = torch.ones(B, h, w, dtype=torch.bool, device=images.device)
        else:
            mask = downsample_mask(padding_mask, (h, w))  # (B, h, w)
            valid = ~mask
        pos = sine_pos_embed_2d(valid, self.transformer.dim).flatten(1, 2).to(features.dtype)  # (B, h·w, D)
        tokens = self.input_proj(features).flatten(2).transpose(1, 2)  # (B, D, h, w) -> (B, h·w, D)
        extra = None
        if denoising is not None:
            embedding = denoising_embedding(self)
            extra = (embedding.content(denoising), embedding.position(denoising),
                     denoising.attention_mask(self.num_queries))
        layers = self.transformer(tokens, pos, self.query_embed.weight,
                                  None if mask is None else mask.flatten(1), extra)  # L × (B, [Q +] N, D)
        if not self.aux_loss:
            layers = layers[-1:]
        hs = torch.stack(layers)  # (L, B, [Q +] N, D)
        logits, boxes = self.class_embed(hs), self.bbox_embed(hs).sigmoid()  # (L, B, ·, K + 1), (L, B, ·, 4)
        return layered_output(list(zip(logits, boxes)), denoising)


@register_config
@dataclass(frozen=True)
class DETRConfig(SetPrediction, ModelFamily):
    family: ClassVar[str] = "detr"
    int8_fp32: ClassVar[dict[str, str]] = {
        "bbox_embed.*": "the box head: its output, through a sigmoid, is the box; a step of its scale moves edges",
    }
    # Facebook's DETR-R50 and DETR-R101: the original files (a name holds the first 8 hex digits of the file's
    # sha256, which torch.hub checks; facebookresearch/detr's hubconf.py loads them with check_hash=True) and the
    # Hugging Face copies (transformers' key names, timm's ResNet). The figure: box AP on COCO val2017, from DETR's
    # README
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        Release("detr_resnet50.coco", "https://dl.fbaipublicfiles.com/detr/detr-r50-e632da11.pth", "official",
                "detr-r50-e632da11.pth", sha256="e632da11", licence="apache-2.0", metric={"box_ap": 42.0},
                dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO),
        Release("detr_resnet50.hf_coco", "facebook/detr-resnet-50", "huggingface", "model.safetensors",
                revision="0f518b5f070d804a491a79b3ca78c0f6694c9429",
                sha256="830f5e2eeaada8c8c8281779dcc8ab12833972eb8514ed0a35be6c1d4420ad81", licence="apache-2.0",
                metric={"box_ap": 42.0}, dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO),
        Release("detr_resnet101.coco", "https://dl.fbaipublicfiles.com/detr/detr-r101-2c7b67e5.pth", "official",
                "detr-r101-2c7b67e5.pth", sha256="2c7b67e5", licence="apache-2.0", metric={"box_ap": 43.5},
                dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO),
        Release("detr_resnet101.hf_coco", "facebook/detr-resnet-101", "huggingface", "model.safetensors",
                revision="05d4ab5acd30ea057b800e599ec5e53781f3ebaf",
                sha256="86cec5ddf787238c249f1eee18c67d403ae04bf74b062766adfcc075ae467809", licence="apache-2.0",
                metric={"box_ap": 43.5}, dataset="COCO val2017", labels=coco_91, preprocessing=DETR_COCO),
    )}
    tasks: ClassVar[tuple[str, ...]] = ("detection",)
    title: ClassVar[str] = "DETR"
    description: ClassVar[str] = ("DETR (Carion et al., ECCV 2020): a ResNet, a Transformer encoder-decoder and object "
                                  "queries matched one-to-one to the objects")
    paper: ClassVar[Paper | None] = Paper(
        "End-to-End Object Detection with Transformers",
        "Carion, Nicolas and others", "ECCV", 2020, "2005.12872")
    columns: ClassVar[str] = "depth: encoder + decoder layers; classes: + no-object"

    num_classes: int = 91  # K; the official COCO models index classes by category id, hence 91
    backbone: str = "resnet50"
    backbone_last_stage: int = 4  # 4: C5 at stride 32 (the paper); 3: C4 at stride 16
    frozen_bn: bool = True
    frozen_stages: int = 2  # the stem and layer1, as in the paper
    in_chans: int = 3
    dim: int = 256
    num_heads: int = 8
    enc_layers: int = 6
    dec_layers: int = 6
    ffn_dim: int = 2048
    dropout: float = 0.1
    pre_norm: bool = False
    num_queries: int = 100
    aux_loss: bool = True
    denoising: bool = False  # the label and box embeddings of denoising training (DN-DETR); training only
    img_size: int = 800  # recorded for the data pipeline (the shorter side in the paper); any size runs

    def __post_init__(self) -> None:
        if self.backbone not in RESNETS:
            raise ValueError(f"unknown backbone {self.backbone!r}; choose one of {', '.join(RESNETS)}")
        if self.dim % self.num_heads or self.dim % 4:
            raise ValueError(f"dim={self.dim} must be divisible by num_heads={self.num_heads} and by 4 (the 2-D "
                             f"sine encoding)")
        for name in ("num_classes", "num_queries", "dec_layers", "ffn_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def build(self) -> DETR:
        backbone = ResNetBackbone(self.backbone, self.backbone_last_stage, frozen_bn=self.frozen_bn,
                                  frozen_stages=self.frozen_stages, in_chans=self.in_chans)
        transformer = DetrTransformer(self.dim, self.num_heads, self.enc_layers, self.dec_layers, self.ffn_dim,
                                      self.dropout, self.pre_norm)
        model = DETR(backbone, transformer, self.num_classes, self.num_queries, self.aux_loss, self.denoising)
        model.config = self
        return model


@register_model
def detr_resnet50() -> DETRConfig:
    """The paper's DETR: ResNet-50 (frozen batch norm, stem and layer1 frozen), 6 + 6 post-norm layers of width 256
    with 8 heads and FFN 2048, 100 queries, 91 COCO category ids + no object."""
    return DETRConfig()


@register_model
def detr_resnet101() -> DETRConfig:
    """detr_resnet50 on ResNet-101 (the paper's DETR-R101, 60M parameters): the same transformer and heads, the
    backbone's C5 read after its 23-block layer3."""
    return DETRConfig(backbone="resnet101")


@register_model
def detr_small() -> DETRConfig:
    """A DETR that learns `vitlab make-scenes` on 2 CPU cores: ResNet-18 cut after layer3 (C4, stride 16: an 8 × 8
    map of a 128-pixel scene), trained from scratch with ordinary batch norm and nothing frozen; 3 + 3 layers of
    width 128, 8 heads, FFN 512, 25 queries (a scene holds at most 6 items), 10 classes."""
    return DETRConfig(num_classes=10, backbone="resnet18", backbone_last_stage=3, frozen_bn=False, frozen_stages=0,
                      dim=128, num_heads=8, enc_layers=3, dec_layers=3, ffn_dim=512, num_queries=25, img_size=128)
