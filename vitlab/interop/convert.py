"""Build the vitlab model a checkpoint describes, and convert it to vitlab's own safetensors format."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ..models.deformable_detr import DeformableDETRConfig
from ..models.deit import DeiTConfig
from ..models.detr import DETRConfig
from ..models.ipt import IPTConfig
from ..models.registry import apply_overrides, get_config, list_models
from ..models.setr import SETRConfig
from ..models.vit import ViTConfig
from ..models.vqgan import VQGANConfig
from .formats import read_checkpoint
from .weights import load_model, load_weights, save_weights

# fields a checkpoint decides even when the user names a model: its head and its resolution
CHECKPOINT_DECIDES = ("num_classes", "img_size", "in_chans")
# families whose checkpoints say everything about the architecture (a config.json or their shapes)
WHOLE_ARCHITECTURE = {"detr": DETRConfig, "deformable_detr": DeformableDETRConfig, "setr": SETRConfig,
                      "ipt": IPTConfig, "vqgan": VQGANConfig}


def model_from_checkpoint(path: str | os.PathLike, model_name: str | None = None) -> nn.Module:
    """A model built to fit the checkpoint, with its weights loaded.

    With `model_name` the registered model is used, its head, image size and channels taken from the
    checkpoint. Without, the architecture comes from the file: a Hugging Face config.json, the shapes of a
    .npz, or for a timm state dict the shapes plus the head count of the registered model of that width.
    """
    _, info = read_checkpoint(path)
    if info.format == "vitlab" and model_name is None:
        return load_model(path)
    arch = dict(info.architecture)
    family = arch.pop("family", None)
    if family in WHOLE_ARCHITECTURE:
        config = get_config(model_name, **arch) if model_name else WHOLE_ARCHITECTURE[family](**arch)
        model = config.build()
        model.model_name = model_name
        return load_weights(model, path)
    if model_name is not None:
        config = get_config(model_name, **{k: arch[k] for k in CHECKPOINT_DECIDES if k in arch})
    else:
        if "num_heads" not in arch:
            arch["num_heads"] = _heads_of_registered_model(arch, path)
        if not arch.get("class_token", True):
            arch["global_pool"] = "avg"
        config = apply_overrides(DeiTConfig() if arch.pop("distilled", False) else ViTConfig(), **arch)
    if info.norm_eps is not None:
        config = apply_overrides(config, norm_eps=info.norm_eps)
    model = config.build()
    model.model_name = model_name
    return load_weights(model, path)


def _heads_of_registered_model(arch: dict, path) -> int:
    patch = arch.get("patch_size", (0, 0))
    for name in list_models("vit_*"):
        c = get_config(name)
        if c.dim == arch.get("dim") and c.depth == arch.get("depth") and c.patch_size in (patch, patch[0]):
            return c.num_heads
    raise ValueError(
        f"{path} is a state dict of a {arch.get('dim')}-wide, {arch.get('depth')}-deep ViT, whose number of heads "
        f"its shapes do not tell and no registered model matches; name the model: --model NAME (vitlab models)"
    )


def convert(src: str | os.PathLike, dst: str | os.PathLike, model_name: str | None = None) -> Path:
    """Any supported checkpoint in, vitlab safetensors (weights + config) out."""
    model = model_from_checkpoint(src, model_name)
    return save_weights(model, dst)
