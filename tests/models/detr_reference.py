"""The official DETR (the `detr` package on PyPI, 0.1.4: facebookresearch/detr's code), built by hand with random
weights, as the reference for tests/models/test_detr.py and tests/tasks/test_detection.py.

Two things stand between that package and this torch: `util/misc.py` parses `torchvision.__version__[:3]` as a
float ("0.29" reads as 0.2 and sends it after helpers torchvision removed), so the import runs with a version
string that reads as new; and its `Backbone` asks for ImageNet weights, which this machine cannot download, so the
ResNet is torchvision's with `weights=None`, wrapped in the package's own BackboneBase and Joiner.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torchvision


def official():
    """The package's modules: detr, transformer, backbone, position_encoding, matcher, misc."""
    pytest.importorskip("scipy")
    real = torchvision.__version__
    torchvision.__version__ = "1.0"
    try:
        names = ("models.detr", "models.transformer", "models.backbone", "models.position_encoding",
                 "models.matcher", "util.misc", "util.box_ops")
        modules = [importlib.import_module(name) for name in names]
    finally:
        torchvision.__version__ = real
    return dict(zip(("detr", "transformer", "backbone", "position_encoding", "matcher", "misc", "box_ops"), modules))


def official_detr(num_classes=91, backbone="resnet50", dim=256, heads=8, enc_layers=6, dec_layers=6, ffn_dim=2048,
                  num_queries=100, pre_norm=False, seed=0):
    """The official DETR with random weights (every frozen batch norm given random statistics too, so that the
    backbone's arithmetic is checked rather than an identity)."""
    m = official()
    torch.manual_seed(seed)
    resnet = getattr(torchvision.models, backbone)(weights=None, norm_layer=m["backbone"].FrozenBatchNorm2d)
    channels = 512 if backbone in ("resnet18", "resnet34") else 2048
    body = m["backbone"].BackboneBase(resnet, train_backbone=True, num_channels=channels, return_interm_layers=False)
    joiner = m["backbone"].Joiner(body, m["position_encoding"].PositionEmbeddingSine(dim // 2, normalize=True))
    joiner.num_channels = channels
    transformer = m["transformer"].Transformer(d_model=dim, nhead=heads, num_encoder_layers=enc_layers,
                                               num_decoder_layers=dec_layers, dim_feedforward=ffn_dim,
                                               normalize_before=pre_norm, return_intermediate_dec=True)
    model = m["detr"].DETR(joiner, transformer, num_classes=num_classes, num_queries=num_queries, aux_loss=True)
    randomize_frozen_norms(model)
    return model.eval()


def randomize_frozen_norms(model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "running_var") and not isinstance(module, torch.nn.BatchNorm2d | torch.nn.LayerNorm):
            n = module.weight.shape[0]
            module.weight.copy_(1 + 0.1 * torch.randn(n, generator=generator))
            module.bias.copy_(0.1 * torch.randn(n, generator=generator))
            module.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
            module.running_var.copy_(1 + 0.2 * torch.rand(n, generator=generator))


def nested(images, padding_mask):
    """The official model's input: a NestedTensor of the batch and its mask (True at padding)."""
    return official()["misc"].NestedTensor(images, padding_mask)
