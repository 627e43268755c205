"""Saving and loading weights: vitlab's own safetensors files and timm-layout state dicts.

vitlab's key names follow timm's (`patch_embed.proj.weight`, `blocks.0.attn.qkv.weight`, ...), so a timm
ViT state dict loads as it is. Loading adapts what a fine-tuning user expects to differ: the position
embedding is resampled to the model's patch grid, and a head for another number of classes is replaced by
the model's fresh one, with a warning. Anything else that does not fit raises an error listing the missing,
unexpected and mis-shaped keys.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..layers.pos_embed import resample_pos_embed
from ..models.registry import config_from_dict, config_to_dict

CONFIG_KEY = "vitlab_config"
HEAD_KEYS = ("head.weight", "head.bias")
DIST_HEAD_KEYS = ("head_dist.weight", "head_dist.bias")


class CheckpointMismatchError(ValueError):
    """A checkpoint whose keys or shapes do not fit the model."""


def save_weights(model: nn.Module, path: str | os.PathLike, extra_metadata: dict[str, str] | None = None) -> Path:
    """Write the model's weights and config to a safetensors file, atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {CONFIG_KEY: json.dumps(config_to_dict(model.config))}
    if getattr(model, "model_name", None):
        metadata["model_name"] = model.model_name
    metadata.update(extra_metadata or {})
    state = {key: value.detach().contiguous().cpu() for key, value in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(state, tmp, metadata=metadata)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # on disk before the rename makes it the checkpoint
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def read_state_dict(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a checkpoint file: safetensors, or a torch pickle read with weights_only=True.

    A `{"model": ...}` or `{"state_dict": ...}` wrapper (DeiT's releases, training checkpoints) is unwrapped.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if path.suffix == ".safetensors":
        with safe_open(str(path), framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a pickle with arbitrary objects is refused rather than executed
        raise ValueError(
            f"cannot read {path} as a tensor-only checkpoint ({error}); vitlab never unpickles arbitrary objects — "
            f"re-save it as a plain state dict or as safetensors"
        ) from error
    for wrapper in ("model", "state_dict", "model_ema"):
        if isinstance(data, dict) and isinstance(data.get(wrapper), dict):
            data = data[wrapper]
            break
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{path} does not hold a state dict (a mapping of names to tensors)")
    return dict(data), {}


def load_model(path: str | os.PathLike) -> nn.Module:
    """Rebuild a model from a vitlab safetensors file (weights + config)."""
    state, metadata = read_state_dict(path)
    if CONFIG_KEY not in metadata:
        raise ValueError(
            f"{path} has no vitlab config in its metadata; build the model with create_model(name) and call "
            f"load_weights(model, path) instead"
        )
    model = config_from_dict(json.loads(metadata[CONFIG_KEY])).build()
    model.model_name = metadata.get("model_name")
    load_weights(model, state)
    return model


def adapt_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Resample the position embedding to the model's grid and drop a head of another class count."""
    state = dict(state)
    target = model.state_dict()
    if "pos_embed" in state and "pos_embed" in target and state["pos_embed"].shape != target["pos_embed"].shape:
        prefix = getattr(model, "num_prefix_tokens", 1)
        old_n = state["pos_embed"].shape[1] - prefix
        side = math.isqrt(old_n)
        old_grid = (side, side) if side * side == old_n else None
        state["pos_embed"] = resample_pos_embed(
            state["pos_embed"], model.patch_embed.grid_size, old_grid, num_prefix_tokens=prefix
        )
    # another class count: the head's rows differ, its input width does not
    head_differs = (
        "head.weight" in state and "head.weight" in target
        and state["head.weight"].shape[0] != target["head.weight"].shape[0]
        and state["head.weight"].shape[1:] == target["head.weight"].shape[1:]
    )
    head_absent = all(k in state for k in HEAD_KEYS) and not any(k in target for k in HEAD_KEYS)
    if head_differs or head_absent:
        given = state["head.weight"].shape[0]
        warnings.warn(
            f"the checkpoint's head has {given} classes, the model {getattr(model, 'num_classes', 0)}: keeping the "
            f"body and starting a new head (the fine-tuning case)",
            stacklevel=3,
        )
        for key in (*HEAD_KEYS, *DIST_HEAD_KEYS):  # a distilled DeiT's second head goes with the first
            state.pop(key, None)
            if key in target:
                state[key] = target[key]
    return state


def load_weights(model: nn.Module, source: str | os.PathLike | dict[str, torch.Tensor]) -> nn.Module:
    """Load weights into `model`: a state dict, or a file/folder in any supported format (vitlab or timm
    safetensors/.pth/.bin, a Hugging Face ViT folder or file, a Google .npz), detected from the file.

    Position embeddings are resampled to the model's grid, a head for another class count is replaced (with a
    warning), and the LayerNorm epsilon is taken from the checkpoint when it says (Hugging Face's config.json).
    """
    if isinstance(source, dict):
        state = source
    else:
        from .formats import read_checkpoint

        state, info = read_checkpoint(source)
        if info.norm_eps is not None:
            set_norm_eps(model, info.norm_eps)
    state = adapt_state_dict(model, state)
    target = model.state_dict()
    missing = sorted(set(target) - set(state))
    unexpected = sorted(set(state) - set(target))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(target[k].shape)}"
        for k in set(state) & set(target) if state[k].shape != target[k].shape
    )
    if missing or unexpected or misshaped:
        raise CheckpointMismatchError(_mismatch_message(missing, unexpected, misshaped))
    model.load_state_dict(state)
    return model


def set_norm_eps(model: nn.Module, eps: float) -> None:
    """Give every LayerNorm the checkpoint's epsilon, and record it in the model's config."""
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = eps
    if hasattr(model, "config") and hasattr(model.config, "norm_eps"):
        model.config = dataclasses.replace(model.config, norm_eps=eps)


def _mismatch_message(missing: list[str], unexpected: list[str], misshaped: list[str], limit: int = 20) -> str:
    def listing(title: str, items: list[Any]) -> str:
        shown = "\n    ".join(map(str, items[:limit]))
        more = f"\n    ... and {len(items) - limit} more" if len(items) > limit else ""
        return f"\n  {title} ({len(items)}):\n    {shown}{more}" if items else ""

    return (
        "the checkpoint does not fit the model:"
        + listing("missing from the checkpoint", missing)
        + listing("unexpected in the checkpoint", unexpected)
        + listing("mis-shaped", misshaped)
        + "\n  build the model that matches the checkpoint (its name, depth, width, patch size)."
    )
