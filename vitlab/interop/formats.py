"""Reading any checkpoint vitlab knows: its own files directly, every other layout through the one registered
converter that claims it (converters.py; each family's `<family>_formats.py` registers its own).

`read_checkpoint(path)` returns the state dict in vitlab's layout plus what the file says about the model
(`CheckpointInfo`): its format, its family, the config fields it determines (`architecture`) and the LayerNorm
epsilon where it says one (Hugging Face's default is 1e-12, timm's and JAX's 1e-6).

    a folder                       a Hugging Face model folder: config.json + model.safetensors (or pytorch_model.bin,
                                   or diffusers' diffusion_pytorch_model.*)
    .safetensors / .pth / .bin     a state dict; a config.json beside it is read too
    .npz                           arrays (a Google ViT checkpoint), read without unpickling
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..checkpoint import CONFIG_KEY, load_state, read_state_dict, set_norm_eps
from ..reading import read_json, reading
from .converters import CheckpointFile, Converter, State, converter_for, known_formats


@dataclass
class CheckpointInfo:
    format: str  # "vitlab", or what the converter says the file is: "timm", "huggingface", "official", ...
    norm_eps: float | None = None  # None: the file does not say
    architecture: dict[str, Any] = field(default_factory=dict)  # config fields the file determines, with "family"
    metadata: dict[str, str] = field(default_factory=dict)
    converter: Converter | None = None  # None: a vitlab file


def read_checkpoint(path: str | os.PathLike, *, offline: bool | None = None
                    ) -> tuple[dict[str, torch.Tensor], CheckpointInfo]:
    """`path`: a file or folder, or a release tag or hf-hub:org/name, fetched through the cache (interop/hub.py)."""
    from .hub import fetch

    path = fetch(path, offline=offline)
    metadata: dict[str, str] = {}
    if path.is_dir():
        state, hf_config, metadata = _read_huggingface_folder(path)
        if CONFIG_KEY in metadata:  # a folder vitlab wrote (a pushed run): its weights file names its model
            return state, CheckpointInfo("vitlab", None, json.loads(metadata[CONFIG_KEY]), metadata)
    elif path.suffix == ".npz":
        state, hf_config = _read_npz(path), None
    else:
        state, metadata = read_state_dict(path)
        if CONFIG_KEY in metadata:  # vitlab's own file names its model: nothing to work out
            return state, CheckpointInfo("vitlab", None, json.loads(metadata[CONFIG_KEY]), metadata)
        beside = path.parent / "config.json"
        hf_config = read_json(beside, "a Hugging Face config.json") if beside.is_file() else None
    converter = converter_for(state, hf_config, str(path))
    if converter is None:
        raise ValueError(f"{path} is not a checkpoint vitlab can read: its keys ({_some_keys(state)}) fit none of the "
                         f"formats it knows: {known_formats()}")
    converted = converter.convert(state, hf_config)
    architecture = {"family": converter.family,
                    **converter.architecture(converted, CheckpointFile(path, hf_config, state))}
    file_labels = labels_of(hf_config)
    if file_labels and "labels" not in architecture:
        architecture["labels"] = file_labels
    return converted, CheckpointInfo(converter.source(state, hf_config), architecture.get("norm_eps"), architecture,
                                     metadata, converter)


def labels_of(hf_config: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The class names a Hugging Face config.json gives, by index: transformers' `id2label` (every index from 0,
    and not its LABEL_0, LABEL_1, ... placeholders, which name nothing) or timm's `label_names`; None where it
    gives none. Read, never invented."""
    if not hf_config:
        return None
    id2label = hf_config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            indexed = {int(key): str(name) for key, name in id2label.items()}
        except (TypeError, ValueError):
            return None
        if sorted(indexed) != list(range(len(indexed))):
            return None
        names = tuple(indexed[i] for i in range(len(indexed)))
        return None if all(re.fullmatch(r"LABEL_\d+", name) for name in names) else names
    names = hf_config.get("label_names") or (hf_config.get("pretrained_cfg") or {}).get("label_names")
    return tuple(str(name) for name in names) if isinstance(names, list) and names else None


def convert_state(state: State, what: str = "the state dict") -> State:
    """A state dict in another library's layout in vitlab's names; one no converter claims is returned as it is
    (vitlab's own layout)."""
    converter = converter_for(state, None, what)
    return converter.convert(state, None) if converter else state


def _some_keys(state: State, count: int = 4) -> str:
    keys = list(state)
    return ", ".join(keys[:count]) + (f", … ({len(keys)} in all)" if len(keys) > count else "") if keys else "none"


def _read_huggingface_folder(folder: Path) -> tuple[State, dict[str, Any], dict[str, str]]:
    config_path = folder / "config.json"
    names = ("model.safetensors", "pytorch_model.bin", "diffusion_pytorch_model.safetensors",
             "diffusion_pytorch_model.bin")  # transformers', then diffusers' file names
    weights = [folder / name for name in names if (folder / name).is_file()]
    if not config_path.is_file() or not weights:
        raise FileNotFoundError(
            f"{folder} is not a Hugging Face model folder: expected config.json and model.safetensors "
            f"(or pytorch_model.bin); found {sorted(p.name for p in folder.iterdir())}"
        )
    state, metadata = read_state_dict(weights[0])
    return state, read_json(config_path, "a Hugging Face config.json"), metadata


def _read_npz(path: Path) -> State:
    with reading(path, "a NumPy .npz archive"), np.load(path, allow_pickle=False) as archive:  # arrays only
        return {key: torch.from_numpy(np.ascontiguousarray(archive[key])) for key in archive.files}


def load_weights(model: nn.Module, source: str | os.PathLike | dict[str, torch.Tensor], *, strict: bool = True,
                 offline: bool | None = None) -> nn.Module:
    """Load weights into `model`: a state dict, a file or folder in any supported format (vitlab or timm
    safetensors/.pth/.bin, a Hugging Face folder or file, a Google .npz, the official releases' files), detected
    from the file; or released weights by name, fetched once into the Hugging Face cache: a release tag
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k", `vitlab.list_pretrained()`) or "hf-hub:org/name[@revision]".

    Strict: keys that do not fit are an error listing them, with two exceptions the model's hook makes and warns
    about (what fine-tuning expects to differ): a classification head for another class count (the model keeps its
    fresh one) and position embeddings for another grid (resampled). Where the checkpoint and the model both name
    their classes, the classifier is matched by name first (models/adapt.py's match_classes: the same names in
    another order are reordered, a subset keeps its rows, other names start fresh, each said in a warning).
    `strict=False` loads what fits and warns.
    `offline`: read the cache only (default: HF_HUB_OFFLINE). The LayerNorm epsilon is taken from the checkpoint
    where it says one (Hugging Face's config.json).
    """
    labels = None
    if isinstance(source, dict):
        state = convert_state(source)  # another library's names (an official DETR's, ...), if any
    else:
        from .hub import release_named

        release = release_named(source)
        state, info = read_checkpoint(source, offline=offline)
        if info.norm_eps is not None:
            set_norm_eps(model, info.norm_eps)
        # the checkpoint's classes: its file's own (vitlab's config, an id2label), else its release's
        labels = info.architecture.get("labels") or (release.labels() if release and release.labels else None)
    load_state(model, state, strict=strict, labels=labels)
    config = getattr(model, "config", None)
    if labels and hasattr(config, "named") and not config.labels:
        model.config = config.named(tuple(labels))  # a model built without names takes the checkpoint's, where
        # its head is the checkpoint's size (named() leaves a head of another size unnamed)
    return model
