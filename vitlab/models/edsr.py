"""EDSR (Lim et al. 2017, "Enhanced Deep Residual Networks for Single Image Super-Resolution"), the CNN that IPT
is measured against, with IPT's multi-task layout: per-task heads and tails around one shared residual body.

    f_H = head_t(x)                        a 3×3 convolution to C features                (B, C, H, W)
    f_B = body(f_H) + f_H                  num_blocks ResBlocks (conv–ReLU–conv, no BatchNorm), a 3×3 conv, and
                                           the long skip
    y   = tail_t(f_B)                      pixel-shuffle upsampling by the task's scale, a 3×3 conv to RGB

With `global_residual` the tail's output is a difference added to the bicubic upsampling of the input (VDSR's global
residual learning; the input itself for denoising and deraining), and the tail's last convolution starts at zero, so
an untrained network already gives the baseline:

    y   = bicubic_s(x) + tail_t(f_B)           (no mean added back: the difference has none to restore)

EDSR-baseline is 16 blocks of 64 features with residual scaling 1 (the paper's small model, 1.4M parameters for
one ×2 task); vitlab's preset adds the global residual, which the paper's model has not. The mean shift and the
0–255 working range are IPT's and EDSR's. Unlike IPT, the network is fully convolutional: it restores an image of
any size in one pass, and `forward_chop` tiles only to bound memory.

Shapes: x (B, 3, H, W) in [0, 1] -> (B, 3, H·s, W·s); s the task's scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..layers.conv import MeanShift, ResBlock, Upsampler, same_conv
from ..layers.tiling import BLEND
from .family import ExportSpec, Model, ModelFamily, Paper
from .ipt import (
    PAPER_DEGRADATIONS,
    add_baseline,
    degradation_scale,
    restorer_export_spec,
    task_index_of,
    tiled_restore,
    zero_last_convolutions,
)
from .registry import register_config, register_model


class EDSR(Model):
    def __init__(self, degradations: tuple[str, ...] = PAPER_DEGRADATIONS, channels: int = 64, num_blocks: int = 16,
                 res_scale: float = 1.0, rgb_range: float = 255.0, in_chans: int = 3,
                 global_residual: bool = False) -> None:
        super().__init__()
        if not degradations:
            raise ValueError("EDSR needs at least one degradation, e.g. ('sr2',)")
        self.degradations = tuple(degradations)
        self.scales = tuple(degradation_scale(name) for name in self.degradations)
        self.rgb_range = rgb_range
        self.sub_mean = MeanShift(rgb_range, sign=-1)
        self.head = nn.ModuleList(same_conv(in_chans, channels, 3) for _ in self.degradations)
        self.body = nn.Sequential(*(ResBlock(channels, 3, res_scale) for _ in range(num_blocks)),
                                  same_conv(channels, channels, 3))
        self.tail = nn.ModuleList(nn.Sequential(Upsampler(s, channels), same_conv(channels, in_chans, 3))
                                  for s in self.scales)
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
        return restorer_export_spec(self, example, task, free_size=True)

    def forward(self, x: torch.Tensor, task: str | int = 0) -> torch.Tensor:
        """x (B, 3, H, W) in [0, 1] -> (B, 3, H·s, W·s), not clamped."""
        t = self.task_index(task)
        return add_baseline(self, x, t, self.network(x, t))

    def network(self, x: torch.Tensor, t: int) -> torch.Tensor:
        """What the layers compute: the restored image, or with global_residual its difference from the baseline.
        (forward_chop goes through forward, which a runtime replaces by its graph.)"""
        features = self.head[t](self.sub_mean(x * self.rgb_range))
        features = self.body(features) + features
        out = self.tail[t](features)
        return (out if self.global_residual else self.add_mean(out)) / self.rgb_range

    @torch.no_grad()
    def forward_chop(self, x: torch.Tensor, task: str | int = 0, overlap: int = 12, batch_size: int = 64,
                     tile: int = 192, blend: str = BLEND) -> torch.Tensor:
        """Any-size images, restored in `tile`-pixel tiles (overlaps blended, layers/tiling.py) so that memory stays
        bounded; an image no larger than a tile goes through in one pass."""
        t = self.task_index(task)
        if max(x.shape[-2:]) <= tile:
            return self(x, t)
        return tiled_restore(self, x, t, tile, overlap, batch_size, blend)


@register_config
@dataclass(frozen=True)
class EDSRConfig(ModelFamily):
    family: ClassVar[str] = "edsr"
    int8_fp32: ClassVar[dict[str, str]] = {
        "tail.*": "the last convolutions write every output pixel: PSNR reads their rounding directly",
    }
    int8_transformer: ClassVar[bool] = False
    tasks: ClassVar[tuple[str, ...]] = ("restoration",)
    title: ClassVar[str] = "EDSR"
    description: ClassVar[str] = ("EDSR (Lim et al., CVPRW 2017): the residual convnet baseline of image "
                                  "restoration, one head and tail per task")
    paper: ClassVar[Paper | None] = Paper(
        "Enhanced Deep Residual Networks for Single Image Super-Resolution",
        "Lim, Bee and others", "CVPRW", 2017, "1707.02921")
    columns: ClassVar[str] = "dim: channels; depth: residual blocks"

    degradations: tuple[str, ...] = PAPER_DEGRADATIONS
    channels: int = 64
    num_blocks: int = 16
    res_scale: float = 1.0
    rgb_range: float = 255.0
    in_chans: int = 3
    global_residual: bool = False  # predict the difference from bicubic (or from the input), the tail zeroed

    def __post_init__(self) -> None:
        for name in self.degradations:
            degradation_scale(name)

    def describe(self) -> str:
        return f"{super().describe()}, tasks {', '.join(self.degradations)}"

    def summary(self) -> dict:
        return {"image": None, "patch": None, "dim": self.channels, "depth": self.num_blocks, "heads": None,
                "classes": None}

    def build(self) -> EDSR:
        model = EDSR(self.degradations, self.channels, self.num_blocks, self.res_scale, self.rgb_range,
                     self.in_chans, self.global_residual)
        model.config = self
        return model


@register_model
def edsr_baseline() -> EDSRConfig:
    """The paper's EDSR-baseline: 16 ResBlocks of 64 features, residual scaling 1; with a global residual to the
    bicubic image, so that training on a laptop starts from the baseline rather than below it."""
    return EDSRConfig(global_residual=True)
