"""SETR checkpoints in the official code's layout (fudan-zvg/SETR, mmcv's checkpoint file) load into vitlab.

The official layout is written here from the official module definitions: the MLA neck inside the backbone
(`backbone.norm_k`, `backbone.mla.*`), an unused `conv_seg` (C, 512, 1, 1) in every head, and for MLA a class token
plus its position entry that the official forward drops before the blocks (filled with noise here, so that a
mapping which used them would change the output). benchmarks/official_setr_parity.py runs the official code itself.
"""

from __future__ import annotations

import re

import pytest
import torch

from vitlab.interop import model_from_checkpoint
from vitlab.interop.formats import read_checkpoint
from vitlab.models.setr import SETRConfig


def small(decoder: str, **overrides) -> SETRConfig:
    return SETRConfig(**{"num_classes": 5, "decoder": decoder, "encoder": "vit_tiny_patch16_224", "img_size": 32,
                         "patch_size": 8, "depth": 4, "channels": 16, "mla_channels": 16, "mla_head_channels": 8,
                         **overrides})


def randomised(config: SETRConfig):
    torch.manual_seed(0)
    model = config.build().eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    return model


def official_layout(state: dict[str, torch.Tensor], num_classes: int) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        out[re.sub(r"^neck\.", "backbone.", key)] = value
    heads = {m.group(1) for k in out if (m := re.match(r"^(decode_head|auxiliary_head\.\d+)\.", k))}
    for head in heads:
        out[f"{head}.conv_seg.weight"] = torch.randn(num_classes, 512, 1, 1)
        out[f"{head}.conv_seg.bias"] = torch.randn(num_classes)
    if "backbone.cls_token" not in out:  # MLA: the official encoder has a class token and drops it before blocks
        dim = out["backbone.pos_embed"].shape[-1]
        out["backbone.cls_token"] = torch.randn(1, 1, dim)
        out["backbone.pos_embed"] = torch.cat([torch.randn(1, 1, dim), out["backbone.pos_embed"]], 1)
    return out


def save_mmcv(path, state):
    torch.save({"meta": {"mmcv_version": "1.2.7", "CLASSES": ("a", "b"), "iter": 40000},
                "state_dict": state, "optimizer": {"state": {}, "param_groups": [{"lr": 0.01}]}}, path)


@pytest.mark.parametrize("decoder", ["naive", "pup", "mla"])
def test_official_checkpoint_builds_the_same_model(decoder, tmp_path):
    source = randomised(small(decoder))
    path = tmp_path / "official.pth"
    save_mmcv(path, official_layout(source.state_dict(), 5))
    state, info = read_checkpoint(path)
    assert info.format == "setr"
    assert not any("conv_seg" in k for k in state)
    model = model_from_checkpoint(path).eval()
    assert model.config.decoder == decoder
    assert (model.config.img_size, model.config.num_classes, model.config.depth) == (32, 5, 4)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images).logits, source(images).logits, rtol=0, atol=1e-6)


def test_official_checkpoint_into_a_model_of_other_classes_and_crop(tmp_path):
    """Cityscapes' 19 classes into a model of 5 at another crop: the encoder and the decoder's body load, the
    position embedding is resampled, the classifiers start fresh with a warning."""
    source = randomised(small("pup", num_classes=19))
    path = tmp_path / "official.pth"
    save_mmcv(path, official_layout(source.state_dict(), 19))
    target = small("pup", img_size=64).build()
    fresh = {k: v.clone() for k, v in target.state_dict().items()}
    from vitlab.interop import load_weights

    with pytest.warns(UserWarning, match="19 classes, the model 5"):
        load_weights(target, path)
    loaded = target.state_dict()
    assert loaded["backbone.pos_embed"].shape == (1, 1 + 64, 192)
    torch.testing.assert_close(loaded["backbone.blocks.3.mlp.fc2.weight"], source.state_dict()[
        "backbone.blocks.3.mlp.fc2.weight"])
    # 8-pixel patches: three 2x stages (conv_0..2), conv_3 the classifier
    torch.testing.assert_close(loaded["decode_head.conv_2.weight"], source.state_dict()["decode_head.conv_2.weight"])
    for key in ("decode_head.conv_3.weight", "decode_head.conv_3.bias", "auxiliary_head.0.conv_1.weight"):
        torch.testing.assert_close(loaded[key], fresh[key])


def test_segmentation_task_starts_from_an_official_checkpoint(tmp_path):
    from vitlab.tasks.segmentation.task import load_start

    source = randomised(small("mla"))
    path = tmp_path / "official.pth"
    save_mmcv(path, official_layout(source.state_dict(), 5))
    model = small("mla").build().eval()
    load_start(model, str(path))
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images).logits, source(images).logits, rtol=0, atol=1e-6)
