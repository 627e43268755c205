"""IPT (Chen et al. 2021, "Pre-Trained Image Processing Transformer"): one transformer body shared by several
restoration tasks, each with its own convolutional head and tail.

    f_H   = head_t(x)                          §3.1  3×3 conv + two ResBlocks (5×5), (B, C, 48, 48) features
    tokens = unfold_3×3(f_H)                         the paper's 256 tokens of width 576 = 64 · 3 · 3
    z_0   = tokens + Linear(tokens) + E_pos          a linear encoding with a residual; positions added once
    z_E   = Encoder(z_0)                             pre-norm blocks, attention without biases
    z_D   = Decoder(z_E, memory=z_E, query_pos=E_t)  the task embedding E_t as every decoder layer's query position
    f_D   = fold(z_D + MLP(z_D)) + f_H               an MLP head with a residual, back to the map, then the body's
    y     = tail_t(f_D)                              residual; the tail upsamples (pixel shuffle) and maps to RGB

The mean shift subtracts DIV2K's mean colour before the head and adds it back after the tail. With
`global_residual` (vitlab's, off in the paper's structure so that its releases run unchanged) the tail's output is a
difference added to the bicubic upsampling of the input, or to the input itself for denoising and deraining, and the
tail's last convolution starts at zero, so an untrained model already gives the baseline:

    y     = bicubic_s(x) + tail_t(f_D)               VDSR's global residual learning (Kim et al. 2016)

Tasks are named by their degradation (`sr2`, `sr3`, `sr4`, `denoise30`, `denoise50`, `derain`); the model holds
one head, one tail and one task embedding per name, in the order of `degradations`.

The body reads exactly patch_size × patch_size maps (its position and task embeddings have one entry per token).
`forward_chop` restores an image of any size from overlapping tiles. Images are (B, 3, H, W) in [0, 1]; inside, the
model works in [0, rgb_range] as the official code does, so its released weights behave as they do there.

Names follow the official code (huawei-noah/Pretrained-IPT): `sub_mean`, `head.{t}`, `body.{linear_encoding,
query_embed, mlp_head}`, `tail.{t}`, `add_mean`. The transformer layers are vitlab's blocks, whose names
interop/ipt_formats.py maps from the official `nn.MultiheadAttention` ones.

Glossary: B batch, C features (n_feats), p token patch (patch_dim), N tokens ((48 / p)²), D token width (C · p²),
s the task's scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.blocks import EncoderBlock, PreNormDecoderBlock
from ..layers.conv import MeanShift, ResBlock, Upsampler, same_conv
from ..layers.resample import bicubic_upsample
from ..layers.tiling import BLEND, tiled_apply
from .family import ExportSpec, Model, ModelFamily, Paper, Release
from .registry import register_config, register_model

# every degradation IPT knows, with the scale of its output; the pretrained model's task order is the official one
DEGRADATION_SCALES = {"sr2": 2, "sr3": 3, "sr4": 4, "derain": 1, "denoise30": 1, "denoise50": 1}
PAPER_DEGRADATIONS = tuple(DEGRADATION_SCALES)


def degradation_scale(name: str) -> int:
    if name not in DEGRADATION_SCALES:
        raise ValueError(f"unknown degradation {name!r}; expected one of {', '.join(DEGRADATION_SCALES)}")
    return DEGRADATION_SCALES[name]


def task_index_of(degradations: tuple[str, ...], task: str | int) -> int:
    """A task given by degradation name or index -> its index in a multi-task model's `degradations`."""
    if isinstance(task, int):
        if not 0 <= task < len(degradations):
            raise IndexError(f"task index {task} out of range for degradations {degradations}")
        return task
    if task not in degradations:
        raise ValueError(f"this model restores {', '.join(degradations)}; got {task!r}")
    return degradations.index(task)


