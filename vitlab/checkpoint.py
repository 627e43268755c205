"""vitlab's own checkpoint files: weights and config in one safetensors file, written atomically, and loading a
state dict in vitlab's layout into a model (what `vitlab train` writes and reads back; other libraries' layouts
are interop's).

vitlab's key names follow timm's, so a timm ViT state dict loads as it is. Before loading, the model adapts the
checkpoint through its `adapt_checkpoint(state)` hook to what a fine-tuning user expects to differ (for ViT and
DeiT: the position embedding resampled to the model's patch grid, a head for another number of classes replaced
by the model's fresh one, with a warning); this module knows no model's key names. Anything else that does not
fit raises an error listing the missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from .atomic import replacing
from .models.family import Model
from .models.registry import config_from_dict, config_to_dict
from .reading import DamagedFileError, reading

CONFIG_KEY = "vitlab_config"
PREPROCESSING_KEY = "preprocessing"  # in vitlab's safetensors metadata, beside its config
WEIGHT_FILE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".npz", ".ckpt")  # the files weights are kept in


def recorded_preprocessing(path: str | os.PathLike) -> dict[str, Any] | None:
    """The preprocessing record a vitlab .safetensors file keeps in its metadata (read without its tensors); None
    where it keeps none."""
    with reading(path, "safetensors"), safe_open(str(path), framework="pt") as f:
        recorded = (f.metadata() or {}).get(PREPROCESSING_KEY)
    return json.loads(recorded) if recorded else None


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
    with replacing(path) as tmp:
        save_file(state, str(tmp), metadata=metadata)
    return path


def read_state_dict(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a checkpoint file: safetensors, or a torch pickle read with weights_only=True.

    A `{"model": ...}` or `{"state_dict": ...}` wrapper (DeiT's releases, training checkpoints) is unwrapped. The
    `argparse.Namespace` of training options that the DETR family's training scripts save beside the model is
    allowed (it holds only what the other allowed types can), nothing else.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if path.suffix == ".safetensors":
        with reading(path, "safetensors"), safe_open(str(path), framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118
    try:
        with reading(path, "a torch checkpoint"), torch.serialization.safe_globals([argparse.Namespace]):
            data = torch.load(path, map_location="cpu", weights_only=True)
    except DamagedFileError as error:
        if not isinstance(error.__cause__, pickle.UnpicklingError):
            raise
        # a pickle with arbitrary objects is refused rather than executed
        raise ValueError(
            f"cannot read {path} as a tensor-only checkpoint ({error.__cause__}); vitlab never unpickles arbitrary "
            f"objects — re-save it as a plain state dict or as safetensors"
        ) from error.__cause__
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
    return load_state(model, state)


def adapt_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint adapted by the model's own `adapt_checkpoint(state)` (models/family.py's Model; for ViT and
    DeiT: position embedding resampled to the model's grid, a head of another class count replaced, with a
    warning); a module that is no vitlab Model gets the state as it is."""
    state = dict(state)
    return model.adapt_checkpoint(state) if isinstance(model, Model) else state


def load_state(model: nn.Module, state: dict[str, torch.Tensor], *, strict: bool = True,
               labels: tuple[str, ...] | list[str] | None = None) -> nn.Module:
    """Load a state dict in vitlab's layout, adapted by the model's own hook; `labels`: the checkpoint's classes,
    by row, which its classifier rows are matched to the model's by (models/adapt.py's match_classes). Strict (the
    default): anything that does not fit raises CheckpointMismatchError listing the missing, unexpected and
    mis-shaped keys. Not strict: what fits is loaded, the rest keeps the model's own values, and a warning lists
    it."""
    if labels and hasattr(model, "classifier_keys"):
        from .models.adapt import match_classes

        state = match_classes(model, state, labels)
    state = adapt_state_dict(model, state)
    target = model.state_dict()
    missing = sorted(set(target) - set(state))
    unexpected = sorted(set(state) - set(target))
    misshaped = sorted(k for k in set(state) & set(target) if state[k].shape != target[k].shape)
    if not (missing or unexpected or misshaped):
        model.load_state_dict(state)
        return model
    message = _mismatch_message(missing, unexpected,
                                [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(target[k].shape)}"
                                 for k in misshaped])
    if strict:
        raise CheckpointMismatchError(message + "\n  or load what fits and keep the rest fresh: strict=False "
                                                "(--strict false)")
    fitting = {k: v for k, v in state.items() if k in target and k not in misshaped}
    if not fitting:
        raise CheckpointMismatchError(message.replace("does not fit the model", "has nothing that fits the model"))
    warnings.warn(message.replace("does not fit the model", f"does not fit the model (not strict: loaded "
                                  f"{len(fitting)} of the model's {len(target)} tensors, the rest left fresh)"),
                  stacklevel=2)
    model.load_state_dict(fitting, strict=False)
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
