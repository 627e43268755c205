"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

    z0 = [x_class; x_p¹E; …; x_pᴺE] + E_pos          eq. 1   patches, linear projection, class token, positions
    z'ℓ = MSA(LN(zℓ₋₁)) + zℓ₋₁                        eq. 2   }
    zℓ = MLP(LN(z'ℓ)) + z'ℓ                          eq. 3   } `EncoderBlock`, repeated `depth` times
    y = head(LN(z_L⁰))                               eq. 4   classify from the class token (or the mean token)

Glossary: B batch, C channels, H, W pixels, h, w patch grid, N = h·w patch tokens, P prefix (class) tokens,
D width (`dim`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch
from torch import nn

from ..layers.blocks import EncoderBlock
from ..layers.patch_embed import ConvStemPatchEmbed, PatchEmbed
from ..layers.pos_embed import learned_pos_embed, resample_pos_embed, sincos_pos_embed
from .adapt import adapt_input_channels, fresh_classifiers
from .family import ExportSpec, Model, ModelFamily, Paper, Release
from .labels import imagenet_1k
from .registry import register_config, register_model
from .release_inputs import INCEPTION, timm_eval


@register_config
@dataclass(frozen=True)
class ViTConfig(ModelFamily):
    family: ClassVar[str] = "vit"
    tasks: ClassVar[tuple[str, ...]] = ("classification",)
    title: ClassVar[str] = "ViT"
    # timm's releases (Hugging Face timm/<tag>, safetensors); the figure: ImageNet-1k val top-1 at 224 from timm's
    # results-imagenet.csv. Revisions are pinned where the file's commit could be verified; sha256 not yet checked
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        Release("vit_tiny_patch16_224.augreg_in21k_ft_in1k", "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k",
                "timm", "model.safetensors", licence="apache-2.0", metric={"top1": 75.452},
                dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, INCEPTION)),
        Release("vit_small_patch16_224.augreg_in21k_ft_in1k", "timm/vit_small_patch16_224.augreg_in21k_ft_in1k",
                "timm", "model.safetensors", licence="apache-2.0", metric={"top1": 81.402},
                dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, INCEPTION)),
        Release("vit_base_patch16_224.augreg2_in21k_ft_in1k", "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
                "timm", "model.safetensors", revision="3feba41e737e1b28af8e1fd7dca8eed073385972",
                licence="apache-2.0", metric={"top1": 85.108}, dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, INCEPTION)),
        Release("vit_base_patch16_224.augreg_in21k_ft_in1k", "timm/vit_base_patch16_224.augreg_in21k_ft_in1k",
                "timm", "model.safetensors", revision="b5b38b8f7dd93ce67d12e356a8771556b95c8cf9",
                licence="apache-2.0", metric={"top1": 84.534}, dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, INCEPTION)),
        Release("vit_large_patch16_224.augreg_in21k_ft_in1k", "timm/vit_large_patch16_224.augreg_in21k_ft_in1k",
                "timm", "model.safetensors", licence="apache-2.0", metric={"top1": 85.856},
                dataset="ImageNet-1k val", labels=imagenet_1k,
                preprocessing=timm_eval(224, 0.9, INCEPTION)),
    )}
    description: ClassVar[str] = ("ViT, the Vision Transformer (Dosovitskiy et al., ICLR 2021): image patches as "
                                  "tokens through a pre-norm Transformer encoder, classified from the class token")
    paper: ClassVar[Paper | None] = Paper(
        "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale",
        "Dosovitskiy, Alexey and others", "ICLR", 2021, "2010.11929")

    img_size: int | tuple[int, int] = 224  # (H, W) the model is built for; ints mean square
    patch_size: int | tuple[int, int] = 16  # (ph, pw)
    in_chans: int = 3
    num_classes: int = 1000  # 0: no head, the model returns pooled features (B, D)
    global_pool: str = "token"  # "token": classify from the class token; "avg": from the mean patch token
    dim: int = 768  # token width D
    depth: int = 12  # number of encoder blocks
    num_heads: int = 12
    mlp_ratio: float = 4.0  # MLP hidden width = mlp_ratio · D
    qkv_bias: bool = True
    class_token: bool = True
    pos_embed: str = "learn"  # "learn" | "sincos" | "none"
    patch_proj: str = "conv"  # "conv" | "linear": same map, two implementations
    stem_channels: tuple[int, ...] = ()  # () plain patches; else the hybrid: a conv stem of stride-2 stages this wide
    init_values: float | None = None  # layer scale initial value; None: no layer scale
    drop_rate: float = 0.0  # dropout on the pooled features before the head
    pos_drop_rate: float = 0.0  # dropout on the embedded tokens (ViT paper appendix B.1)
    proj_drop_rate: float = 0.0  # dropout after the attention output projection and in the MLP
    attn_drop_rate: float = 0.0  # dropout on the attention probabilities
    drop_path_rate: float = 0.0  # stochastic depth, rising linearly from 0 to this over the blocks
    norm_eps: float = 1e-6
    fused_attn: bool = True  # scaled_dot_product_attention; False: the explicit formula
    dynamic_img_size: bool = False  # accept other image sizes, resampling the position embedding on the fly

    def __post_init__(self) -> None:
        object.__setattr__(self, "stem_channels", tuple(int(c) for c in self.stem_channels))
        if self.patch_proj not in ("conv", "linear"):
            raise ValueError(f"patch_proj must be 'conv' or 'linear', got {self.patch_proj!r}; for the hybrid "
                             f"(a convolutional stem) give stem_channels, e.g. stem_channels=(32, 64, 128)")
        if self.stem_channels and self.patch_proj != "conv":
            raise ValueError(f"patch_proj={self.patch_proj!r} with stem_channels={self.stem_channels}: the stem ends "
                             f"in its own 1×1 convolution; use patch_proj='conv' with a stem, or stem_channels=() for "
                             f"linear patches")
        if any(c <= 0 for c in self.stem_channels):
            raise ValueError(f"stem_channels must be positive widths, got {self.stem_channels}")
        if self.global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', got {self.global_pool!r}")
        if self.global_pool == "token" and not self.class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")
        if self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} is not divisible by num_heads={self.num_heads}")

    @property
    def num_prefix_tokens(self) -> int:
        """P, the learned tokens before the patches: the class token, if any (a distilled DeiT adds a second)."""
        return 1 if self.class_token else 0

    def build(self) -> VisionTransformer:
        return VisionTransformer(self)


