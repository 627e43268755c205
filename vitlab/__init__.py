"""vitlab: the Vision Transformer family in PyTorch, built from one small set of readable blocks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from . import models
from .models import get_config, list_models, list_pretrained

if TYPE_CHECKING:
    from .interop import load_weights, save_weights

__version__ = "0.1.0"


def create_model(
    name: str, *, pretrained: bool | str = False, weights: str | os.PathLike | dict[str, torch.Tensor] | None = None,
    strict: bool = True, offline: bool | None = None, **overrides: Any
) -> nn.Module:
    """Build a registered model, with released or given weights:

        create_model("vit_base_patch16_224", pretrained=True)                 # the model's default release
        create_model("vit_base_patch16_224", pretrained="augreg_in21k_ft_in1k", num_classes=10)  # a named one
        create_model("detr_resnet50.coco", pretrained=True)                   # a release's tag as the name
        create_model("vit_small_patch16_224", weights="hf-hub:timm/vit_small_patch16_224.augreg_in21k_ft_in1k")
        create_model("vit_small_patch16_224", num_classes=10, img_size=384, weights="vit_small.safetensors")

    `pretrained`: True for the model's default release (the first its family lists), or a release's tag
    (`vitlab.list_pretrained(name + ".*")`); the release's own architecture (say, a two-stage Deformable DETR) is
    applied before `overrides`. Releases are downloaded once into the Hugging Face cache (`offline`: the cache
    only; default HF_HUB_OFFLINE). `weights`: anything `load_weights` reads (a file or folder, a release tag,
    hf-hub:org/name[@revision], a state dict). Loading is strict except what fine-tuning expects to differ, which
    the model adapts with a warning: a head for another class count (replaced by a fresh one), position embeddings
    for another grid (resampled); `strict=False` loads what fits.
    """
    release = None
    if "." in name and name not in list_models():  # a release tag as the name, as timm takes it: its architecture,
        from .interop.hub import find_release  # and its weights where pretrained

        release = find_release(name)
        name = release.model
        pretrained = release.tag if pretrained else False
    if pretrained:
        if weights is not None:
            raise TypeError("give pretrained= or weights=, not both: both name the weights to start from")
        from .interop.hub import release_for

        release = release_for(name, pretrained)
    config = models.get_config(name, **{**(release.overrides if release else {}), **overrides})
    if release is not None and release.labels is not None and "labels" not in overrides:
        config = config.named(release.labels())  # its classes' names, where its head is still the release's
    model = models.registry.build_model(config, name)
    source = release.tag if release else weights
    if source is not None:
        from .interop import load_weights

        load_weights(model, source, strict=strict, offline=offline)
    return model


def __getattr__(name: str) -> Any:
    # interop (and what it imports) loads on first use, so `import vitlab.models` stays free of it
    if name in ("load_weights", "save_weights"):
        from . import interop

        return getattr(interop, name)
    if name in ("pipeline", "Pipeline"):  # tasks, and the task packages, load on first use too
        from .tasks import pipeline as module

        return getattr(module, name)
    raise AttributeError(f"module 'vitlab' has no attribute {name!r}")


__all__ = ["Pipeline", "__version__", "create_model", "get_config", "list_models", "list_pretrained", "load_weights",
           "pipeline", "save_weights"]
