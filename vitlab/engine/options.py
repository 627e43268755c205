"""One home per option: a dataclass field carries its default and its help text, and the config validates itself.

    @dataclass(frozen=True)
    class LoopConfig:
        lr: float = option(1e-3, "peak learning rate, reached at the end of the warm-up")

        def __post_init__(self):
            check(self.lr > 0, "lr", "must be positive", self.lr)

The command line is generated from the fields (`engine/flags.py`); library code names the parameter
(`lr`), and the command line shows its flag (`--lr`) by catching `OptionError`, which knows which field it is
about.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class OptionError(ValueError):
    """A bad value for one named option. `str()` names the parameter; `as_flag()` names the command-line flag."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{name} {problem}")

    def as_flag(self) -> str:
        return f"--{self.name.replace('_', '-')} {self.problem}"


class FixedOptionsError(ValueError):
    """Options that cannot change where they were given (a resumed run keeps its own)."""

    def __init__(self, names: list[str], allowed: tuple[str, ...]) -> None:
        self.names, self.allowed = names, allowed
        super().__init__(self._message(lambda name: name))

    def _message(self, show) -> str:
        return (f"a resumed run keeps its own options; these cannot change: {', '.join(map(show, self.names))} "
                f"(only {', '.join(map(show, self.allowed))} can)")

    def as_flag(self) -> str:
        return self._message(lambda name: "--" + name.replace("_", "-"))


def option(default: Any = dataclasses.MISSING, help: str = "", *, choices: tuple | None = None,
           flag: str | None = None, metavar: str | None = None, cli: bool = True, default_factory: Any = None,
           default_text: str | None = None, repeat: bool = False, valued: bool = False, upload: bool = False,
           group: str | None = None) -> Any:
    """A dataclass field with the metadata the command line is generated from.

    `choices` are also checked by `check_choices`; `flag` renames the flag (e.g. "--no-hflip" for a field
    whose default is True); `cli=False` keeps a field out of the command line (a dict of model overrides);
    `default_text` says what the default is where the value itself would mislead ("the recipe's"); `repeat`: the
    flag may be given several times, each adding one value to a list (`--degradation sr2 --degradation sr4`);
    `valued`: a bool flag that takes a value (`--strict false`) rather than switching one way; `upload`: a server
    option that is an uploaded image (a file field of the form, a picture input of the page), never a flag;
    `group`: where `--help` and a recipe file put it (GROUPS); None: the task's own options (the loop's: training).
    """
    metadata = {"help": help, "choices": choices, "flag": flag, "metavar": metavar, "cli": cli and not upload,
                "default_text": default_text, "repeat": repeat, "valued": valued, "upload": upload, "group": group}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# the groups a command's options are shown in, and a recipe file may nest them under, in this order; a task's own
# options come last, under the task's name
GROUPS = ("run", "training", "data", "model")


def check(ok: bool, name: str, expected: str, value: Any) -> None:
    """Raise an OptionError for `name` unless `ok`: "lr must be positive, got -1"."""
    if not ok:
        raise OptionError(name, f"must be {expected}, got {value!r}")


def check_choices(config: Any) -> None:
    """Every field declared with `choices` holds one of them."""
    for field in dataclasses.fields(config):
        choices = field.metadata.get("choices")
        value = getattr(config, field.name)
        if choices and value is not None and value not in choices:
            raise OptionError(field.name, f"must be one of {', '.join(map(str, choices))}, got {value!r}")


def split_options(options: dict[str, Any], *configs: type) -> list[dict[str, Any]]:
    """Share out keyword options among config classes by field name; an option no class has is an error that
    lists the valid ones."""
    names = [{field.name for field in dataclasses.fields(cls)} for cls in configs]
    unknown = [key for key in options if not any(key in n for n in names)]
    if unknown:
        valid = sorted(set().union(*names))
        raise TypeError(f"unknown option(s) {', '.join(map(repr, unknown))}; valid options: {', '.join(valid)}")
    return [{key: value for key, value in options.items() if key in n} for n in names]


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """A config rebuilt from its saved JSON form (lists back to tuples where the default is a tuple; unknown
    keys, written by other versions, left out)."""
    fields = {field.name: field for field in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            continue
        default = fields[key].default
        kwargs[key] = tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value
    return cls(**kwargs)