class VisionTransformer(Model):
    """images (B, C, H, W) -> logits (B, num_classes), or pooled features (B, D) when num_classes=0."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        D = config.dim
        self.num_classes = config.num_classes
        self.global_pool = config.global_pool
        self.num_prefix_tokens = config.num_prefix_tokens  # known before the position table is built
        self.dynamic_img_size = config.dynamic_img_size

        # eq. 1: patches -> linear projection -> [class token; patch tokens] + position embeddings
        if config.stem_channels:  # the hybrid (§3.1): a convolutional stem, then the projection of each grid cell
            self.patch_embed = ConvStemPatchEmbed(
                config.img_size, config.patch_size, config.in_chans, D, tuple(config.stem_channels),
                strict_img_size=not config.dynamic_img_size,
            )
        else:
            self.patch_embed = PatchEmbed(
                config.img_size, config.patch_size, config.in_chans, D,
                projection=config.patch_proj, strict_img_size=not config.dynamic_img_size,
            )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        grid = self.patch_embed.grid_size
        if config.pos_embed == "learn":
            self.pos_embed = learned_pos_embed(grid, D, self.num_prefix_tokens)
        elif config.pos_embed == "sincos":
            self.register_buffer("pos_embed", sincos_pos_embed(grid, D, self.num_prefix_tokens), persistent=False)
        elif config.pos_embed == "none":
            self.pos_embed = None
        else:
            raise ValueError(f"pos_embed must be 'learn', 'sincos' or 'none', got {config.pos_embed!r}")
        self.pos_drop = nn.Dropout(config.pos_drop_rate)

        # eq. 2–3: the encoder; stochastic depth grows linearly with depth (Huang et al. 2016)
        drop_path_rates = [config.drop_path_rate * i / max(config.depth - 1, 1) for i in range(config.depth)]
        self.blocks = nn.ModuleList(
            EncoderBlock(
                D, config.num_heads, config.mlp_ratio, config.qkv_bias,
                proj_drop=config.proj_drop_rate, attn_drop=config.attn_drop_rate, drop_path=rate,
                init_values=config.init_values, norm_layer=partial(nn.LayerNorm, eps=config.norm_eps),
                fused_attn=config.fused_attn,
            )
            for rate in drop_path_rates
        )

        # eq. 4: final norm, pooling, head
        self.norm = nn.LayerNorm(D, eps=config.norm_eps)
        self.head_drop = nn.Dropout(config.drop_rate)
        self.head = nn.Linear(D, config.num_classes) if config.num_classes > 0 else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    @property
    def num_features(self) -> int:
        return self.config.dim

    # ---- eq. 1 -------------------------------------------------------------------------------------------
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> tokens (B, P + N, D): patch tokens, class token prepended, positions added."""
        B, _, H, W = images.shape
        x = self.patch_embed(images)  # (B, N, D)
        if self.num_prefix_tokens:
            x = torch.cat([self.prefix_tokens(B), x], dim=1)  # (B, P + N, D)
        if self.pos_embed is not None:
            x = x + self.pos_embed_for(self.patch_embed.grid_for(H, W))
        return self.pos_drop(x)

    def prefix_tokens(self, B: int) -> torch.Tensor:
        """The learned tokens put before the patches, (B, P, D): here the class token (DeiT adds a second)."""
        return self.cls_token.expand(B, -1, -1)

    def pos_embed_for(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position embedding (1, P + h·w, D) for a patch grid, resampled if it is not the built one."""
        if grid == self.patch_embed.grid_size:
            return self.pos_embed
        if self.config.pos_embed == "sincos":
            return sincos_pos_embed(grid, self.config.dim, self.num_prefix_tokens).to(self.pos_embed)
        return resample_pos_embed(self.pos_embed, grid, self.patch_embed.grid_size, self.num_prefix_tokens)

    # ---- as a graph, for the runtimes ----------------------------------------------------------------------
    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        """images (B, C, H, W) -> logits (B, K); the batch free (the position table fixes the image size).
        onnxruntime's transformer optimizer knows this graph as "vit" (GELU fused with its bias), and its attention
        becomes one MultiHeadAttention node (runtime/export.py)."""
        example = example or (torch.randn(2, self.config.in_chans, *self.patch_embed.img_size),)
        return ExportSpec("classifier", lambda model, images: (model(images),), ("images",), ("logits",), example,
                          ({0: "batch"},), onnx_fusion={"model_type": "vit", "num_heads": self.config.num_heads,
                                                        "hidden_size": self.config.dim})

    # ---- eq. 2–4 -----------------------------------------------------------------------------------------
    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> normalised tokens (B, P + N, D)."""
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """tokens (B, P + N, D) -> logits (B, num_classes), or the pooled features (B, D) if pre_logits.

        With token pooling only the class token x[:, 0] is read, so the prefix tokens alone (B, P, D) will do: a
        subclass's head must keep to that (reading x[:, :P] only), since the inference path (runtime/fast.py) hands
        it just those rows of the last block."""
        if self.global_pool == "token":
            pooled = x[:, 0]  # the class token
        else:
            pooled = x[:, self.num_prefix_tokens:].mean(dim=1)  # global average pooling over patch tokens
        pooled = self.head_drop(pooled)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> logits (B, num_classes) (or pooled features (B, D) when num_classes=0)."""
        return self.forward_head(self.forward_features(images))

    # ---- training and inference that compute only what the head reads -----------------------------------------
    def forward_lean(self, images: torch.Tensor) -> torch.Tensor:
        """forward(images), with the last block making only the P prefix rows (B, P, D) that forward_head reads
        (eq. 4 takes z_L⁰): the same logits and the same gradients for every parameter, for ~0.84/depth less work
        (7 % at depth 12, 14 % at depth 6). Only where `reads_prefix_only`; `lean_exact` says when it is the same
        run."""
        x = self.embed(images)  # (B, P + N, D)
        *body, last = self.blocks
        for block in body:
            x = block(x)
        x = last.forward_first(x, self.num_prefix_tokens)  # (B, P, D): the class (and distillation) token
        return self.forward_head(self.norm(x))

    @property
    def reads_prefix_only(self) -> bool:
        """Whether forward's output depends on the last block's P prefix rows alone, so that forward_lean gives
        it: the head pools the class token, forward and forward_features are VisionTransformer's own (a subclass
        may read more of the tokens), and the last block is a plain EncoderBlock."""
        if self.global_pool != "token" or not len(self.blocks):
            return False
        own = type(self)
        return (own.forward is VisionTransformer.forward and own.forward_features is VisionTransformer.forward_features
                and type(self.blocks[-1]) is EncoderBlock)

    @property
    def lean_exact(self) -> bool:
        """Whether forward_lean is forward draw for draw, now: it reads the prefix rows only, and the last block
        draws no dropout masks (in training, over P rows instead of P + N they would be other draws: the same
        distribution, but not the same run)."""
        if not self.reads_prefix_only:
            return False
        last = self.blocks[-1]
        return not (last.training and (last.attn.attn_drop or any(
            m.p for m in last.modules() if isinstance(m, nn.Dropout))))

    # ---- feature extraction --------------------------------------------------------------------------------
    def get_intermediate_layers(
        self,
        images: torch.Tensor,
        n: int | Sequence[int] = 1,
        reshape: bool = False,
        return_prefix_tokens: bool = False,
        norm: bool = False,
    ) -> tuple[torch.Tensor, ...] | tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """Outputs of encoder blocks, for dense prediction and probing (the interface of timm and DINOv2).

        n: the last n blocks, or a list of block indices (negative counts from the end).
        Each output is the patch tokens (B, N, D), or (B, D, h, w) with reshape=True; with
        return_prefix_tokens=True a pair (patch tokens, prefix tokens (B, P, D)). norm=True applies the final
        LayerNorm to each.
        """
        depth = len(self.blocks)
        indices = range(depth - n, depth) if isinstance(n, int) else [i % depth for i in n]
        wanted = set(indices)
        if len(wanted) != len(list(indices)) or (isinstance(n, int) and not 0 < n <= depth):
            raise ValueError(f"n must be in 1..{depth} or a list of distinct block indices, got {n!r}")
        _, _, H, W = images.shape
        h, w = self.patch_embed.grid_for(H, W)
        x = self.embed(images)
        collected = {}
        for i, block in enumerate(self.blocks[: max(wanted) + 1]):
            x = block(x)
            if i in wanted:
                collected[i] = self.norm(x) if norm else x
        outputs = []
        for i in indices:
            tokens = collected[i]
            prefix, patches = tokens[:, : self.num_prefix_tokens], tokens[:, self.num_prefix_tokens:]
            if reshape:
                B, N, D = patches.shape
                patches = patches.reshape(B, h, w, D).permute(0, 3, 1, 2)  # (B, D, h, w)
            outputs.append((patches, prefix) if return_prefix_tokens else patches)
        return tuple(outputs)

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh head for `num_classes` classes (the fine-tuning case); 0 removes it."""
        self.num_classes = num_classes
        self.head = nn.Linear(self.config.dim, num_classes) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            nn.init.trunc_normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)

    # ---- hooks: the model names its own parameter groups and adapts checkpoints (engine/optim, interop) -----
    def no_weight_decay(self) -> set[str]:
        """Parameters that never decay, besides the ≤1-d ones: the position embedding and the class token are
        embeddings, not weights; decaying them towards zero only hurts (as in timm, DeiT)."""
        return {"pos_embed", "cls_token"}

    @property
    def num_layer_groups(self) -> int:
        """How many layer ids `layer_id` hands out: the embeddings, each block, the final norm and head."""
        return len(self.blocks) + 2

    def layer_id(self, name: str) -> int:
        """The depth of parameter `name` for layer-wise lr decay: 0 for the embeddings (patch projection, class
        token, positions), i + 1 for block i, depth + 1 for everything after the blocks (final norm, head)."""
        parts = name.split(".")
        if parts[0] == "blocks":
            return int(parts[1]) + 1
        if parts[0] in ("patch_embed", "cls_token", "pos_embed"):
            return 0
        return len(self.blocks) + 1

    def adapt_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A state dict changed where fine-tuning expects it to differ from this model, each with a warning: the
        position embedding resampled to this model's patch grid, the patch embedding adapted to another number of
        input channels, and a head for another class count (or one this model lacks) given way to this model's
        fresh head. Whatever else differs is left for the loader to report."""
        state = dict(state)
        target = self.state_dict()
        if "pos_embed" in state and "pos_embed" in target and state["pos_embed"].shape != target["pos_embed"].shape:
            P = self.num_prefix_tokens
            old_n = state["pos_embed"].shape[1] - P
            side = math.isqrt(old_n)
            old_grid = (side, side) if side * side == old_n else None
            state["pos_embed"] = resample_pos_embed(state["pos_embed"], self.patch_embed.grid_size, old_grid,
                                                    num_prefix_tokens=P)
        state = adapt_input_channels(state, target, "patch_embed.proj.weight")
        # another class count: the heads' rows differ, their input width does not; a head this model lacks goes
        heads = [f"{head}.{kind}" for head in self.head_names() for kind in ("weight", "bias")]
        if "head.weight" in state and "head.weight" not in target:
            warnings.warn(f"the checkpoint's head has {state['head.weight'].shape[0]} classes, the model 0 (none): "
                          f"keeping the body", stacklevel=2)
            return {k: v for k, v in state.items() if k not in heads}
        if "head.weight" in state and state["head.weight"].shape[0] != target["head.weight"].shape[0]:
            state = fresh_classifiers({k: v for k, v in state.items() if k not in heads or k in target}, target,
                                      heads, state["head.weight"].shape[0], self.num_classes, "head")
        return state

    def head_names(self) -> tuple[str, ...]:
        """The classifier modules, replaced together when a checkpoint's class count differs."""
        return ("head",)

    def classifier_keys(self) -> tuple[str, ...]:
        target = self.state_dict()
        return tuple(key for head in self.head_names() for kind in ("weight", "bias")
                     if (key := f"{head}.{kind}") in target)


