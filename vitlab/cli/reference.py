"""The command-line reference as Markdown, generated from the parser (itself generated from the option
dataclasses), so the documentation site's pages cannot drift from what `vitlab ... --help` says.

    markdown_reference(build_parser())   # every command: usage, description, a table of its options per group
    task_reference("detection")          # one task's options, recipe, evaluation and prediction options
"""

from __future__ import annotations

import argparse
import dataclasses

from ..engine.flags import flag_of, shown_default


def _cell(text: str) -> str:
    """Help text as one table cell: on one line, its bars and brackets escaped (`[val/]` is not a link)."""
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        if action.choices:
            value = " {" + ",".join(map(str, action.choices)) + "}"
        else:
            value = f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _options_table(actions: list[argparse.Action]) -> list[str]:
    rows = [action for action in actions if not isinstance(action, argparse._HelpAction)
            and action.help != argparse.SUPPRESS]
    if not rows:
        return []
    return ["| option | what it does |", "| --- | --- |",
            *(f"| {_flags(action)} | {_cell(action.help or '')} |" for action in rows), ""]


def markdown_reference(parser: argparse.ArgumentParser, heading: str = "##") -> str:
    """Every subcommand of `parser`: its one-line purpose, usage, description and options, group by group."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    purposes = {choice.dest: choice.help for choice in subparsers._choices_actions}
    lines = [_cell(parser.description or ""), "", "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`{parser.prog} {name}`](#{parser.prog}-{name}) | {_cell(purposes.get(name, ''))} |"
              for name in subparsers.choices]
    lines += ["", "Options every command takes: " + ", ".join(
        f"{_flags(a)} ({_cell(a.help)})" for a in parser._actions
        if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))), ""]
    for name, command in subparsers.choices.items():
        lines += [f"{heading} {parser.prog} {name}", "", _cell(command.description or purposes.get(name, "")), "",
                  "```text", command.format_usage().strip(), "```", ""]
        for group in command._action_groups:
            table = _options_table(group._group_actions)
            if not table:
                continue
            title = "options" if group.title in ("options", "optional arguments") else group.title
            lines += [f"**{title}**" + (f" — {_cell(group.description)}" if group.description else ""), "", *table]
    return "\n".join(lines).rstrip() + "\n"


def _fields_table(cls: type) -> list[str]:
    fields = [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]
    if not fields:
        return ["none", ""]
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for field in fields:
        default = field.metadata.get("default_text") or (
            shown_default(field.default) if field.default is not dataclasses.MISSING else
            shown_default(field.default_factory()) if field.default_factory is not dataclasses.MISSING else "")
        choices = field.metadata.get("choices")
        what = field.metadata.get("help", "") + (f" (one of {', '.join(map(str, choices))})" if choices else "")
        rows.append(f"| `{flag_of(field)}` | {_cell(default)} | {_cell(what)} |")
    return [*rows, ""]


def task_reference(name: str, heading: str = "##") -> str:
    """A task's options for `vitlab train --task NAME`, its recipe's loop settings, the metric that selects the
    best checkpoint, and the options of `vitlab eval` / `predict` / `serve` on one of its runs."""
    from ..tasks import TASKS

    if name not in TASKS:
        raise KeyError(f"no task {name!r}; the tasks are {', '.join(TASKS)}")
    task = TASKS[name]
    metric, direction = task.best
    lines = [f"{heading} Training options", "",
             f"`vitlab train --task {name}` takes these beside the loop's options (every task's: "
             "[the command-line reference](../reference/cli.md#vitlab-train)).", "", *_fields_table(task.Config),
             f"{heading} Recipe", "", "The loop's defaults for this task, where an option is not given:", "",
             "| recipe | settings |", "| --- | --- |"]
    for recipe, settings in task.recipes().items():
        lines.append(f"| {recipe} | " + _cell(", ".join(f"`--{k.replace('_', '-')} {shown_default(v)}`"
                                                         for k, v in settings.items())) + " |")
    lines += ["", f"The best checkpoint is the one with the {'highest' if direction == 'max' else 'lowest'} "
              f"`{metric}` on the validation data; the test data is scored once, on that checkpoint.", ""]
    for title, cls in (("vitlab eval", task.EvalOptions), ("vitlab predict", task.PredictOptions),
                       ("vitlab serve", task.ServeOptions)):
        lines += [f"{heading} `{title}` on a {name} run", "", *_fields_table(cls)]
    if task.commands:
        lines += [f"Its own commands: {', '.join(f'`vitlab {c}`' for c in task.commands)}.", ""]
    return "\n".join(lines).rstrip() + "\n"
