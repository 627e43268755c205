"""The command line's options for a run of any task: `add_task_options` gathers every task's EvalOptions or
PredictOptions into one parser, `task_options` picks what the run's task takes. The flags themselves are generated
by engine/flags.py."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..engine.flags import add_config_options, flag_of, shown_default


def add_task_options(parser: argparse.ArgumentParser, attribute: str) -> list[str]:
    """One flag per field of every task's options dataclass named `attribute` ("EvalOptions", "PredictOptions"),
    in a group per task; a field several tasks share is one flag, its help saying what it means for each. Returns
    the field names added (what `task_options` picks from the parsed arguments)."""
    from ..tasks import TASKS

    added: list[str] = []
    for name, task in TASKS.items():
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

