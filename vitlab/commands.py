"""Every `vitlab` command, wherever it is defined. A module named `*_cmd.py` under vitlab/cli/ (the generic commands:
train, eval, predict, serve, ...), vitlab/data/ (the datasets' own: make-scenes, fetch-photos) or a task package (a
task's own: restore, sample, translate, ...) registers its command with `@command`:

    @command("restore", order=150)
    def add_parser(subparsers):
        p = subparsers.add_parser("restore", help=...)
        ...
        p.set_defaults(run=run)

The command line builds its parser from COMMANDS (the first lookup imports those modules), so no list names them; a
command defined outside vitlab registers the same way. `order` is where `vitlab --help` lists it, lowest first.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import Registry


@dataclass(frozen=True)
class Command:
    name: str
    add_parser: Callable[[argparse._SubParsersAction], Any]  # adds the command's parser, its `run` as a default
    order: int = 1000


COMMANDS: Registry[Command] = Registry("command", discover=("vitlab.cli", "vitlab.data", "vitlab.tasks"), walk=True,
                                       matches=lambda module: module.endswith("_cmd"),
                                       order=lambda command: command.order)


def command(name: str, order: int = 1000) -> Callable:
    """Decorator of a function `add_parser(subparsers)`: `vitlab NAME` is the parser it adds."""
    def register(add_parser: Callable[[argparse._SubParsersAction], Any]) -> Callable:
        COMMANDS.register(name, Command(name, add_parser, order))
        return add_parser

    return register
