"""Convolutional backbones for the detectors: torchvision's ResNets, cut after a chosen stage.

DETR (Carion et al. 2020, §3.2) reads the last feature map of a ResNet, C5 at stride 32 with 2048 channels for
ResNet-50; Deformable DETR reads C3–C5. The backbone's batch norm is frozen in the paper's recipe
(`FrozenBatchNorm2d`: the statistics and the affine parameters are constants), because a detection batch holds
two images a GPU and batch statistics of two images are noise; the stem and layer1 are frozen too. Both are
options here: trained from scratch (no ImageNet weights exist on this machine), a ResNet needs its batch norm to
train at all, and a frozen random stem only loses capacity.

Module names are torchvision's (conv1, bn1, layer1 … layer4), which are also timm's, so the official checkpoints
and Hugging Face's timm-backbone checkpoints map onto them one to one.

Shapes: images (B, C, H, W) -> features [(B, C_i, H / s_i, W / s_i)] for each returned stage, s_i = 4, 8, 16, 32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.ops import FrozenBatchNorm2d

RESNETS = {"resnet18": torchvision.models.resnet18, "resnet34": torchvision.models.resnet34,
           "resnet50": torchvision.models.resnet50, "resnet101": torchvision.models.resnet101}
STAGES = ("layer1", "layer2", "layer3", "layer4")
STRIDES = {"layer1": 4, "layer2": 8, "layer3": 16, "layer4": 32}


class ResNetBackbone(nn.Module):
    """A torchvision ResNet without its pooling and classifier, returning the feature maps of `return_stages`.

    name: resnet18 | resnet34 | resnet50 | resnet101; last_stage: the deepest stage kept (3 drops layer4: C4 at
    stride 16, a finer map for small images); frozen_bn: FrozenBatchNorm2d in place of BatchNorm2d; frozen_stages:
    0 trains everything, 1 freezes the stem, 2 the stem and layer1 (the paper), and so on; in_chans: image channels.
    """

    def __init__(self, name: str = "resnet50", last_stage: int = 4, return_stages: tuple[int, ...] | None = None,
                 frozen_bn: bool = True, frozen_stages: int = 2, in_chans: int = 3) -> None:
        super().__init__()
        if name not in RESNETS:
            raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(RESNETS)}")
        if not 1 <= last_stage <= 4:
            raise ValueError(f"last_stage must be 1 … 4 (layer1 … layer4), got {last_stage}")
        return_stages = (last_stage,) if return_stages is None else tuple(return_stages)
        if not all(1 <= stage <= last_stage for stage in return_stages):
            raise ValueError(f"return_stages {return_stages} must lie in 1 … last_stage={last_stage}")
        if not 0 <= frozen_stages <= last_stage + 1:
            raise ValueError(f"frozen_stages must be 0 (nothing) … {last_stage + 1} (everything), got {frozen_stages}")
        net = RESNETS[name](weights=None, norm_layer=FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d)
        if in_chans != 3:
            net.conv1 = nn.Conv2d(in_chans, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.stage_names = STAGES[:last_stage]
        for stage in self.stage_names:
            setattr(self, stage, getattr(net, stage))
        self.return_stages = return_stages
        self.channels = [self._width(STAGES[s - 1]) for s in return_stages]  # C_i of each returned map
        self.strides = [STRIDES[STAGES[s - 1]] for s in return_stages]
        self.num_channels = self.channels[-1]
        self.frozen_stages = frozen_stages
        stem = [self.conv1, self.bn1] if frozen_stages >= 1 else []
        for module in stem + [getattr(self, s) for s in self.stage_names[:max(0, frozen_stages - 1)]]:
            for param in module.parameters():
                param.requires_grad_(False)

    def _width(self, stage: str) -> int:
        """The channels a stage puts out: those of its last block's last norm (bn3 of a bottleneck, else bn2)."""
        last_block = getattr(self, stage)[-1]
        return (last_block.bn3 if hasattr(last_block, "bn3") else last_block.bn2).weight.shape[0]

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        """images (B, C, H, W) -> one (B, C_i, H_i, W_i) per returned stage, shallowest first."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(images))))  # (B, 64, H/4, W/4)
        features = []
        for index, stage in enumerate(self.stage_names, start=1):
            x = getattr(self, stage)(x)
            if index in self.return_stages:
                features.append(x)
        return features


def downsample_mask(padding_mask: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """padding_mask (B, H, W) True at padded pixels -> (B, h, w) at a feature map's size, by nearest neighbour
    (a feature pixel is padding when the image pixel it samples is)."""
    return F.interpolate(padding_mask[None].float(), size=size).to(torch.bool)[0]
