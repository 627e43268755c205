"""SETR (Zheng et al. 2021, "Rethinking Semantic Segmentation from a Sequence-to-Sequence Perspective with
Transformers"): a plain ViT encodes the image as a sequence of patch tokens, a decoder turns the token grid back
into a class map.

    z = ViT^L(patches(x) + E_pos)          §3.1  L blocks over the (H/16)·(W/16) tokens, no downsampling
    Z = reshape(LN(z_L))                    §3.2  the tokens as a (D, H/16, W/16) map
    Naive:  logits = up16(conv1×1(ReLU(BN(conv1×1(Z)))))       two layers, one upsampling
    PUP:    4 × [conv3×3 → BN → ReLU → up2], classifier         progressive upsampling (log2 p stages for patches p)
    MLA:    taps Z_6, Z_12, Z_18, Z_24 → conv1×1 → top-down sums → conv3×3 → up4 → concat → classifier

Auxiliary heads on intermediate layers help training (§4.1, weight 0.4). The layer names are the official code's
(fudan-zvg/SETR: `decode_head.conv_0`, `decode_head.syncbn_fc_0`, `decode_head.mlahead.head2`,
`auxiliary_head.{i}`), so its checkpoints map on; the MLA neck, inside the official backbone
(`backbone.mla`, `backbone.norm_0..3`), is `neck` here. As in the official code the encoder has no final
LayerNorm (each Naive/PUP head has its own, the MLA neck one per tap) and the MLA encoder has no class token (the
official one drops it before the blocks, which is the same computation). Two choices are the official code's
where the paper is silent: the MLA head upsamples by 4 with `align_corners=True` and classifies with a 3×3
convolution. Bilinear upsampling commutes with a 1×1 convolution (its weights sum to one), so "classify, then
upsample" is "upsample, then classify", only cheaper.

Glossary: B batch, H × W image, h × w token grid (H/p × W/p), D encoder width, K classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .adapt import fresh_classifiers
from .family import ExportSpec, Model, ModelFamily, Paper, Release
from .labels import ade20k_150, cityscapes_19
from .registry import get_config, register_config, register_model
from .release_inputs import mmseg_test


@dataclass
class SegmentationOutput:
    """logits (B, K, H, W) at the input's size; aux_logits: each auxiliary head's (B, K, H, W), in training only."""

    logits: torch.Tensor
    aux_logits: list[torch.Tensor] = field(default_factory=list)


def resize(x: torch.Tensor, size: tuple[int, int], align_corners: bool = False) -> torch.Tensor:
    return x if tuple(x.shape[-2:]) == tuple(size) else F.interpolate(x, size=size, mode="bilinear",
                                                                      align_corners=align_corners)


def tokens_to_map(tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, h·w, D) -> (B, D, h, w)."""
    return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], *grid)


class SETRUpHead(nn.Module):
    """The Naive and PUP decoders (the official VisionTransformerUpHead): LN on the tokens, `num_convs` ×
    [conv → BN → ReLU], ×`up_scale` bilinear upsampling between them (and after the last with `upsample_last`),
    a 1×1 classifier, then bilinear resizing to the input.

    Naive: num_convs=1, kernel 1. PUP: num_convs=4, kernel 3, up_scale 2 (the fourth ×2 comes after the classifier,
    as the final resize). PUP's auxiliary heads: num_convs=1, kernel 3, up_scale 4, upsample_last.
    """

    def __init__(self, dim: int, num_classes: int, channels: int = 256, num_convs: int = 1, kernel_size: int = 1,
                 up_scale: int = 2, upsample_last: bool = False) -> None:
        super().__init__()
        self.num_convs, self.up_scale, self.upsample_last = num_convs, up_scale, upsample_last
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        for i in range(num_convs):
            setattr(self, f"conv_{i}", nn.Conv2d(dim if i == 0 else channels, channels, kernel_size,
                                                 padding=kernel_size // 2))
            setattr(self, f"syncbn_fc_{i}", nn.BatchNorm2d(channels))
        setattr(self, f"conv_{num_convs}", nn.Conv2d(channels, num_classes, 1))

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int], size: tuple[int, int]) -> torch.Tensor:
        """tokens (B, h·w, D) patch tokens -> logits (B, K, *size)."""
        x = tokens_to_map(self.norm(tokens), grid)
        for i in range(self.num_convs):
            x = F.relu(getattr(self, f"syncbn_fc_{i}")(getattr(self, f"conv_{i}")(x)))
            if i < self.num_convs - 1 or self.upsample_last:
                x = F.interpolate(x, scale_factor=self.up_scale, mode="bilinear", align_corners=False)
        return resize(getattr(self, f"conv_{self.num_convs}")(x), size)


