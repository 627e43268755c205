"""The command line's options for a run of any task: `add_task_options` gathers every task's EvalOptions or
PredictOptions into one parser, `task_options` picks what the run's task takes. The flags themselves are generated
by engine/flags.py."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from ..engine.flags import add_config_options, flag_of, shown_default


def add_task_options(parser: argparse.ArgumentParser, attribute: str, only: str | None = None) -> list[str]:
    """One flag per field of every task's options dataclass named `attribute` ("EvalOptions", "PredictOptions"),
    in a group per task; a field several tasks share is one flag, its help saying what it means for each. `only`:
    that task's options alone. Returns the field names added (what `task_options` picks from the parsed
    arguments)."""
    from ..tasks import TASKS

    added: list[str] = []
    for name, task in TASKS.items():
        if only is not None and name != only:
            continue
        options = getattr(task, attribute)
        shared = [f for f in dataclasses.fields(options) if f.name in added and f.metadata.get("cli", True)]
        text = "; ".join(f"{flag_of(f)}: {f.metadata.get('help', '')} (default: "
                         f"{f.metadata.get('default_text') or shown_default(f.default)})" for f in shared)
        group = parser.add_argument_group(f"a {name} run", description=f"also: {text}" if text else None)
        added += add_config_options(group, options, skip=set(added))
    return added


def task_options(args: argparse.Namespace, names: list[str], task: Any, attribute: str) -> dict[str, Any]:
    """The task options the user typed, refused where the run's task does not take them."""
    from ..engine.options import OptionError

    typed = {key: value for key, value in vars(args).items() if key in names}
    takes = [f.name for f in dataclasses.fields(getattr(task, attribute)) if f.metadata.get("cli", True)]
    for key in typed:
        if key not in takes:
            flags = ", ".join(flag_of(f) for f in dataclasses.fields(getattr(task, attribute)) if f.name in takes)
            raise OptionError(key, f"is not an option of a {task.name} run; it takes {flags or 'none'}")
    return typed



def add_run_help(parser: argparse.ArgumentParser, describe: Callable[[str | None], argparse.ArgumentParser]) -> None:
    """`-h/--help` for a command on a run or a model by name: after the run (`vitlab eval RUN --help`), the options
    of the run's task alone; before it, the options every run takes. `describe(task or None)` builds the parser
    whose help is shown."""
    parser.add_argument("-h", "--help", action=_RunHelp, describe=describe,
                        help="show the options and exit; after a run or model: its task's own too")


class _RunHelp(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, describe: Callable, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))
        self.describe = describe

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        source = getattr(namespace, "run_dir", None)
        self.describe(task_of_source(source) if source else None).print_help()
        parser.exit()


def task_of_source(source: str) -> str | None:
    """The task of a run folder or of a released model whose family does one, read without loading weights; None
    where that takes more (an hf-hub: name, a file) or the source is not there."""
    import json
    from pathlib import Path

    from ..interop.hub import release_named
    from ..models.registry import get_config

    try:
        record = json.loads((Path(source) / "config.json").read_text())
        if isinstance(record, dict) and isinstance(record.get("task"), str):
            return record["task"]
    except (OSError, ValueError):
        pass
    try:
        release = release_named(source)
        tasks = tuple(get_config(release.model).tasks) if release else ()
    except (KeyError, ValueError):
        return None
    return tasks[0] if len(tasks) == 1 else None


def command_help_parser(name: str, description: str | None, task: str | None, attribute: str,
                        add_common: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """The help of `vitlab NAME` (eval, predict): the options every run takes (`add_common`), and the task's own
    (its `attribute` dataclass) where the run's task is known, else the line that shows them."""
    epilog = None if task else (f"A run's or model's own options: vitlab {name} RUN_OR_NAME --help.")
    p = argparse.ArgumentParser(prog=f"vitlab {name}", description=description, epilog=epilog, add_help=False)
    p.add_argument("-h", "--help", action="help", help="show the options and exit")
    add_common(p)
    if task:
        add_task_options(p, attribute, only=task)
    return p


def add_run_command(subparsers: argparse._SubParsersAction, name: str, help: str, attribute: str,
                    add_common: Callable[[argparse.ArgumentParser], None], run: Callable) -> list[str]:
    """`vitlab NAME RUN_OR_NAME ...` (eval, predict): the options every run takes (`add_common`), every task's
    `attribute` options (a run's task takes its own: `task_options`), and a `--help` that shows the run's task's.
    Returns the task options' field names."""
    p = subparsers.add_parser(name, help=help, add_help=False)
    add_run_help(p, lambda task: command_help_parser(name, help, task, attribute, add_common))
    add_common(p)
    p.set_defaults(run=run)
    return add_task_options(p, attribute)
