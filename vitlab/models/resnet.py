"""A convolutional teacher for DeiT's distillation: torchvision's ResNet-18, with its stem fitted to small images.

DeiT (Touvron et al. 2021, §5) distils a ViT from a convnet: the teacher's inductive bias (locality, translation
equivariance) reaches the student through the distillation token. On 28×28 Fashion-MNIST the stock ImageNet stem
(7×7 stride-2 convolution, then max-pool) would shrink the image to 7×7 before the first residual stage, so the
stem here is a 3×3 convolution on the image's own channels; `stem_stride` and `maxpool` choose how much it
downsamples. The residual stages are torchvision's, unchanged, so the key names are torchvision's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torchvision
from torch import nn

from .family import ExportSpec, Model, ModelFamily, Paper
from .registry import register_config, register_model


@register_config
@dataclass(frozen=True)
class ResNetConfig(ModelFamily):
    family: ClassVar[str] = "resnet"
    int8_transformer: ClassVar[bool] = False
    tasks: ClassVar[tuple[str, ...]] = ("classification",)
    title: ClassVar[str] = "ResNet"
    description: ClassVar[str] = "ResNet (He et al., CVPR 2016): the convolutional baseline and teacher"
    paper: ClassVar[Paper | None] = Paper(
        "Deep Residual Learning for Image Recognition",
        "He, Kaiming and others", "CVPR", 2016, "1512.03385")
    columns: ClassVar[str] = "depth: layers; no patches"

    depth: int = 18  # 18 or 34 (BasicBlock ResNets in torchvision)
    img_size: int | tuple[int, int] = 28  # recorded for the data pipeline; the network accepts any size
    in_chans: int = 1
    num_classes: int = 10
    stem_kernel: int = 3
    stem_stride: int = 1
    maxpool: bool = True  # the stem's 3×3 stride-2 max-pool
    drop_path_rate: float = 0.0  # accepted so `vitlab train --drop-path` works alike for every model; must be 0

    def __post_init__(self) -> None:
        if self.depth not in (18, 34):
            raise ValueError(f"ResNet depth must be 18 or 34, got {self.depth}")
        if self.drop_path_rate:
            raise ValueError(f"stochastic depth is not implemented for ResNets; use drop_path_rate=0, "
                             f"got {self.drop_path_rate}")

    def build(self) -> ResNet:
        return ResNet(self)


class ResNet(Model):
    """images (B, C, H, W) -> logits (B, num_classes)."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        self.num_classes = config.num_classes
        factory = torchvision.models.resnet18 if config.depth == 18 else torchvision.models.resnet34
        net = factory(num_classes=config.num_classes)
        net.conv1 = nn.Conv2d(config.in_chans, 64, config.stem_kernel, config.stem_stride,
                              config.stem_kernel // 2, bias=False)
        if not config.maxpool:
            net.maxpool = nn.Identity()
        self.net = net

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        """images (B, C, H, W) -> logits (B, K); batch and image size free (a convnet with global pooling)."""
        side = self.config.img_size
        size = (side, side) if isinstance(side, int) else tuple(side)
        example = example or (torch.randn(2, self.config.in_chans, *size),)
        return ExportSpec("classifier", lambda model, images: (model(images),), ("images",), ("logits",), example,
                          ({0: "batch", 2: "height", 3: "width"},))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.config.in_chans:
            raise ValueError(f"expected images (B, {self.config.in_chans}, H, W), got shape {tuple(x.shape)}")
        return self.net(x)


@register_model
def resnet18_28() -> ResNetConfig:
    """ResNet-18 for 28×28 grayscale: 3×3 stride-2 stem and max-pool, so the stages run at 7, 4, 2, 1 pixels.

    The downsampling is chosen for 2 CPU cores: a stride-1 stem (stages at 14×14) trains at ~135 images/s, this
    one at ~220, and evaluates at ~1,400 images/s, which is what a teacher costs per distillation step.
    `create_model("resnet18_28", stem_stride=1)` gives the finer variant.
    """
    return ResNetConfig(depth=18, stem_kernel=3, stem_stride=2, maxpool=True)


@register_model
def resnet18_tv_28() -> ResNetConfig:
    """resnet18_28 with torchvision's own stem (7×7 stride-2 convolution, then max-pool): the stages run at the
    same 7, 4, 2, 1 pixels, and its weights fit a detector's torchvision ResNet-18 backbone
    (`vitlab train --task detection --backbone-weights RUN`)."""
    return ResNetConfig(depth=18, stem_kernel=7, stem_stride=2, maxpool=True)
