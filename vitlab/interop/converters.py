"""Converters: how a checkpoint in another library's layout becomes vitlab's, one registered per layout.

Each family's `interop/<family>_formats.py` registers its converters on import with `register_converter`; the
generic reader (formats.py) hands a checkpoint to the one converter whose `matches` says yes. A converter:

    name          what the checkpoint is, for messages ("a timm ViT state dict")
    family        the model family it builds (its config class comes from the model registry)
    matches       (state, hf_config) -> bool: whether the state dict (and the config.json beside it, if any) is its
    convert       (state, hf_config) -> the state dict in vitlab's key names and layouts
    architecture  (state, file) -> the config fields the file determines, read from the converted state (`file`: its
                  path, config.json and unconverted state); may name another "family" (a ViT file with a
                  distillation token is a DeiT), and under "needs_model_name" what it cannot tell without one
    source        (state, hf_config) -> the format `CheckpointInfo.format` reports ("timm", "official", ...)
    decides       with a model name given, the fields still taken from the file (None: every field it determines)

Converters must not overlap: a checkpoint two of them claim is an error naming both, never a silent choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..registry import Registry

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class CheckpointFile:
    """What a converter may read besides the converted state: the file's path, the Hugging Face config.json beside
    it (None: none), and the state as the file holds it."""

    path: Path
    hf_config: dict[str, Any] | None
    original: State


@dataclass(frozen=True)
class Converter:
    name: str
    family: str
    matches: Callable[[State, dict[str, Any] | None], bool]
    convert: Callable[[State, dict[str, Any] | None], State]
    architecture: Callable[[State, CheckpointFile], dict[str, Any]]
    source: Callable[[State, dict[str, Any] | None], str]
    decides: tuple[str, ...] | None = None


# every converter by name; the first lookup imports the interop package's `*_formats` modules, which register
# theirs (registering a name again replaces it: a module reloaded)
CONVERTERS: Registry[Converter] = Registry("converter", discover=__name__.rpartition(".")[0],
                                           matches=lambda module: module.endswith("_formats"), replace=True)


def register_converter(converter: Converter) -> Converter:
    """Register a converter under its name."""
    return CONVERTERS.register(converter.name, converter)


def registered_converters() -> list[Converter]:
    """Every registered converter, the interop package's own and those registered from elsewhere."""
    return list(CONVERTERS.values())


def converter_for(state: State, hf_config: dict[str, Any] | None, what: str) -> Converter | None:
    """The one converter that claims `state`; None when none does. Two claims are an error (`what` names the
    checkpoint in it)."""
    claims = [c for c in registered_converters() if c.matches(state, hf_config)]
    if len(claims) > 1:
        raise ValueError(f"{what} looks like {' and like '.join(c.name for c in claims)}; vitlab cannot tell which "
                         f"it is. Convert it with the library that wrote it to a plain state dict of one layout")
    return claims[0] if claims else None


def known_formats() -> str:
    return "; ".join(c.name for c in registered_converters())
