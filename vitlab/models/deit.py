"""DeiT (Touvron et al. 2021, "Training data-efficient image transformers & distillation through attention").

DeiT is ViT's architecture trained with a strong recipe (engine/augment.py, engine/ema.py, ...) and, in its
distilled form (⚗), one extra learned token:

    z0 = [x_class; x_distill; x_p¹E; …; x_pᴺE] + E_pos        two prefix tokens, positions for both
    zL = encoder(z0)                                          the same pre-norm blocks as ViT
    y_cls = head(LN(zL)⁰)          learns from the true label
    y_dist = head_dist(LN(zL)¹)    learns from the teacher (tasks/classification/distill.py)

In training the model returns both logits, as a `DistilledOutput` (logits = y_cls, dist_logits = y_dist); in
evaluation their average, as the paper does (§4, "at test time ... we add the softmax output by the two
classifiers"; the released code averages logits, which is what timm and we do). Key names (cls_token, dist_token,
pos_embed, head, head_dist) are timm's.

Glossary: B batch, C channels, H, W pixels, N patch tokens, D width, K classes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from .family import Paper, Release
from .labels import imagenet_1k
from .registry import register_config, register_model
from .release_inputs import IMAGENET, timm_eval
from .vit import VisionTransformer, ViTConfig, _vit28


@register_config
@dataclass(frozen=True)
class DeiTConfig(ViTConfig):
    """A ViT config whose model carries a distillation token and a second head."""

    family: ClassVar[str] = "deit"
    tasks: ClassVar[tuple[str, ...]] = ("classification",)
    title: ClassVar[str] = "DeiT"
    # Facebook's releases as timm hosts them (timm/<tag>); the figure: ImageNet-1k val top-1 from DeiT's README.
    # A revision is the "Add model" commit, which added model.safetensors, where the Hugging Face pages show its
    # full id (not found for deit_tiny and deit_base_distilled); sha256 not yet checked
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        Release(tag, f"timm/{tag}", "timm", "model.safetensors", revision=revision, licence="apache-2.0",
                metric={"top1": top1}, dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, IMAGENET))
        for tag, top1, revision in (
            ("deit_tiny_patch16_224.fb_in1k", 72.2, ""),
            ("deit_small_patch16_224.fb_in1k", 79.9, "38e0e3a79073772ea54733b87885d3d7f6348e8a"),
            ("deit_base_patch16_224.fb_in1k", 81.8, "4c8c236981c8902ea7af4e83b6fe0270812e03d4"),
            ("deit_tiny_distilled_patch16_224.fb_in1k", 74.5, "4decab5416aad52836ffd48b5b7e5cfb78641d8d"),
            ("deit_small_distilled_patch16_224.fb_in1k", 81.2, "4150668d0839f2da591b2fc5659764c796148243"),
            ("deit_base_distilled_patch16_224.fb_in1k", 83.4, ""),
        )
    )}
    description: ClassVar[str] = ("DeiT distilled (Touvron et al., ICML 2021): a ViT with a distillation token and "
                                  "head, trained against a teacher")
    paper: ClassVar[Paper | None] = Paper(
        "Training data-efficient image transformers & distillation through attention",
        "Touvron, Hugo and others", "ICML", 2021, "2012.12877")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.class_token or self.global_pool != "token":
            raise ValueError("a distilled DeiT reads its class and distillation tokens: it needs class_token=True "
                             f"and global_pool='token' (got class_token={self.class_token}, "
                             f"global_pool={self.global_pool!r})")

    @property
    def num_prefix_tokens(self) -> int:
        """[class; distillation]: the position table has room for both from the start."""
        return 2

    def build(self) -> DistilledVisionTransformer:
        return DistilledVisionTransformer(self)


@dataclass(frozen=True)
class DistilledOutput:
    """What a distilled DeiT returns in training: the two heads' logits, each (B, K)."""

    logits: torch.Tensor  # (B, K) the class token's head: learns from the true label
    dist_logits: torch.Tensor  # (B, K) the distillation token's head: learns from the teacher

    def averaged(self) -> torch.Tensor:
        """(B, K), the mean of the two heads: what the model returns in evaluation."""
        return (self.logits + self.dist_logits) / 2


