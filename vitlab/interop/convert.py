"""Build the vitlab model a checkpoint describes, and convert it to vitlab's own safetensors format."""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn

from ..checkpoint import PREPROCESSING_KEY, load_model, save_weights
from ..models.registry import build_model, config_type, get_config
from .formats import load_weights, read_checkpoint
from .hub import fetch, release_named
from .preprocessing import preprocessing_for


def model_from_checkpoint(path: str | os.PathLike, model_name: str | None = None) -> nn.Module:
    """A model built to fit the checkpoint, with its weights loaded. `path` may also be a release tag (its model
    and architecture are the release's) or hf-hub:org/name.

    With `model_name` the registered model is used, with what the file's converter says the file still decides
    (a ViT's head, image size, channels and LayerNorm epsilon; a detector's whole architecture). Without, the
    architecture comes from the file: a Hugging Face config.json, the shapes, and what the family's converter
    adds (for a timm ViT, the head count of the registered model of that size).
    """
    release = release_named(path)  # a release knows its model and architecture
    release_overrides = release.overrides if release else {}
    labels = release.labels() if release and release.labels else None  # where the file's head is the release's
    model_name = model_name or (release.model if release else None)
    path = fetch(path)
    _, info = read_checkpoint(path)
    if info.format == "vitlab" and model_name is None:  # a vitlab file, or a folder vitlab pushed (its weights file)
        return load_model(path / "model.safetensors" if path.is_dir() else path)
    arch = dict(info.architecture)
    family = arch.pop("family")
    labels = arch.pop("labels", None) or labels  # the file's own names first (a Hugging Face id2label)
    needs_name = arch.pop("needs_model_name", None)
    decides = info.converter.decides if info.converter else None
    if model_name is not None:
        config = get_config(model_name, **{**release_overrides, **(
            arch if decides is None else {k: arch[k] for k in decides if k in arch})})
    elif needs_name:
        raise ValueError(f"{path}: {needs_name}; name the model: --model NAME (vitlab models)")
    else:
        config = config_type(family)(**arch)
    return load_weights(build_model(config.named(labels), model_name), path)


def convert(src: str | os.PathLike, dst: str | os.PathLike, model_name: str | None = None) -> Path:
    """Any supported checkpoint in, vitlab safetensors (weights + config) out. `dst` must be a new .safetensors
    path: never `src` itself (the source is read, never written), never another format's name."""
    dst = Path(dst)
    if dst.suffix != ".safetensors":
        raise ValueError(f"{dst}: vitlab convert writes safetensors; give a destination ending in .safetensors")
    if dst.exists() and Path(src).exists() and os.path.samefile(src, dst):
        raise ValueError(f"{dst} is the source itself: converting it in place would overwrite what is being read; "
                         f"give another destination")
    if Path(src).is_dir() and Path(src).resolve() in dst.resolve().parents:
        raise ValueError(f"{dst} lies in the source folder {src}, which is read as one model (its config and "
                         f"weights): writing there could replace its own weights. Give a destination outside it")
    if dst.is_dir():
        raise ValueError(f"{dst} is a folder; give the .safetensors file to write")
    model = model_from_checkpoint(src, model_name)
    preprocessing = preprocessing_for(src)  # the source's (its release's, its hub files'), kept with the weights
    return save_weights(model, dst, {PREPROCESSING_KEY: json.dumps(preprocessing.to_dict())} if preprocessing else None)