def restorer_export_spec(model: nn.Module, example: tuple[torch.Tensor, ...] | None, task: int | str | None,
                         free_size: bool) -> ExportSpec:
    """One graph per task: images (B, 3, S, S) -> restored (B, 3, S·s, S·s), the task's head and tail baked in.
    `free_size`: the image axes stay free (a convnet); otherwise only the batch (IPT's body cuts a fixed-size input
    into a fixed token grid)."""
    index = model.task_index(0 if task is None else task)
    if example is None:
        size = getattr(model, "patch_size", 48)
        example = (torch.rand(2, 3, size, size),)
    free = {0: "batch", 2: "height", 3: "width"} if free_size else {0: "batch"}
    return ExportSpec("restorer", lambda m, x: (m(x, index),), ("images",), ("restored",), example, (free,),
                      task=index, meta={"degradation": model.degradations[index]})


def zero_last_convolutions(tails: nn.ModuleList) -> None:
    """Each tail's last convolution to zero: a global-residual network starts as its baseline, and its first steps
    move it from there (the gradient still reaches the zeroed weights through their non-zero input)."""
    for tail in tails:
        nn.init.zeros_(tail[-1].weight)
        nn.init.zeros_(tail[-1].bias)


def add_baseline(model: nn.Module, x: torch.Tensor, task: int, out: torch.Tensor) -> torch.Tensor:
    """A restorer's network output `out` (B, 3, H·s, W·s) plus, with a global residual, the baseline of its input
    x (B, 3, H, W): bicubic upsampling for super-resolution, x itself otherwise."""
    return out + bicubic_upsample(x, model.scales[task]) if model.global_residual else out


def tiled_restore(model: nn.Module, x: torch.Tensor, task: int, tile: int, overlap: int, batch_size: int,
                  blend: str) -> torch.Tensor:
    """A restorer over overlapping tiles of x (B, 3, H, W) -> (B, 3, H·s, W·s) (layers/tiling.py). Each tile goes
    through `model(tiles, task)` (on a runtime, its graph); with a global residual each tile's own baseline is taken
    off before blending and the whole image's added after, so that the baseline shows no tile edge."""
    scale = model.scales[task]

    def restore_tiles(tiles: torch.Tensor) -> torch.Tensor:
        out = model(tiles, task)
        return out - bicubic_upsample(tiles, scale) if model.global_residual else out

    out = tiled_apply(restore_tiles, x, tile, tile - overlap, batch_size, scale=scale, pad_mode="reflect",
                      blend=blend)
    return add_baseline(model, x, task, out)


class IPTHead(nn.Sequential):
    """(B, 3, H, W) -> (B, C, H, W): a 3×3 convolution, then two ResBlocks with 5×5 kernels."""

    def __init__(self, in_chans: int, channels: int) -> None:
        super().__init__(same_conv(in_chans, channels, 3), ResBlock(channels, 5), ResBlock(channels, 5))


class IPTTail(nn.Sequential):
    """(B, C, H, W) -> (B, 3, H·s, W·s): the pixel-shuffle upsampler (nothing for s = 1), then a 3×3 convolution."""

    def __init__(self, scale: int, channels: int, out_chans: int) -> None:
        super().__init__(Upsampler(scale, channels), same_conv(channels, out_chans, 3))


