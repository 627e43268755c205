"""`vitlab completion bash|zsh|fish`: a shell completion script for vitlab's commands, their options, and the
values the options take (task names, model names, release tags, choices), generated from the parser the command line
itself is built from and the registries it reads, so it completes what this version of vitlab accepts.

    eval "$(vitlab completion bash)"                    # in ~/.bashrc
    vitlab completion zsh > "${fpath[1]}/_vitlab"       # or eval "$(vitlab completion zsh)" in ~/.zshrc
    vitlab completion fish > ~/.config/fish/completions/vitlab.fish"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ..commands import command

SHELLS = ("bash", "zsh", "fish")


@command("completion", order=900)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("completion", help="print a shell completion script (bash, zsh or fish)",
                              description="Print a completion script for vitlab's commands, options, task names, "
                              "model names and release tags. bash: eval \"$(vitlab completion bash)\" in ~/.bashrc; "
                              "zsh: eval \"$(vitlab completion zsh)\" in ~/.zshrc; fish: vitlab completion fish > "
                              "~/.config/fish/completions/vitlab.fish")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print({"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell](spec()), end="")
    return 0


@dataclass
class Option:
    flags: list[str]
    help: str
    values: list[str] | None  # the words it takes; None: a path (or anything)
    takes_value: bool


@dataclass
class Command:
    name: str
    help: str
    options: list[Option] = field(default_factory=list)
    names_a_model: bool = False  # a positional that is a run folder or a model by name
    positional_values: list[str] = field(default_factory=list)  # the words a positional takes (its choices)


def spec() -> list[Command]:
    """Every command with its options and what each takes, read from the command line's own parser."""
    from ..models import list_models, list_pretrained
    from .main import build_parser

    models = list_models()
    tags = [release.tag for release in list_pretrained()]
    by_dest = {"model": models, "weights": ["best", "last", "ema", *tags], "source_task": None, "task": None}
    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in subparsers._choices_actions}
    commands = [Command("", parser.description or "", _options(parser, by_dest))]
    for name, command_parser in subparsers.choices.items():
        names_a_model = any(not action.option_strings and action.metavar == "RUN_OR_NAME"
                            for action in command_parser._actions)
        choices = [str(choice) for action in command_parser._actions if not action.option_strings
                   and not isinstance(action, argparse._SubParsersAction) for choice in (action.choices or ())]
        commands.append(Command(name, helps.get(name, ""), _options(command_parser, by_dest), names_a_model,
                                choices))
    return commands


def _options(parser: argparse.ArgumentParser, by_dest: dict[str, list[str] | None]) -> list[Option]:
    options = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        takes_value = action.nargs != 0
        values = [str(choice) for choice in action.choices] if action.choices else by_dest.get(action.dest)
        if action.dest in ("task", "source_task") and not values:
            from ..tasks import TASKS

            values = list(TASKS)
        help_text = " ".join((action.help or "").split("(default")[0].split())
        options.append(Option(list(action.option_strings), help_text, values if takes_value else None, takes_value))
    return options


def _words(words: list[str]) -> str:
    return " ".join(words)


def bash_script(commands: list[Command]) -> str:
    top = commands[0]
    subcommands = [c.name for c in commands[1:]]
    tags = next(o.values for c in commands for o in c.options if o.flags[-1] == "--weights" and o.values)
    release_tags = [tag for tag in tags if tag not in ("best", "last", "ema")]
    value_cases, option_cases, positional_cases = [], [], []
    for c in commands[1:]:
        for option in c.options:
            if not option.takes_value:
                continue
            pattern = "|".join(f'"{c.name} {flag}"' for flag in option.flags)
            words = f'-W "{_words(option.values)}"' if option.values else "-f"
            files = ' $(compgen -f -- "$cur")' if option.flags[-1] == "--weights" else ""  # a file, too
            value_cases.append(f'        {pattern}) COMPREPLY=($(compgen {words} -- "$cur"){files}); return;;')
        flags = _words([flag for option in c.options for flag in option.flags])
        option_cases.append(f'        {c.name}) words="{flags}";;')
        if c.names_a_model:
            positional_cases.append(f'            {c.name}) COMPREPLY=($(compgen -W "{_words(release_tags)}" '
                                    f'-- "$cur") $(compgen -f -- "$cur"));;')
        elif c.positional_values:
            positional_cases.append(f'            {c.name}) COMPREPLY=($(compgen -W "{_words(c.positional_values)}" '
                                    f'-- "$cur"));;')
    return f"""# vitlab's bash completion: eval "$(vitlab completion bash)" (in ~/.bashrc), or save it as
# ~/.local/share/bash-completion/completions/vitlab. Generated by vitlab from its own parser.
_vitlab() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="" i words
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{_words(subcommands)} {_words([f for o in top.options for f in o.flags])}" -- "$cur"))
        return
    fi
    case "$cmd $prev" in
{chr(10).join(value_cases)}
    esac
    case "$cmd" in
{chr(10).join(option_cases)}
        *) words="";;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        case "$cmd" in
{chr(10).join(positional_cases)}
            *) COMPREPLY=($(compgen -f -- "$cur"));;
        esac
    fi
}}
complete -o filenames -o bashdefault -F _vitlab vitlab
"""


def zsh_script(commands: list[Command]) -> str:
    """zsh runs the bash function through its bashcompinit layer, the usual way for a tool with one generated
    completion."""
    return ("#compdef vitlab\n# vitlab's zsh completion: eval \"$(vitlab completion zsh)\" in ~/.zshrc (after "
            "compinit).\nautoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
            + bash_script(commands))


def fish_script(commands: list[Command]) -> str:
    def quoted(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    subcommands = [c.name for c in commands[1:]]
    tags = next(o.values for c in commands for o in c.options if o.flags[-1] == "--weights" and o.values)
    names = _words([tag for tag in tags if tag not in ("best", "last", "ema")])
    lines = ["# vitlab's fish completion: vitlab completion fish > ~/.config/fish/completions/vitlab.fish",
             "complete -c vitlab -f"]
    for c in commands[1:]:
        lines.append(f"complete -c vitlab -n '__fish_use_subcommand' -a {c.name} -d {quoted(c.help[:80])}")
    for c in commands:
        condition = ("__fish_use_subcommand" if not c.name else f"__fish_seen_subcommand_from {c.name}")
        for option in c.options:
            parts = [f"complete -c vitlab -n '{condition}'"]
            for flag in option.flags:
                parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
            if option.takes_value:
                parts.append(f"-x -a {quoted(_words(option.values))}" if option.values else "-r -F")
            parts.append(f"-d {quoted(option.help[:80])}")
            lines.append(" ".join(parts))
        if c.names_a_model:
            lines.append(f"complete -c vitlab -n '__fish_seen_subcommand_from {c.name}' -F -a {quoted(names)}")
        elif c.positional_values:
            lines.append(f"complete -c vitlab -n '__fish_seen_subcommand_from {c.name}' -a "
                         f"{quoted(_words(c.positional_values))}")
    lines.append(f"# commands: {' '.join(subcommands)}")
    return "\n".join(lines) + "\n"
