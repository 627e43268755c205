"""argparse flags generated from option dataclasses (options.py): one flag per field, its help and default taken
from the field, so an option is declared once. The command line (cli/) and the commands a task package brings build
their parsers with these.

Every generated option defaults to "not given" (argparse.SUPPRESS): `given(args)` holds only what the user typed,
and the library resolves the rest (the task's recipe, then the dataclass default)."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any


def _value_type(hint: Any) -> tuple[Any, int | None]:
    """(the type argparse converts with, nargs) of a field's type hint: int | None -> (int, None)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is list:  # a repeated flag: each one value
        return typing.get_args(hint)[0], None
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        return args[0], len(args)
    return hint, None


def shown_default(default: Any) -> str:
    if default is None or default is False:
        return "off"
    if default is True:
        return "on"
    return " ".join(map(str, default)) if isinstance(default, tuple) else str(default)


def _true_or_false(text: str) -> bool:
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return words[text.lower()]


WEIGHTS_HELP = ("the run's last, best or ema checkpoint, or other weights for the run's model: a file, a release "
                "tag (vitlab models --pretrained) or hf-hub:org/name[@revision]")


SELECTED_WEIGHTS = "best, the one selected on validation data; last where the run kept no best"


def add_weights_flag(parser: argparse.ArgumentParser, default: str | None, default_text: str) -> None:
    """`--weights`, as every command that loads a run's model takes it."""
    parser.add_argument("--weights", default=default, metavar="WEIGHTS", help=f"{WEIGHTS_HELP} (default: "
                        f"{default_text})")


SOURCE_HELP = ("a run folder from `vitlab train`, a release tag (vitlab models --pretrained), hf-hub:org/name[@rev] "
               "or a weights file (a vitlab .safetensors, a timm or transformers checkpoint)")


def add_source_arguments(parser: argparse.ArgumentParser, dest: str = "run_dir", *, task: bool = True) -> None:
    """The positional model every inference command takes (a run or a model by name: tasks/sources.py) and, with
    `task`, `--task` for a named model whose family does several."""
    parser.add_argument(dest, metavar="RUN_OR_NAME", help=SOURCE_HELP)
    if task:
        parser.add_argument("--task", dest="source_task", metavar="TASK", help="for a model by name whose family "
                            "does several tasks: which one (default: its family's only task)")


def _short_metavar(name: str, value_type: Any) -> str:
    """A value's name in the help: the option's own where short (--lr LR), else its kind (--batch-size N), so that
    a flag and its value fit beside their help."""
    if len(name) <= 6:
        return name.upper()
    return {int: "N", float: "X"}.get(value_type, "VALUE")


def flag_of(field: dataclasses.Field) -> str:
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def add_config_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type,
                       skip: set[str] | None = None, rename: dict[str, str] | None = None,
                       default_texts: dict[str, str] | None = None,
                       groups: tuple[str | None, ...] | None = None) -> list[str]:
    """Add one option per field of `cls` (those with cli metadata), skipping names in `skip`; `rename` maps a
    field to another flag; `default_texts` says a field's default where it depends on the task; `groups`: only the
    fields of these groups (options.GROUPS; None stands for the class's own). Returns the field names added."""
    hints = typing.get_type_hints(cls)
    added = []
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if not meta.get("cli", True) or field.name in (skip or set()):
            continue
        if groups is not None and meta.get("group") not in groups:
            continue
        flag = (rename or {}).get(field.name) or flag_of(field)
        default = field.default
        shown = (default_texts or {}).get(field.name) or meta.get("default_text") or shown_default(default)
        value_type, nargs = _value_type(hints[field.name])
        switch = value_type is bool and not meta.get("valued") and not meta.get("repeat")
        text = meta.get("help", "")
        if not (switch and default is False and shown == "off"):  # a switch is off until given: nothing to say
            text += f" (default: {shown})"
        kwargs: dict[str, Any] = {"dest": field.name, "default": argparse.SUPPRESS, "help": text}
        if meta.get("repeat"):
            kwargs.update(action="append", type=value_type, metavar=meta.get("metavar"))
        elif value_type is bool and meta.get("valued"):
            kwargs.update(type=_true_or_false, metavar="true|false")
        elif value_type is bool:
            kwargs["action"] = "store_false" if default is True else "store_true"
        else:
            kwargs.update(type=value_type, metavar=meta.get("metavar") or _short_metavar(field.name, value_type))
            if nargs:
                kwargs["nargs"] = nargs
            if meta.get("choices"):
                kwargs["choices"] = meta["choices"]
                kwargs.pop("metavar")
        parser.add_argument(flag, **kwargs)
        added.append(field.name)
    return added


def given(args: argparse.Namespace, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The options the user typed (generated options are absent from the namespace otherwise)."""
    return {key: value for key, value in vars(args).items()
            if key not in ("command", "run", "offline", *exclude)}
