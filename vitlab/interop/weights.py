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


def load_weights(model: nn.Module, source: str | os.PathLike | dict[str, torch.Tensor]) -> nn.Module:
    """Load weights into `model`: a state dict, or a file/folder in any supported format (vitlab or timm
    safetensors/.pth/.bin, a Hugging Face ViT folder or file, a Google .npz), detected from the file.

    Position embeddings are resampled to the model's grid, a head for another class count is replaced (with a
    warning), and the LayerNorm epsilon is taken from the checkpoint when it says (Hugging Face's config.json).
    """
    if isinstance(source, dict):
        from .formats import convert_state

        state = convert_state(source)  # another library's names (an official DETR's, ...), if any
    else:
        from .formats import read_checkpoint

        state, info = read_checkpoint(source)
        if info.norm_eps is not None:
            set_norm_eps(model, info.norm_eps)
    return load_state(model, state)