# ---- presets: timm's names and sizes (ViT paper Table 1; Ti and S from DeiT) --------------------------------
def _vit(patch: int, dim: int, depth: int, heads: int, img: int = 224, **kw) -> ViTConfig:
    return ViTConfig(img_size=img, patch_size=patch, dim=dim, depth=depth, num_heads=heads, **kw)


@register_model
def vit_tiny_patch16_224() -> ViTConfig:
    return _vit(16, 192, 12, 3)


@register_model
def vit_small_patch16_224() -> ViTConfig:
    return _vit(16, 384, 12, 6)


@register_model
def vit_small_patch32_224() -> ViTConfig:
    return _vit(32, 384, 12, 6)


@register_model
def vit_base_patch16_224() -> ViTConfig:
    return _vit(16, 768, 12, 12)


@register_model
def vit_base_patch32_224() -> ViTConfig:
    return _vit(32, 768, 12, 12)


@register_model
def vit_base_patch16_384() -> ViTConfig:
    return _vit(16, 768, 12, 12, img=384)


@register_model
def vit_large_patch16_224() -> ViTConfig:
    return _vit(16, 1024, 24, 16)


@register_model
def vit_large_patch16_384() -> ViTConfig:
    return _vit(16, 1024, 24, 16, img=384)


@register_model
def vit_large_patch32_224() -> ViTConfig:
    return _vit(32, 1024, 24, 16)


