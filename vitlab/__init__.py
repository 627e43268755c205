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
    name: str, *, weights: str | os.PathLike | dict[str, torch.Tensor] | None = None, **overrides: Any
) -> nn.Module:
    """Build a registered model, and load a checkpoint into it when `weights` is given:
    `create_model("vit_small_patch16_224", num_classes=10, img_size=384, weights="vit_small.safetensors")`.

    `weights`: anything `load_weights` reads (a file or folder in a supported format, or a state dict); the model
    adapts it (position embeddings resampled to its grid, a head for another class count replaced, with a warning).
    """
    model = models.create_model(name, **overrides)
    if weights is not None:
        from .interop import load_weights

        load_weights(model, weights)
    return model


def __getattr__(name: str) -> Any:
    # interop (and what it imports) loads on first use, so `import vitlab.models` stays free of it
    if name in ("load_weights", "save_weights"):
        from . import interop

        return getattr(interop, name)
    raise AttributeError(f"module 'vitlab' has no attribute {name!r}")


__all__ = ["__version__", "create_model", "get_config", "list_models", "list_pretrained", "load_weights",
           "save_weights"]
