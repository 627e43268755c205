"""The model registry: named presets, `create_model(name, **overrides)` and `list_models(pattern)`.

A preset is a function registered with `@register_model` that returns a frozen config dataclass. The config
knows how to build its model (`config.build()`), so a model can be rebuilt from the config saved beside its
weights. Overrides go through `dataclasses.replace`, so a misspelt option fails loudly.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from collections.abc import Callable
from typing import Any

from torch import nn

from ..registry import Registry
from .family import Model, check_labels

# the modules of this package register their families and presets on import: the first lookup imports them all
# (a family defined elsewhere registers when its own module is imported)
PRESETS: Registry[Callable[[], Any]] = Registry("model", discover=__name__.rpartition(".")[0])
FAMILIES: Registry[type] = Registry("model family", discover=__name__.rpartition(".")[0])  # to rebuild saved configs

# names users bring from timm that mean the same as ours
OVERRIDE_ALIASES = {"embed_dim": "dim"}


def register_config(cls: type) -> type:
    """Class decorator for a family's config dataclass: a `family` class attribute, a `build()` method, and what
    `models/family.py`'s `ModelFamily` declares. Registering a family's name twice is an error (a subclass
    registers its own name)."""
    return FAMILIES.register(cls.family, cls)


def config_type(family: str) -> type:
    """The config class of a registered family."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[family]


def list_families() -> list[type]:
    """The config class of every registered family, by family name."""
    return [FAMILIES[name] for name in sorted(FAMILIES)]


def register_model(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Function decorator: register a preset under the function's name (another function of that name is an
    error)."""
    return PRESETS.register(fn.__name__, fn)


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern (`"vit_*_patch16_*"`), sorted."""
    return sorted(name for name in PRESETS if fnmatch.fnmatch(name, pattern))


def list_pretrained(pattern: str = "*") -> list[Any]:
    """The released checkpoints (`Release`) the families list, whose tag ("vit_base_patch16_224.augreg2_...")
    matches a shell-style pattern, sorted by tag. A tag is the registered model's name, a dot, the release."""
    found = {}
    for family_config in FAMILIES.values():  # a family's own list only, not one its config inherits
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
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown model {name!r}{hint} (vitlab.list_models() lists all {len(PRESETS)})")
    return apply_overrides(PRESETS[name](), **overrides)


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
    return build_model(get_config(name, **overrides), name)


def build_model(config: Any, name: str | None = None) -> Model:
    """The model of `config` (a registered model's, fitted and overridden: `name`), with fresh weights."""
    check_labels(config)
    model = config.build()
    if not isinstance(model, Model):
        raise TypeError(f"the {config.family} family builds a {type(model).__name__}, which is not a "
                        f"vitlab.models.family.Model: subclass Model, whose defaults say what a family has not")
    model.model_name = name
    return model


def config_to_dict(config: Any) -> dict[str, Any]:
    return {"family": config.family, **dataclasses.asdict(config)}


def config_from_dict(data: dict[str, Any]) -> Any:
    """Rebuild a config saved with `config_to_dict` (JSON turns tuples into lists; they are turned back)."""
    data = dict(data)
    cls = config_type(data.pop("family"))
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"this {cls.family} config has fields {cls.__name__} does not know ({', '.join(unknown)}): it "
                         f"was written by another version of vitlab; convert the weights with that version, or load "
                         f"them into a model you create (`load_weights`)")
    return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in data.items()})
