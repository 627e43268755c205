"""Recipes as files: `vitlab train --config FILE` reads one, `--print-config` writes one.

A recipe is a YAML or JSON mapping of `vitlab train`'s options by their long names (`batch_size` or `batch-size`),
flat or nested under the groups `--help` shows them in (`run`, `training`, `data`, `model`, and the task's own
options under the task's name), with `task` naming the task:

    task: detection
    training: {epochs: 50, lr: 1.0e-4}
    data: {data: data/scenes}
    model: {model: detr_small, num_queries: 100}

A run's own config.json is a recipe too (its `task`, `config` and `loop`; the rest is what the run recorded about
its data and machine, not options), so `vitlab train --config runs/a/config.json --out runs/b` repeats run a. A
value left null is the task's default; a flag on the command line wins over the file."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import typing
from pathlib import Path
from typing import Any

from ..engine.config import LoopConfig
from ..engine.flags import _true_or_false, _value_type
from ..engine.options import GROUPS, OptionError
from ..tasks.launch import DEFAULT_TASK

# what a recipe may hold beside the options of the loop and of its task
RUN_KEYS = ("out", "overwrite")
# a run's config.json: these sections hold its options; every other one is what the run recorded
RECORD_SECTIONS = ("config", "loop")
# a length given on the command line replaces the file's length of the other kind (a run is epochs or steps long)
REPLACES = {"epochs": "steps", "steps": "epochs"}


class RecipeError(ValueError):
    """A recipe file that cannot be read as options; the message names the file and the key."""


def read_recipe(path: str | Path, tasks: dict[str, type],
                task: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """(the task: `task` as given on the command line, else the file's, else None; the file's options by field
    name, converted to the fields' types). Unknown keys are refused with their close matches; so are another task's
    options, naming that task, and a file for another task than `task`."""
    path = Path(path)
    data = _load(path)
    named = data.pop("task", None)
    if named is not None and named not in tasks:
        raise RecipeError(f"{path}: task {named!r} is not one of vitlab's ({', '.join(tasks)}){_close(named, tasks)}")
    if task is not None and named is not None and named != task:
        raise RecipeError(f"{path} is a recipe for --task {named}; drop --task {task}, or give a {task} recipe")
    task = task or named
    cls = tasks[task or DEFAULT_TASK]
    options = _known(_flatten(data, path, tasks, task), cls, tasks, task, path)
    return task, {key: _convert(key, value, _hint_of(key, cls), path) for key, value in options.items()}


def merged(from_file: dict[str, Any], typed: dict[str, Any]) -> dict[str, Any]:
    """The file's options under the ones typed on the command line; null in the file is the task's default."""
    options = {key: value for key, value in from_file.items() if value is not None}
    for key in typed:
        if key in REPLACES:
            options.pop(REPLACES[key], None)
    return {**options, **typed}


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not a text file; a recipe is YAML or JSON") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as error:  # json's and yaml's errors, with the line
        raise RecipeError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: "
                          f"{' '.join(str(error).split())}") from None
    except Exception as error:
        if type(error).__module__.startswith("yaml"):
            raise RecipeError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
        raise
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of options (`epochs: 10`), got {type(data).__name__}")
    return {str(key).replace("-", "_"): value for key, value in data.items()}


def _flatten(data: dict[str, Any], path: Path, tasks: dict[str, type], task: str | None) -> dict[str, Any]:
    if all(isinstance(data.get(section), dict) for section in RECORD_SECTIONS):  # a run's config.json
        sections = [data[section] for section in RECORD_SECTIONS]
    else:
        nests = set(GROUPS) | set(tasks)
        sections = [{key: value for key, value in data.items() if not (key in nests and isinstance(value, dict))}]
        for key, value in data.items():
            if key in nests and isinstance(value, dict):
                if key in tasks and key != (task or DEFAULT_TASK):
                    raise RecipeError(f"{path}: a section `{key}:` holds --task {key}'s options, but the recipe "
                                      f"is for --task {task or DEFAULT_TASK}")
                sections.append(value)
    flat: dict[str, Any] = {}
    for section in sections:
        for key, value in section.items():
            key = str(key).replace("-", "_")
            if key in flat and flat[key] != value:
                raise RecipeError(f"{path}: {key} is given twice, as {flat[key]!r} and as {value!r}")
            flat[key] = value
    return flat


def _known(options: dict[str, Any], cls: type, tasks: dict[str, type], task: str | None,
           path: Path) -> dict[str, Any]:
    takes = {field.name for field in dataclasses.fields(cls.Config)} | set(LoopConfig.__dataclass_fields__)
    for key in options:
        if key in takes or key in RUN_KEYS:
            continue
        owners = [name for name, other in tasks.items() if key in other.Config.__dataclass_fields__]
        if owners:
            raise RecipeError(f"{path}: {key} is an option of --task {' / '.join(owners)}, not of --task "
                              f"{task or DEFAULT_TASK}")
        raise RecipeError(f"{path}: unknown option {key!r}{_close(key, [*takes, *RUN_KEYS])}")
    return options


def _close(key: str, names: Any) -> str:
    near = difflib.get_close_matches(key, list(names), n=3)
    return f" (did you mean {' or '.join(near)}?)" if near else ""


def _hint_of(key: str, cls: type) -> Any:
    """The type of option `key`: its field's in the task's config or the loop's."""
    for config in (cls.Config, LoopConfig):
        if key in config.__dataclass_fields__:
            return typing.get_type_hints(config)[key]
    return bool if key == "overwrite" else str


def _convert(key: str, value: Any, hint: Any, path: Path) -> Any:
    """`value` as the field's type: what the command line's flag would have made of it (YAML reads 1e-3 as a
    string, JSON has no tuples)."""
    if value is None:
        return None
    base, count = _value_type(hint)
    if base is dict or typing.get_origin(base) is dict:  # a mapping option (model_overrides)
        if not isinstance(value, dict):
            raise OptionError(key, f"in {path} must be a mapping, got {value!r}")
        return value
    many = typing.get_origin(hint) is list or any(typing.get_origin(arg) is list for arg in typing.get_args(hint))
    if many or count:
        values = value if isinstance(value, (list, tuple)) else [value]
        if count and len(values) != count:
            raise OptionError(key, f"in {path} must be {count} values, got {value!r}")
        converted = [_one(key, item, base, path) for item in values]
        return tuple(converted) if count else converted
    return _one(key, value, base, path)


def _one(key: str, value: Any, kind: Any, path: Path) -> Any:
    try:
        if kind is bool:
            return value if isinstance(value, bool) else _true_or_false(str(value))
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            if isinstance(value, (dict, list, bool)):
                raise ValueError
            return str(value)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        expected = {bool: "true or false", int: "a whole number", float: "a number", str: "a text"}[kind]
        raise OptionError(key, f"in {path} must be {expected}, got {value!r}") from None
    return value


def printed_recipe(task_name: str, task_config: Any, loop: LoopConfig) -> str:
    """The resolved recipe as YAML, grouped as `--help` shows the options: what `--print-config` prints and
    `--config` reads back."""
    import yaml

    sections: dict[str, dict[str, Any]] = {group: {} for group in (*GROUPS, task_name)}
    for config, own in ((loop, "training"), (task_config, task_name)):
        for field in dataclasses.fields(config):
            value = getattr(config, field.name)
            value = list(value) if isinstance(value, tuple) else value
            sections[field.metadata.get("group") or own][field.name] = value
    recipe = {"task": task_name, **{group: values for group, values in sections.items() if values}}
    header = (f"# vitlab train --task {task_name}: every option, defaults filled from the task's recipe.\n"
              f"# Train from it: vitlab train --config FILE --out DIR (flags on the command line win; null: the "
              f"default)\n")
    return header + yaml.dump(recipe, Dumper=_recipe_dumper(), sort_keys=False, allow_unicode=True)


def _recipe_dumper() -> type:
    import yaml

    class RecipeDumper(yaml.SafeDumper):
        """Groups as blocks, a value's list on its line (`betas: [0.9, 0.999]`)."""

    RecipeDumper.add_representer(list, lambda dumper, value: dumper.represent_sequence(
        "tag:yaml.org,2002:seq", value, flow_style=True))
    return RecipeDumper
