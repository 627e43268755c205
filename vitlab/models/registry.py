"""The model registry: named presets, `create_model(name, **overrides)` and `list_models(pattern)`.

A preset is a function registered with `@register_model` that returns a frozen config dataclass. The config
knows how to build its model (`config.build()`), so a model can be rebuilt from the config saved beside its
weights. Overrides go through `dataclasses.replace`, so a misspelt option fails loudly.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import functools
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from torch import nn

_PRESETS: dict[str, Callable[[], Any]] = {}
_CONFIG_TYPES: dict[str, type] = {}  # family name -> config class, to rebuild a model from a saved config

# names users bring from timm that mean the same as ours
OVERRIDE_ALIASES = {"embed_dim": "dim"}


def register_config(cls: type) -> type:
    """Class decorator for a family's config dataclass: a `family` class attribute, a `build()` method, and what
    `models/family.py`'s `ModelFamily` declares. Registering a family's name twice is an error (a subclass
    registers its own name)."""
    known = _CONFIG_TYPES.get(cls.family)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"model family {cls.family!r} is registered twice ({known.__qualname__} and "
                         f"{cls.__qualname__})")
    _CONFIG_TYPES[cls.family] = cls
    return cls


def config_type(family: str) -> type:
    """The config class of a registered family."""
    _import_families()
    if family not in _CONFIG_TYPES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(sorted(_CONFIG_TYPES))}")
    return _CONFIG_TYPES[family]


def list_families() -> list[type]:
    """The config class of every registered family, by family name."""
    _import_families()
    return [_CONFIG_TYPES[name] for name in sorted(_CONFIG_TYPES)]


def register_model(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Function decorator: register a preset under the function's name."""
    if fn.__name__ in _PRESETS:
        raise ValueError(f"model {fn.__name__!r} is registered twice")
    _PRESETS[fn.__name__] = fn
    return fn


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern (`"vit_*_patch16_*"`), sorted."""
    _import_families()
    return sorted(name for name in _PRESETS if fnmatch.fnmatch(name, pattern))


def list_pretrained(pattern: str = "*") -> list[Any]:
    """The released checkpoints (`Release`) the families list, whose tag ("vit_base_patch16_224.augreg2_...")
    matches a shell-style pattern, sorted by tag. A tag is the registered model's name, a dot, the release."""
    _import_families()
    found = {}
    for family_config in _CONFIG_TYPES.values():  # a family's own list only, not one its config inherits
        for tag, release in vars(family_config).get("releases", {}).items():
            if fnmatch.fnmatch(tag, pattern):
                found[tag] = release
    return [found[tag] for tag in sorted(found)]


def models_for_task(task: str, pattern: str = "*") -> list[str]:
    """The registered models whose family is trained by `task` (its `tasks`)."""
    return [name for name in list_models(pattern) if task in getattr(get_config(name), "tasks", ())]


def check_model_for_task(name: str, task: str) -> Any:
    """The config of registered model `name`, if its family is one `task` trains; else a clear error."""
    config = get_config(name)
    if task not in getattr(config, "tasks", ()):
        known = ", ".join(models_for_task(task)) or "none"
        raise ValueError(f"{name!r} is a {getattr(config, 'title', '') or config.family} model, which the {task} task "
                         f"does not train; its models: {known}")
    return config


def get_config(name: str, **overrides: Any) -> Any:
    """The config of a registered model with overrides applied."""
    _import_families()
    if name not in _PRESETS:
        close = difflib.get_close_matches(name, list(_PRESETS), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown model {name!r}{hint} (vitlab.list_models() lists all {len(_PRESETS)})")
    return apply_overrides(_PRESETS[name](), **overrides)


def apply_overrides(config: Any, **overrides: Any) -> Any:
    """`dataclasses.replace` with aliases and an error that names the valid fields."""
    valid = [field.name for field in dataclasses.fields(config)]
    # an alias applies where the config has no field of the alias's own name (a VQGAN's embed_dim is its own)
    overrides = {key if key in valid else OVERRIDE_ALIASES.get(key, key): value for key, value in overrides.items()}
    unknown = [key for key in overrides if key not in valid]
    if unknown:
        hints = [f"{key!r} (did you mean {difflib.get_close_matches(key, valid, n=1)[0]!r}?)"
                 if difflib.get_close_matches(key, valid, n=1) else repr(key) for key in unknown]
        raise TypeError(
            f"unknown option(s) {', '.join(hints)} for {type(config).__name__}; valid options: {', '.join(valid)}"
        )
    return dataclasses.replace(config, **overrides)


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build a registered model with fresh weights: `create_model("vit_small_patch16_224", num_classes=10)`.

    Loading a checkpoint is interop's job, one layer up: `vitlab.create_model(name, weights=path)` builds here,
    then loads (models never import interop).
    """
    if "weights" in overrides:
        raise TypeError("vitlab.models.create_model builds a model with fresh weights; to load a checkpoint call "
                        "vitlab.create_model(name, weights=path) or vitlab.load_weights(model, path)")
    config = get_config(name, **overrides)
    model = config.build()
    model.model_name = name
    return model


def config_to_dict(config: Any) -> dict[str, Any]:
    return {"family": config.family, **dataclasses.asdict(config)}


def config_from_dict(data: dict[str, Any]) -> Any:
    """Rebuild a config saved with `config_to_dict` (JSON turns tuples into lists; they are turned back)."""
    data = dict(data)
    cls = config_type(data.pop("family"))
    data = {key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}
    # a family whose saved form changed reads older dicts itself
    return cls.from_saved(data) if hasattr(cls, "from_saved") else cls(**data)


@functools.cache
def _import_families() -> None:
    """Import every module of this package, once: a family registers itself on import (a family defined
    elsewhere registers when its own module is imported)."""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{module.name}")