def conv_bn_relu(cin: int, cout: int, kernel_size: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel_size, padding=kernel_size // 2, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class MLA(nn.Module):
    """Multi-level feature aggregation (§3.2, Fig. 1c): each tap to `channels` by a 1×1 conv, the streams summed
    top-down from the deepest (p5) to the shallowest (p2), then a 3×3 conv per stream."""

    def __init__(self, dim: int, channels: int = 256) -> None:
        super().__init__()
        for level in (2, 3, 4, 5):
            setattr(self, f"mla_p{level}_1x1", conv_bn_relu(dim, channels, 1))
            setattr(self, f"mla_p{level}", conv_bn_relu(channels, channels, 3))

    def forward(self, maps: list[torch.Tensor]) -> list[torch.Tensor]:
        """4 maps (B, D, h, w), shallowest first -> 4 maps (B, channels, h, w): p2 (all four summed) … p5."""
        projected = [getattr(self, f"mla_p{level}_1x1")(x) for level, x in zip((2, 3, 4, 5), maps)]
        summed = [projected[3]]
        for x in reversed(projected[:3]):  # p4 + p5, then p3 + (p4 + p5), then p2 + …
            summed.insert(0, summed[0] + x)
        return [getattr(self, f"mla_p{level}")(x) for level, x in zip((2, 3, 4, 5), summed)]


class MLANeck(nn.Module):
    """A LayerNorm per tap (the official backbone.norm_0..3), then MLA."""

    def __init__(self, dim: int, channels: int = 256) -> None:
        super().__init__()
        for i in range(4):
            setattr(self, f"norm_{i}", nn.LayerNorm(dim, eps=1e-6))
        self.mla = MLA(dim, channels)

    def forward(self, taps: list[torch.Tensor], grid: tuple[int, int]) -> list[torch.Tensor]:
        """4 × tokens (B, h·w, D) -> 4 × (B, channels, h, w)."""
        return self.mla([tokens_to_map(getattr(self, f"norm_{i}")(t), grid) for i, t in enumerate(taps)])


class MLAStreams(nn.Module):
    """The MLA head's four streams: two 3×3 conv → BN → ReLU each (the official MLAHead, `head2` … `head5`)."""

    def __init__(self, channels: int = 256, head_channels: int = 128) -> None:
        super().__init__()
        for level in (2, 3, 4, 5):
            setattr(self, f"head{level}", nn.Sequential(*conv_bn_relu(channels, head_channels, 3),
                                                        *conv_bn_relu(head_channels, head_channels, 3)))

    def forward(self, maps: list[torch.Tensor]) -> torch.Tensor:
        """4 × (B, channels, h, w) -> (B, 4·head_channels, 4h, 4w)."""
        return torch.cat([F.interpolate(getattr(self, f"head{level}")(x), scale_factor=4, mode="bilinear",
                                        align_corners=True) for level, x in zip((2, 3, 4, 5), maps)], 1)


class MLAHead(nn.Module):
    """The MLA decoder: the streams upsampled ×4 and concatenated, a 3×3 classifier, resized to the input."""

    def __init__(self, num_classes: int, channels: int = 256, head_channels: int = 128) -> None:
        super().__init__()
        self.mlahead = MLAStreams(channels, head_channels)
        self.cls = nn.Conv2d(4 * head_channels, num_classes, 3, padding=1)

    def forward(self, maps: list[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        return resize(self.cls(self.mlahead(maps)), size)


class MLAAuxHead(nn.Module):
    """An MLA auxiliary head: a 1×1 classifier (no bias) on one stream, resized to the input."""

    def __init__(self, num_classes: int, channels: int = 256) -> None:
        super().__init__()
        self.aux = nn.Conv2d(channels, num_classes, 1, bias=False)

    def forward(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        return resize(self.aux(x), size)


class SETR(Model):
    """images (B, C, H, W) -> SegmentationOutput: logits (B, K, H, W), and in training the auxiliary logits.

    backbone: a vitlab VisionTransformer (no head; its final norm unused, as the official code has none).
    decoder: "naive", "pup" or "mla". aux_layers: the blocks the auxiliary heads read (Naive and PUP); mla_layers:
    the four blocks the MLA neck taps.
    """

    def __init__(self, backbone: nn.Module, decoder: str, num_classes: int, aux_layers: tuple[int, ...] = (),
                 mla_layers: tuple[int, ...] = (), channels: int = 256, mla_channels: int = 256,
                 mla_head_channels: int = 128, aux: bool = True) -> None:
        super().__init__()
        self.decoder, self.aux_layers, self.mla_layers = decoder, tuple(aux_layers), tuple(mla_layers)
        self.num_classes = num_classes
        self.backbone = backbone
        self.backbone.norm = nn.Identity()  # the official encoder has no final norm; the heads norm their input
        dim = backbone.config.dim
        if decoder == "naive":
            self.decode_head = SETRUpHead(dim, num_classes, channels, num_convs=1, kernel_size=1)
            make_aux = lambda: SETRUpHead(dim, num_classes, channels, num_convs=1, kernel_size=1)  # noqa: E731
        elif decoder == "pup":
            patch = backbone.patch_embed.patch_size
            stages = int(math.log2(patch[0])) if patch[0] == patch[1] and patch[0] & (patch[0] - 1) == 0 else 0
            if stages < 1:
                raise ValueError(f"PUP doubles the token grid back to the image: it needs a square power-of-2 patch, "
                                 f"got {patch}")
            # the paper's four stages for 16-pixel patches: one 2× stage per halving of the patch
            self.decode_head = SETRUpHead(dim, num_classes, channels, num_convs=stages, kernel_size=3, up_scale=2)
            make_aux = lambda: SETRUpHead(dim, num_classes, channels, num_convs=1, kernel_size=3,  # noqa: E731
                                          up_scale=4, upsample_last=True)
        elif decoder == "mla":
            if len(self.mla_layers) != 4:
                raise ValueError(f"MLA taps four layers, got mla_layers={mla_layers}")
            self.neck = MLANeck(dim, mla_channels)
            self.decode_head = MLAHead(num_classes, mla_channels, mla_head_channels)
            make_aux = lambda: MLAAuxHead(num_classes, mla_channels)  # noqa: E731
            self.aux_layers = tuple(range(4)) if aux else ()  # the aux heads read the MLA streams
        else:
            raise ValueError(f"decoder must be 'naive', 'pup' or 'mla', got {decoder!r}")
        if not aux:
            self.aux_layers = ()
        self.auxiliary_head = nn.ModuleList(make_aux() for _ in self.aux_layers)

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        """images (B, 3, H, W) -> logits (B, K, H, W) in eval mode (no auxiliary heads); the batch free."""
        example = example or (torch.randn(2, 3, *self.backbone.patch_embed.img_size),)
        return ExportSpec("segmenter", lambda model, images: (model(images).logits,), ("images",), ("logits",),
                          example, ({0: "batch"},))

    def forward(self, images: torch.Tensor) -> SegmentationOutput:
        if images.ndim != 4:
            raise ValueError(f"expected images (B, C, H, W), got shape {tuple(images.shape)}")
        size = tuple(images.shape[-2:])
        grid = self.backbone.patch_embed.grid_for(*size)
        depth = len(self.backbone.blocks)
        with_aux = self.training and len(self.auxiliary_head) > 0
        if self.decoder == "mla":
            streams = self.neck(self.taps(images, self.mla_layers), grid)
            logits = self.decode_head(streams, size)
            aux = [head(streams[i], size) for i, head in zip(self.aux_layers, self.auxiliary_head)] if with_aux \
                else []
            return SegmentationOutput(logits, aux)
        layers = (depth - 1, *self.aux_layers) if with_aux else (depth - 1,)
        last, *taps = self.taps(images, layers)
        logits = self.decode_head(last, grid, size)
        aux = [head(tokens, grid, size) for tokens, head in zip(taps, self.auxiliary_head)]
        return SegmentationOutput(logits, aux)

    def taps(self, images: torch.Tensor, layers: tuple[int, ...]) -> list[torch.Tensor]:
        """The patch tokens (B, h·w, D) after each of `layers` (repeats allowed), one pass through the encoder."""
        depth = len(self.backbone.blocks)
        unique = sorted({i % depth for i in layers})
        outputs = dict(zip(unique, self.backbone.get_intermediate_layers(images, unique)))
        return [outputs[i % depth] for i in layers]

    def encoder_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A ViT state dict in vitlab's (timm's) names -> the one self.backbone loads: the classifier and final norm
        dropped, the position embedding resampled to the crop's grid, the class token dropped when this encoder
        has none (MLA). A masked autoencoder's decoder (MAE's keys: `decoder_*`, `mask_token`) is left out too: its
        encoder is a ViT."""
        state = {k: v for k, v in state.items()
                 if not k.startswith(("head.", "norm.", "fc_norm.", "head_dist.", "decoder_", "mask_token"))}
        if "cls_token" in state and self.backbone.num_prefix_tokens == 0:
            state.pop("cls_token")
            if "pos_embed" in state:
                tokens = state["pos_embed"].shape[1]
                if math.isqrt(tokens - 1) ** 2 == tokens - 1:  # a square grid after one class-token entry
                    state["pos_embed"] = state["pos_embed"][:, 1:]
        return self.backbone.adapt_checkpoint(state)

    def adapt_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A whole SETR's state dict changed where fine-tuning expects it to differ: the encoder's position
        embedding resampled to this model's crop, and classifiers for another class count (say, Cityscapes' 19)
        given way to this model's fresh ones, with a warning. Whatever else differs is left to the loader."""
        encoder = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
        state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
        state.update({f"backbone.{k}": v for k, v in self.backbone.adapt_checkpoint(encoder).items()})
        return fresh_classifiers(state, self.state_dict(), list(self.classifier_keys()))

    def classifier_keys(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.state_dict().items() if k.startswith(("decode_head.", "auxiliary_head."))
                     and v.ndim > 0 and v.shape[0] == self.num_classes)

    def no_weight_decay(self) -> set[str]:
        return {f"backbone.{name}" for name in self.backbone.no_weight_decay()}


def _drive(tag: str, file_id: str, metric: dict[str, float], overrides: dict, dataset: str) -> Release:
    """A SETR release: a Google Drive file of the official README, in the official code's layout, naming the classes
    of its data set where they are known (not Pascal Context's: models/labels.py says why), with the single-scale
    test pipeline of its data set's config (configs/_base_/datasets/: Cityscapes within 2049 × 1025, ADE20K within
    2048 × 512; Pascal Context's shorter side to 520, as the official Resize does for it)."""
    labels = {"ADE20K val": ade20k_150, "Cityscapes val": cityscapes_19}.get(dataset)
    preprocessing = {"Cityscapes val": mmseg_test(rescale=(2049, 1025)), "ADE20K val": mmseg_test(rescale=(2048, 512)),
                     "Pascal Context val": mmseg_test(resize=520)}[dataset]
    return Release(tag, f"https://drive.google.com/file/d/{file_id}/view?usp=sharing", "setr", licence="mit",
                   metric=metric, dataset=dataset, overrides=overrides, labels=labels, preprocessing=preprocessing,
                   note="Google Drive: needs a browser (a confirmation page stands before the file); the file's name "
                        "and hash are not published" + ("" if labels else "; its 60 classes' order is not known, so "
                                                        "it answers with class indices"))


@register_config
@dataclass(frozen=True)
class SETRConfig(ModelFamily):
    family: ClassVar[str] = "setr"
    tasks: ClassVar[tuple[str, ...]] = ("segmentation",)
    title: ClassVar[str] = "SETR"
    description: ClassVar[str] = ("SETR (Zheng et al., CVPR 2021): a ViT encoder and a convolutional decoder for "
                                  "semantic segmentation")
    paper: ClassVar[Paper | None] = Paper(
        "Rethinking Semantic Segmentation from a Sequence-to-Sequence Perspective with Transformers",
        "Zheng, Sixiao and others", "CVPR", 2021, "2012.15840")
    columns: ClassVar[str] = "image, patch, dim, depth, heads: its ViT encoder's"
    # The authors' releases (fudan-zvg/SETR's README at 1361561, MIT): mmcv checkpoints on Google Drive, one per
    # config in configs/SETR/, whose sizes the overrides give (ADE20K: 150 classes on 512 crops, Pascal Context: 60
    # on 480). The figure: single-scale mIoU on the val split (and multi-scale with flips where the README gives it)
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        _drive(f"setr_{decoder}_vit_large_patch16_384.{name}", file, metric, overrides, dataset)
        for decoder, name, file, metric, overrides, dataset in (
            ("naive", "cityscapes_80k", "1dplB4wceJhyVRQfZR5AWODywMN90CY0h", {"miou": 77.90}, {}, "Cityscapes val"),
            ("naive", "cityscapes_40k", "1f3b7I7IwKx-hcr16afjcxkAyXyeNQCAz", {"miou": 77.37}, {}, "Cityscapes val"),
            ("naive", "ade20k", "17ZlPBcJRKO3c3XoAeNutrExIETu23qKY", {"miou": 48.06, "miou_ms_flip": 48.80},
             {"num_classes": 150, "img_size": 512}, "ADE20K val"),
            ("naive", "pascal_context", "140T7-wQ3UOzHA0-6pjO3lik_5Vi5RvqJ", {"miou": 52.89, "miou_ms_flip": 53.61},
             {"num_classes": 60, "img_size": 480}, "Pascal Context val"),
            ("pup", "cityscapes_80k", "1469aYtEAuhT39BrHn0yOv1s71unF85JE", {"miou": 79.34}, {}, "Cityscapes val"),
            ("pup", "cityscapes_40k", "1DcZltdh6eHwmQ5BvCdHudJRgJUjPzS56", {"miou": 78.39}, {}, "Cityscapes val"),
            ("pup", "ade20k", "1hCeiz60ITgVPkWsrKwah8JnwM3G8VVL4", {"miou": 48.62, "miou_ms_flip": 50.09},
             {"num_classes": 150, "img_size": 512}, "ADE20K val"),
            ("pup", "pascal_context", "1kXZYyqjA96d2DTL-tRvQjixfDBIZFIyR", {"miou": 54.37, "miou_ms_flip": 55.27},
             {"num_classes": 60, "img_size": 480}, "Pascal Context val"),
            ("mla", "cityscapes_80k", "1ke6wcsCwP_J-p8sYriCZ3pC8G61bE0v_", {"miou": 77.24}, {}, "Cityscapes val"),
            ("mla", "cityscapes_40k", "18k26X-xM7BEQZUjzkvroeGV-6XwPgBqN", {"miou": 76.65}, {}, "Cityscapes val"),
            ("mla", "ade20k", "1Zcaut5LAKYibjyeCcD3m-aG-ETWW6uhA", {"miou": 47.79, "miou_ms_flip": 50.03},
             {"num_classes": 150, "img_size": 512}, "ADE20K val"),
            ("mla", "pascal_context", "1k5CwpKfpNUdAFWOuzwWz9PrRwiGS0Xu9", {"miou": 55.01, "miou_ms_flip": 55.83},
             {"num_classes": 60, "img_size": 480}, "Pascal Context val"),
            ("mla", "pascal_context_bs8", "1XvhUVIMcdcEYUYKudUcV99vOwhisYh61", {"miou": 54.39, "miou_ms_flip": 55.39},
             {"num_classes": 60, "img_size": 480}, "Pascal Context val"),
        )
    )} | {r.tag: r for r in (
        _drive("setr_naive_vit_base_patch16_384.cityscapes_80k", "1vOD1-PGNfuM9IUvwnm2CrAXsPkadoyW8", {"miou": 76.25},
               {}, "Cityscapes val"),
        _drive("setr_naive_vit_base_patch16_384.cityscapes_40k", "1kGzdSLCazsbgZe0Y1Lo6sNwv9s5V3CAp", {"miou": 75.54},
               {}, "Cityscapes val"),
    )}

    num_classes: int = 19
    decoder: str = "pup"  # "naive" | "pup" | "mla"
    encoder: str = "vit_large_patch16_384"  # any registered ViT
    img_size: int = 768  # the training crop; the encoder's position embedding is resampled to its grid
    patch_size: int | None = None  # the encoder's own unless given
    dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None
    in_chans: int = 3
    drop_path_rate: float = 0.0
    channels: int = 256  # the Naive and PUP heads' width
    mla_channels: int = 256
    mla_head_channels: int = 128
    aux: bool = True
    aux_layers: tuple[int, ...] | None = None  # None: the paper's, scaled to the depth
    mla_layers: tuple[int, ...] | None = None  # None: four evenly spaced, the last one last

    def __post_init__(self) -> None:
        if self.decoder not in ("naive", "pup", "mla"):
            raise ValueError(f"decoder must be 'naive', 'pup' or 'mla', got {self.decoder!r}")

    def encoder_config(self):
        overrides = {k: getattr(self, k) for k in ("patch_size", "dim", "depth", "num_heads") if getattr(self, k)}
        mla = self.decoder == "mla"
        return get_config(self.encoder, num_classes=0, img_size=self.img_size, in_chans=self.in_chans,
                          dynamic_img_size=True, drop_path_rate=self.drop_path_rate, class_token=not mla,
                          global_pool="avg" if mla else "token", **overrides)

    def layers(self, depth: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(aux_layers, mla_layers) for an encoder of `depth` blocks. The paper's, for 24: auxiliary heads at
        blocks 10, 15, 20 (and 24 for PUP), MLA taps at 6, 12, 18, 24 (0-based: 9, 14, 19, 23 and 5, 11, 17, 23)."""
        mla = self.mla_layers or tuple(max(0, depth * k // 4 - 1) for k in (1, 2, 3, 4))
        if self.aux_layers is not None:
            return self.aux_layers, mla
        aux = tuple(max(0, round(depth * f) - 1) for f in (10 / 24, 15 / 24, 20 / 24))
        return ((*aux, depth - 1) if self.decoder == "pup" else aux), mla

    @staticmethod
    def pack_outputs(outputs: list[torch.Tensor]) -> SegmentationOutput:
        return SegmentationOutput(outputs[0], [])

    def summary(self) -> dict:
        encoder = self.encoder_config()
        return {**encoder.summary(), "classes": self.num_classes}

    def build(self) -> SETR:
        encoder = self.encoder_config()
        aux_layers, mla_layers = self.layers(encoder.depth)
        model = SETR(encoder.build(), self.decoder, self.num_classes, aux_layers, mla_layers, self.channels,
                     self.mla_channels, self.mla_head_channels, self.aux)
        model.config = self
        return model


# ---- presets -------------------------------------------------------------------------------------------------
def _paper(decoder: str) -> SETRConfig:
    """The paper's: ViT-L/16 (ImageNet-21k, fine-tuned at 384) on 768 crops, 19 Cityscapes classes."""
    return SETRConfig(num_classes=19, decoder=decoder, encoder="vit_large_patch16_384", img_size=768)


@register_model
def setr_naive_vit_large_patch16_384() -> SETRConfig:
    return _paper("naive")


@register_model
def setr_pup_vit_large_patch16_384() -> SETRConfig:
    return _paper("pup")


@register_model
def setr_mla_vit_large_patch16_384() -> SETRConfig:
    return _paper("mla")


@register_model
def setr_naive_vit_base_patch16_384() -> SETRConfig:
    """The authors' SETR-Naive-Base (configs/SETR/SETR_Naive_Base_768x768_*_cityscapes_bs_8.py): ViT-B/16 (ImageNet-21k,
    fine-tuned at 384) on 768 crops, 19 Cityscapes classes, auxiliary heads after blocks 3, 6 and 9."""
    return SETRConfig(num_classes=19, decoder="naive", encoder="vit_base_patch16_384", img_size=768,
                      aux_layers=(2, 5, 8))


def _small(decoder: str) -> SETRConfig:
    """For the scenes (128-pixel images, background + 10 classes) on 2 cores: a 6-block ViT of width 192 on
    8-pixel patches (a 16 × 16 grid), decoders of width 64."""
    return SETRConfig(num_classes=11, decoder=decoder, encoder="vit_tiny_patch16_224", img_size=128, patch_size=8,
                      depth=6, channels=64, mla_channels=64, mla_head_channels=32)


@register_model
def setr_naive_small() -> SETRConfig:
    return _small("naive")


@register_model
def setr_pup_small() -> SETRConfig:
    return _small("pup")


@register_model
def setr_mla_small() -> SETRConfig:
    return _small("mla")
