"""Loading weights of any layout vitlab reads into a model (`load_weights`); vitlab's own files are
`vitlab/checkpoint.py`'s, whose names stay importable from here.

Before loading, the model adapts the checkpoint through its `adapt_checkpoint(state)` hook to what a fine-tuning
user expects to differ (for ViT and DeiT: the position embedding resampled to the model's patch grid, a head for
another number of classes replaced by the model's fresh one, with a warning); this module knows no model's key
names. Anything else that does not fit raises an error listing the missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ..checkpoint import (
    CONFIG_KEY,
    CheckpointMismatchError,
    adapt_state_dict,
    load_model,
    load_state,
    read_state_dict,
    save_weights,
    set_norm_eps,
)

__all__ = ["CONFIG_KEY", "CheckpointMismatchError", "adapt_state_dict", "load_model", "load_state", "load_weights",
           "read_state_dict", "save_weights", "set_norm_eps"]


def load_weights(model: nn.Module, source: str | os.PathLike | dict[str, torch.Tensor], *, strict: bool = True,
                 offline: bool | None = None) -> nn.Module:
    """Load weights into `model`: a state dict, a file or folder in any supported format (vitlab or timm
    safetensors/.pth/.bin, a Hugging Face folder or file, a Google .npz, the official releases' files), detected
    from the file; or released weights by name, fetched once into the Hugging Face cache: a release tag
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k", `vitlab.list_pretrained()`) or "hf-hub:org/name[@revision]".

    Strict: keys that do not fit are an error listing them, with two exceptions the model's hook makes and warns
    about (what fine-tuning expects to differ): a classification head for another class count (the model keeps its
    fresh one) and position embeddings for another grid (resampled). `strict=False` loads what fits and warns.
    `offline`: read the cache only (default: HF_HUB_OFFLINE). The LayerNorm epsilon is taken from the checkpoint
    where it says one (Hugging Face's config.json).
    """
    if isinstance(source, dict):
        from .formats import convert_state

        state = convert_state(source)  # another library's names (an official DETR's, ...), if any
    else:
        from .formats import read_checkpoint

        state, info = read_checkpoint(source, offline=offline)
        if info.norm_eps is not None:
            set_norm_eps(model, info.norm_eps)
    return load_state(model, state, strict=strict)