@register_model
def vit_huge_patch14_224() -> ViTConfig:
    return _vit(14, 1280, 32, 16)


# ---- small-image models for 28×28 grayscale (Fashion-MNIST) -------------------------------------------------
def _vit28(patch: int, dim: int, depth: int, heads: int, **kw) -> ViTConfig:
    return ViTConfig(img_size=28, patch_size=patch, in_chans=1, num_classes=10, dim=dim, depth=depth,
                     num_heads=heads, **kw)


@register_model
def vit_tiny_patch4_28() -> ViTConfig:
    """7×7 = 49 patch tokens of 4×4 pixels, 192 wide, 6 deep."""
    return _vit28(4, 192, 6, 3)


@register_model
def vit_tiny_patch7_28() -> ViTConfig:
    """4×4 = 16 patch tokens of 7×7 pixels, 192 wide, 6 deep: a third of the tokens of patch4."""
    return _vit28(7, 192, 6, 3)


@register_model
def vit_mini_patch7_28() -> ViTConfig:
    """16 patch tokens of 7×7 pixels, 128 wide, 6 deep, 4 heads: the best plain-patch ViT per second of CPU
    training (benchmarks/fashion_mnist_recipe.py)."""
    return _vit28(7, 128, 6, 4)


# Hybrids (ViT paper §3.1): a three-stage convolutional stem (28 → 14 → 7 → 4) makes the same 4×4 grid of tokens
# as 7×7 patches, at a few percent of the transformer's cost, and learns much faster on small data.
STEM_28 = (32, 64, 128)


@register_model
def vit_mini_convstem_28() -> ViTConfig:
    """vit_mini_patch7_28 with a convolutional stem: the default Fashion-MNIST model."""
    return _vit28(7, 128, 6, 4, stem_channels=STEM_28)


@register_model
def vit_tiny_convstem_28() -> ViTConfig:
    """vit_tiny_patch7_28 (192 wide) with the convolutional stem."""
    return _vit28(7, 192, 6, 3, stem_channels=STEM_28)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


__all__ = ["ViTConfig", "VisionTransformer", "count_parameters"]