class IPTBody(nn.Module):
    """The shared transformer: (B, C, S, S) features -> (B, C, S, S), for task index t (S = patch_size)."""

    def __init__(self, patch_size: int = 48, patch_dim: int = 3, channels: int = 64, num_heads: int = 12,
                 num_layers: int = 12, mlp_ratio: float = 4.0, num_queries: int = 6, dropout: float = 0.0,
                 pos_every: bool = False, fused_attn: bool = True) -> None:
        super().__init__()
        if patch_size % patch_dim:
            raise ValueError(f"patch_size ({patch_size}) must be a multiple of patch_dim ({patch_dim})")
        self.patch_size, self.patch_dim, self.pos_every = patch_size, patch_dim, pos_every
        self.num_tokens = (patch_size // patch_dim) ** 2
        dim = channels * patch_dim * patch_dim
        self.dim = dim
        self.linear_encoding = nn.Linear(dim, dim)
        self.dropout_layer1 = nn.Dropout(dropout)
        # the official initialisation of both tables: nn.Embedding's N(0, 1)
        self.pos_embed = nn.Parameter(torch.randn(1, self.num_tokens, dim))  # (1, N, D)
        self.query_embed = nn.Parameter(torch.randn(num_queries, self.num_tokens, dim))  # (tasks, N, D)
        block = dict(num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=False, proj_bias=False, proj_drop=dropout,
                     norm_layer=nn.LayerNorm, act_layer=nn.ReLU, fused_attn=fused_attn)
        self.encoder = nn.ModuleList(EncoderBlock(dim, **block) for _ in range(num_layers))
        self.decoder = nn.ModuleList(PreNormDecoderBlock(dim, **block) for _ in range(num_layers))
        hidden = int(dim * mlp_ratio)
        self.mlp_head = nn.Sequential(nn.Linear(dim, hidden), nn.Dropout(dropout), nn.ReLU(), nn.Linear(hidden, dim),
                                      nn.Dropout(dropout))

    def forward(self, features: torch.Tensor, task: int, return_tokens: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """return_tokens: also the decoder's output tokens (B, N, D), which the contrastive term compares."""
        S, p = self.patch_size, self.patch_dim
        if tuple(features.shape[-2:]) != (S, S):
            raise ValueError(f"IPT's body reads {S}×{S} feature maps, got {tuple(features.shape[-2:])}; restore "
                             f"larger images with forward_chop")
        # (B, C, S, S) -> (B, C·p², N) -> (B, N, D): each token a p × p patch, channel-major (F.unfold's layout)
        tokens = F.unfold(features, p, stride=p).transpose(1, 2)
        tokens = self.dropout_layer1(self.linear_encoding(tokens)) + tokens
        query_pos = self.query_embed[task][None]  # (1, N, D), broadcast over the batch
        if self.pos_every:  # positions on the queries and keys of every attention (DETR's way), an official option
            x = tokens
            for block in self.encoder:
                x = block(x, pos=self.pos_embed)
            memory = x
            for block in self.decoder:
                x = block(x, memory, pos=self.pos_embed, query_pos=query_pos)
        else:  # the default: positions added once, to the encoder's input
            x = tokens + self.pos_embed
            for block in self.encoder:
                x = block(x)
            memory = x  # the decoder starts from the encoder's output and attends to it
            for block in self.decoder:
                x = block(x, memory, query_pos=query_pos)
        decoded = x
        x = self.mlp_head(x) + x
        # (B, N, D) -> (B, D, N) -> (B, C, S, S): fold is unfold's inverse (the patches do not overlap)
        out = F.fold(x.transpose(1, 2), (S, S), p, stride=p)
        return (out, decoded) if return_tokens else out


class IPT(Model):
    """Per-task heads and tails around one shared body. forward(x, task): x (B, 3, S, S) in [0, 1] ->
    (B, 3, S·s, S·s); `task` is a degradation name or its index in `degradations`."""

    def __init__(self, degradations: tuple[str, ...] = PAPER_DEGRADATIONS, channels: int = 64, patch_size: int = 48,
                 patch_dim: int = 3, num_heads: int = 12, num_layers: int = 12, mlp_ratio: float = 4.0,
                 dropout: float = 0.0, pos_every: bool = False, rgb_range: float = 255.0, in_chans: int = 3,
                 fused_attn: bool = True, global_residual: bool = False) -> None:
        super().__init__()
        if not degradations:
            raise ValueError("IPT needs at least one degradation, e.g. ('sr2',)")
        self.degradations = tuple(degradations)
        self.scales = tuple(degradation_scale(name) for name in self.degradations)
        self.patch_size, self.rgb_range = patch_size, rgb_range
        self.sub_mean = MeanShift(rgb_range, sign=-1)
        self.head = nn.ModuleList(IPTHead(in_chans, channels) for _ in self.degradations)
        self.body = IPTBody(patch_size, patch_dim, channels, num_heads, num_layers, mlp_ratio,
                            len(self.degradations), dropout, pos_every, fused_attn)
        self.tail = nn.ModuleList(IPTTail(s, channels, in_chans) for s in self.scales)
        self.add_mean = MeanShift(rgb_range, sign=1)
        self.global_residual = global_residual
        if global_residual:
            zero_last_convolutions(self.tail)

    @property
    def task_names(self) -> tuple[str, ...]:
        """The tasks it restores, one head and tail each (one exported graph each)."""
        return self.degradations

    def task_index(self, task: str | int) -> int:
        return task_index_of(self.degradations, task)

    def scale_of(self, task: str | int) -> int:
        return self.scales[self.task_index(task)]

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        return restorer_export_spec(self, example, task, free_size=False)

    def forward(self, x: torch.Tensor, task: str | int = 0, return_tokens: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x (B, 3, S, S) in [0, 1] -> (B, 3, S·s, S·s), not clamped; with return_tokens, also the body's decoder
        tokens (B, N, D)."""
        if x.ndim != 4:
            raise ValueError(f"expected images (B, C, H, W), got shape {tuple(x.shape)}")
        t = self.task_index(task)
        out, tokens = self.network(x, t)
        out = add_baseline(self, x, t, out)
        return (out, tokens) if return_tokens else out

    def network(self, x: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What the layers compute: the restored image (or with global_residual its difference from the baseline),
        and the decoder's tokens. (forward_chop goes through forward, which a runtime replaces by its graph.)"""
        features = self.head[t](self.sub_mean(x * self.rgb_range))
        body, tokens = self.body(features, t, return_tokens=True)
        out = self.tail[t](body + features)
        return (out if self.global_residual else self.add_mean(out)) / self.rgb_range, tokens

    @torch.no_grad()
    def forward_chop(self, x: torch.Tensor, task: str | int = 0, overlap: int = 12, batch_size: int = 64,
                     blend: str = BLEND) -> torch.Tensor:
        """Any-size images (B, 3, H, W) in [0, 1] -> (B, 3, H·s, W·s), restored tile by tile.

        patch_size tiles every patch_size − overlap pixels, the last flush with each edge, `batch_size` tile
        positions per forward; overlapping outputs are blended as `blend` says (layers/tiling.py; "centre" is the
        official rule). A side shorter than a tile is mirrored to one. With a global residual the tiles give the
        network's part and the baseline is the whole image's. (The official code needs batch 1 on CUDA; this runs
        on the input's device, any batch.)
        """
        t = self.task_index(task)
        S = self.patch_size
        if not 0 <= overlap < S:
            raise ValueError(f"overlap must be in 0..{S - 1} pixels, got {overlap}")
        return tiled_restore(self, x, t, S, overlap, batch_size, blend)

    def no_weight_decay(self) -> set[str]:
        return {"body.pos_embed", "body.query_embed"}


_SR = "Set5, Set14, B100, Urban100 (×{} super-resolution, PSNR in dB on Y)"


def _drive(tag: str, filename: str, metric: dict[str, float], dataset: str, overrides: dict, note: str = ""
           ) -> Release:
    """An IPT release in the authors' Google Drive folder; a fine-tuned one holds a single task's head and tail."""
    notes = ["Google Drive folder: needs a browser", *([note] if note else []),
             *(["one head, tail and query, as interop/ipt_formats reads a fine-tuned file; not checked against the "
                "file"] if overrides else [])]
    return Release(tag, "https://drive.google.com/drive/folders/1MVSdUX0YBExauG0fFz4ANiWTrq9xZEj7", "ipt", filename,
                   licence="unknown", metric=metric, dataset=dataset, overrides=overrides, note="; ".join(notes))


@register_config
@dataclass(frozen=True)
class IPTConfig(ModelFamily):
    family: ClassVar[str] = "ipt"
    int8_fp32: ClassVar[dict[str, str]] = {
        "tail.*": "the last convolutions write every output pixel: PSNR reads their rounding directly",
    }
    tasks: ClassVar[tuple[str, ...]] = ("restoration",)
    title: ClassVar[str] = "IPT"
    description: ClassVar[str] = ("IPT (Chen et al., CVPR 2021): per-task convolutional heads and tails around one "
                                  "shared Transformer body, for super-resolution, denoising and deraining")
    paper: ClassVar[Paper | None] = Paper(
        "Pre-Trained Image Processing Transformer",
        "Chen, Hanting and others", "CVPR", 2021, "2012.00364")
    columns: ClassVar[str] = "image: the body's input side; patch: its token patch; dim: a token's width"
    # The authors' releases: one Google Drive folder (huawei-noah/Pretrained-IPT's README) holding the six-task
    # pre-trained model and a model fine-tuned for each task, raw state dicts of the official code. The folder's
    # file list is not published: the names are those the official README's users load (IPT_pretrain.pt, IPT_sr2.pt,
    # IPT_sr4.pt, IPT_derain.pt, IPT_denoise30.pt). The repository states no licence of its own (its License.txt is
    # DETR's Apache-2.0, for the code IPT took from DETR). The figures: PSNR (dB); super-resolution's from the README
    releases: ClassVar[dict[str, Release]] = {r.tag: r for r in (
        _drive("ipt_base.pretrain", "IPT_pretrain.pt", {}, "", {},
               "the six-task model pre-trained on ImageNet, to fine-tune; its authors score only the fine-tuned ones"),
        _drive("ipt_base.sr2", "IPT_sr2.pt", {"set5": 38.37, "set14": 34.43, "b100": 32.48, "urban100": 33.76},
               _SR.format(2), {"degradations": ("sr2",)}),
        _drive("ipt_base.sr3", "", {"set5": 34.81, "set14": 30.85, "b100": 29.38, "urban100": 29.49},
               _SR.format(3), {"degradations": ("sr3",)},
               "the file's name is not in any source seen (IPT_sr3.pt by its siblings' pattern)"),
        _drive("ipt_base.sr4", "IPT_sr4.pt", {"set5": 32.64, "set14": 29.01, "b100": 27.82, "urban100": 27.26},
               _SR.format(4), {"degradations": ("sr4",)}),
        _drive("ipt_base.derain", "IPT_derain.pt", {"psnr": 41.62}, "Rain100L (PSNR, dB)",
               {"degradations": ("derain",)},
               "the figure is the paper's (as Papers with Code lists it), not the README's"),
        _drive("ipt_base.denoise30", "IPT_denoise30.pt", {}, "", {"degradations": ("denoise30",)},
               "no figure for σ = 30 found in the sources seen"),
        _drive("ipt_base.denoise50", "", {"psnr": 29.39}, "CBSD68, color, σ = 50 (PSNR, dB)",
               {"degradations": ("denoise50",)}, "the figure is the paper's (as Papers with Code lists it); the "
               "file's name is not in any source seen (IPT_denoise50.pt by its siblings' pattern)"),
    )}

    degradations: tuple[str, ...] = PAPER_DEGRADATIONS
    channels: int = 64  # n_feats: the heads' and tails' width; a token is channels · patch_dim² wide
    patch_size: int = 48  # the body's input side, and forward_chop's tile
    patch_dim: int = 3
    num_heads: int = 12
    num_layers: int = 12  # encoder layers, and as many decoder layers
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    pos_every: bool = False
    rgb_range: float = 255.0
    in_chans: int = 3
    global_residual: bool = False  # predict the difference from bicubic (or from the input), the tails zeroed

    def __post_init__(self) -> None:
        for name in self.degradations:
            degradation_scale(name)

    def describe(self) -> str:
        return f"{super().describe()}, tasks {', '.join(self.degradations)}"

    def summary(self) -> dict:
        return {"image": self.patch_size, "patch": self.patch_dim, "dim": self.channels * self.patch_dim ** 2,
                "depth": f"{self.num_layers}+{self.num_layers}", "heads": self.num_heads, "classes": None}

    def build(self) -> IPT:
        model = IPT(self.degradations, self.channels, self.patch_size, self.patch_dim, self.num_heads,
                    self.num_layers, self.mlp_ratio, self.dropout, self.pos_every, self.rgb_range, self.in_chans,
                    global_residual=self.global_residual)
        model.config = self
        return model


@register_model
def ipt_base() -> IPTConfig:
    """The paper's: 12 + 12 layers of width 576 (64 features × 3 × 3), 12 heads, six tasks."""
    return IPTConfig()


@register_model
def ipt_small() -> IPTConfig:
    """Sized for 2 CPU cores: 24 features (tokens of 216), 2 + 2 layers of 6 heads, 3.3M parameters for two tasks.
    Measured there (batch 16, a full Adam step): 13.8 patches/s, against 5.0 for 32 features and 4 + 4 layers and
    9.5 for EDSR-baseline; the body dominates, so depth and width are what this budget cuts. With a global residual
    to the bicubic image (or the input), so that it starts from the baseline rather than below it."""
    return IPTConfig(channels=24, num_heads=6, num_layers=2, global_residual=True)