class DistilledVisionTransformer(VisionTransformer):
    """images (B, C, H, W) -> DistilledOutput (two (B, K) logits) in training; their average (B, K) in eval."""

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)  # builds the position table for config.num_prefix_tokens = 2
        D = config.dim
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D))
        self.head_dist = nn.Linear(D, config.num_classes) if config.num_classes > 0 else nn.Identity()
        nn.init.trunc_normal_(self.dist_token, std=0.02)
        if isinstance(self.head_dist, nn.Linear):
            nn.init.trunc_normal_(self.head_dist.weight, std=0.02)
            nn.init.zeros_(self.head_dist.bias)
        # False makes training-mode forward return the average too (e.g. fine-tuning without a teacher)
        self.distilled_training = True

    def prefix_tokens(self, B: int) -> torch.Tensor:
        """(B, 2, D): the class token, then the distillation token."""
        return torch.cat([self.cls_token, self.dist_token], dim=1).expand(B, -1, -1)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor | DistilledOutput:
        """tokens (B, 2 + N, D) -> DistilledOutput (two (B, K)) in training, their mean (B, K) otherwise;
        pre_logits: the two tokens' features averaged (B, D). Only x[:, :2] is read: (B, 2, D) will do."""
        cls_features, dist_features = self.head_drop(x[:, 0]), self.head_drop(x[:, 1])
        if pre_logits:
            return (cls_features + dist_features) / 2
        output = DistilledOutput(self.head(cls_features), self.head_dist(dist_features))
        if self.training and self.distilled_training:
            return output
        return output.averaged()

    def reset_classifier(self, num_classes: int) -> None:
        super().reset_classifier(num_classes)
        self.head_dist = nn.Linear(self.config.dim, num_classes) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            nn.init.trunc_normal_(self.head_dist.weight, std=0.02)
            nn.init.zeros_(self.head_dist.bias)

    # ---- hooks (see VisionTransformer): the distillation token is an embedding; its head goes with the head ----
    def no_weight_decay(self) -> set[str]:
        return super().no_weight_decay() | {"dist_token"}

    def layer_id(self, name: str) -> int:
        return 0 if name == "dist_token" else super().layer_id(name)

    def head_names(self) -> tuple[str, ...]:
        return ("head", "head_dist")


# ---- presets: timm's names. DeiT-Ti/S/B are ViT-Ti/S/B (DeiT Table 1); ⚗ adds the distillation token ----------
@register_model
def deit_tiny_patch16_224() -> ViTConfig:
    return ViTConfig(patch_size=16, dim=192, depth=12, num_heads=3)


@register_model
def deit_small_patch16_224() -> ViTConfig:
    return ViTConfig(patch_size=16, dim=384, depth=12, num_heads=6)


@register_model
def deit_base_patch16_224() -> ViTConfig:
    return ViTConfig(patch_size=16, dim=768, depth=12, num_heads=12)


@register_model
def deit_tiny_distilled_patch16_224() -> DeiTConfig:
    return DeiTConfig(patch_size=16, dim=192, depth=12, num_heads=3)


@register_model
def deit_small_distilled_patch16_224() -> DeiTConfig:
    return DeiTConfig(patch_size=16, dim=384, depth=12, num_heads=6)


@register_model
def deit_base_distilled_patch16_224() -> DeiTConfig:
    return DeiTConfig(patch_size=16, dim=768, depth=12, num_heads=12)


# ---- 28×28 grayscale: the student of benchmarks/deit_distillation.py, and its twin without the token ---------
@register_model
def deit_mini_patch7_28() -> ViTConfig:
    """= vit_mini_patch7_28 (16 tokens of 7×7 pixels, 128 wide, 6 deep, 4 heads), under DeiT's name."""
    return _vit28(7, 128, 6, 4)


@register_model
def deit_mini_distilled_patch7_28() -> DeiTConfig:
    """deit_mini_patch7_28 plus the distillation token and its head."""
    return DeiTConfig(**dataclasses.asdict(_vit28(7, 128, 6, 4)))
