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


def classifier_to_backbone_state(state: dict[str, torch.Tensor], backbone: ResNetBackbone) -> dict[str, torch.Tensor]:
    """A ResNet classifier's state dict as `backbone`'s: the ImageNet start of the paper's recipe, or any ResNet
    a user trained (torchvision's or timm's `resnet50` file, vitlab's `resnet18_tv_28` run, an official DETR
    backbone). The keys are found under whatever prefix holds the stem's `conv1.weight` (none, `net.`,
    `module.`, `backbone.0.body.`); the classifier (`fc`) and the stages past the backbone's last are dropped.
    A stem of other input channels is summed or spread over the backbone's: a grey classifier's filters, spread
    over three equal channels, answer a grey image given as RGB the same way."""
    stems = [key for key in state if key.endswith("conv1.weight") and "layer" not in key]
    if len(stems) != 1:
        raise ValueError(f"expected the state dict of one ResNet (one stem conv1.weight outside the layers), found "
                         f"{len(stems)} stems ({stems[:4]}); give a ResNet classifier's or backbone's weights")
    prefix = stems[0][: -len("conv1.weight")]
    target = backbone.state_dict()
    kept = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
    kept = {key: value for key, value in kept.items() if key in target or not (
        key.startswith("fc.") or key.endswith("num_batches_tracked")
        or key.split(".")[0] in STAGES[len(backbone.stage_names):])}
    stem, theirs = target["conv1.weight"], kept["conv1.weight"]
    if theirs.shape[2:] != stem.shape[2:]:
        raise ValueError(f"the checkpoint's stem is a {theirs.shape[2]}×{theirs.shape[3]} convolution, the "
                         f"backbone's {stem.shape[2]}×{stem.shape[3]} (torchvision's stem); train the classifier "
                         f"with that stem (vitlab train --model resnet18_tv_28)")
    if theirs.shape[1] != stem.shape[1]:
        if theirs.shape[1] == 1:
            theirs = theirs.repeat(1, stem.shape[1], 1, 1) / stem.shape[1]
        elif stem.shape[1] == 1:
            theirs = theirs.sum(dim=1, keepdim=True)
        else:
            raise ValueError(f"cannot map a stem of {theirs.shape[1]} input channels onto one of {stem.shape[1]}")
        kept["conv1.weight"] = theirs
    for key, value in target.items():  # timm's files carry no batch counters
        if key.endswith("num_batches_tracked") and key not in kept:
            kept[key] = value
    return kept
