"""`vitlab train`: train a task (image classification by default) from the command line or a recipe file, or
resume a run.

The options are generated from the configs: the loop's (shared by every task) and each task's. An option of
another task than the chosen one is refused. `--help` shows the shared options; `--task T --help` that task's, with
its own defaults."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from ..commands import command
from ..engine.config import LoopConfig
from ..engine.flags import add_config_options, given, shown_default
from ..engine.options import GROUPS
from ..tasks.launch import DEFAULT_TASK

DESCRIPTION = ("Train a model. Without options it runs the default recipe: a ViT on Fashion-MNIST. `--task` picks "
               "another task, `--config FILE` reads the options from a recipe file (flags win over it).")


def _task_classes() -> dict[str, type]:
    from ..tasks import TASKS

    return TASKS


@command("train", order=10)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """The parser that reads a command line: every task's options (a wrong task's are refused by name later). Its
    help is never shown; `--help` prints `help_parser`'s, for the task asked about."""
    tasks = _task_classes()
    p = subparsers.add_parser("train", help="train a model", description=DESCRIPTION, add_help=False,
                              usage="vitlab train [--task TASK] [--config FILE] [OPTIONS]")
    run_group = p.add_argument_group("the run")  # the groups are the command-line reference's (cli/reference.py)
    run_group.add_argument("-h", "--help", action=_TaskHelp, help=HELP_HELP)
    add_run_options(run_group, tasks)
    added = add_config_options(p.add_argument_group("training (every task)"), LoopConfig)
    for name, cls in tasks.items():
        added += add_config_options(p.add_argument_group(f"--task {name}"), cls.Config, skip=set(added))
    p.set_defaults(run=run)


HELP_HELP = "show the options (after --task T: its own) and exit"


class _TaskHelp(argparse.Action):
    """`--help`: the options of the task named before it (by --task or the --config file), else the shared ones."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        task = getattr(namespace, "task", None)
        if task is None and getattr(namespace, "config", None):
            from .recipe_file import read_recipe

            try:
                task = read_recipe(namespace.config, _task_classes())[0]
            except (OSError, ValueError):
                task = None  # the run itself says what is wrong with the file
        help_parser(task).print_help()
        parser.exit()


def help_parser(task: str | None) -> argparse.ArgumentParser:
    """The help of `vitlab train --task TASK`, grouped (the run, training, data, model, the task's own), each
    default the task's; without a task, the options every task shares and how to see a task's."""
    tasks = _task_classes()
    if task is None:
        epilog = (f"Each task has its own options (data, model, losses) and defaults: vitlab train --task TASK "
                  f"--help, TASK one of {', '.join(tasks)}. Without --task: {DEFAULT_TASK}.")
        p = argparse.ArgumentParser(prog="vitlab train", description=DESCRIPTION, epilog=epilog, add_help=False,
                                    usage="vitlab train [--task TASK] [--config FILE] [OPTIONS]")
    else:
        p = argparse.ArgumentParser(prog="vitlab train", add_help=False, description=tasks[task].__doc__ and
                                    " ".join(tasks[task].__doc__.split("\n\n")[0].split()),
                                    usage=f"vitlab train --task {task} [--config FILE] [OPTIONS]")
    run_group = p.add_argument_group("the run")
    run_group.add_argument("-h", "--help", action="help", help=HELP_HELP)
    add_run_options(run_group, tasks)
    defaults = recipe_default_texts(tasks[task]) if task else {
        key: "the task's recipe" for cls in tasks.values() for recipe in cls.recipes().values() for key in recipe}
    add_config_options(run_group, LoopConfig, groups=("run",), default_texts=defaults)
    add_config_options(p.add_argument_group("training" + (f" (defaults: {task}'s recipe)" if task else "")),
                       LoopConfig, groups=(None, "training"), default_texts=defaults)
    if task:
        for group in GROUPS[2:]:
            add_config_options(p.add_argument_group(group), tasks[task].Config, groups=(group,))
        add_config_options(p.add_argument_group(f"{task}'s own"), tasks[task].Config, groups=(None,))
    return p


def recipe_default_texts(task_class: type) -> dict[str, str]:
    """Each loop option's default for this task: "128", or "fashion-mnist: 128, folder: 64" where the task's recipes
    (by data) differ."""
    recipes = task_class.recipes()
    fields = dataclasses.fields(LoopConfig)
    base = {field.name: field.default for field in fields}
    texts = {field.name: shown_default(field.default) for field in fields  # "the task's" is this task's: the default
             if field.metadata.get("default_text") == "the task's"}
    for key in {key for recipe in recipes.values() for key in recipe}:
        shown = {name: shown_default(recipe.get(key, base[key])) for name, recipe in recipes.items()}
        texts[key] = (next(iter(shown.values())) if len(set(shown.values())) == 1
                      else ", ".join(f"{name}: {value}" for name, value in shown.items()))
    return texts


def add_run_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, tasks: dict[str, type]) -> None:
    p.add_argument("--task", choices=list(tasks), default=argparse.SUPPRESS, metavar="TASK",
                   help="what to train: " + ", ".join(f"{name} (default)" if name == DEFAULT_TASK else name
                                                     for name in tasks))
    p.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                   help="read the options from a recipe file: YAML or JSON, flat or grouped as here (a run's "
                   "config.json repeats that run); flags win over it (default: none)")
    p.add_argument("--print-config", action="store_true", default=argparse.SUPPRESS,
                   help="print the resolved recipe as YAML (a --config file) and train nothing")
    p.add_argument("--out", default=argparse.SUPPRESS, help="run folder to write (default: runs/TASK-TIMESTAMP)")
    p.add_argument("--overwrite", action="store_true", default=argparse.SUPPRESS,
                   help="start over in an --out folder that already holds a run (default: refuse)")
    # only the run's length, this stop's limits, --data-dir, --device, --threads, --workers, --compile and the
    # checkpoint intervals may change on resuming (tasks/launch.py RESUMABLE); `auto` is for torchrun
    # --max-restarts and requeued jobs
    p.add_argument("--resume", metavar="RUN_DIR", default=argparse.SUPPRESS,
                   help="continue a stopped run from its last checkpoint, with its own options; `--resume auto --out "
                   "DIR`: resume the run in DIR if it holds this run's checkpoint, else start it there (default: a new "
                   "run)")


def run(args: argparse.Namespace) -> int:
    options = given(args, exclude=("task", "config", "print_config"))
    task = getattr(args, "task", None)
    if getattr(args, "config", None):
        if options.get("resume", "auto") != "auto":
            raise ValueError("--config starts a run from a recipe, and --resume RUN_DIR continues a run with its own "
                             "options: give one of them (or --resume auto --out DIR with the recipe)")
        from .recipe_file import merged, read_recipe

        task, from_file = read_recipe(args.config, _task_classes(), task)
        options = merged(from_file, options)
    task = task or DEFAULT_TASK
    if getattr(args, "print_config", False):
        return print_config(task, options)
    return train_and_report(task, options)


def print_config(task: str, options: dict[str, Any]) -> int:
    """`--print-config`: the recipe these options resolve to, as YAML; nothing is read or trained."""
    from ..tasks import resolved_recipe
    from .recipe_file import printed_recipe

    if "resume" in options:
        raise ValueError("--print-config prints a new run's recipe; a run's own is its config.json (vitlab train "
                         "--config RUN_DIR/config.json --print-config)")
    _refuse_other_tasks(task, options)
    config, loop = resolved_recipe(task, **{key: value for key, value in options.items()
                                            if key not in ("out", "overwrite")})
    print(printed_recipe(task, config, loop), end="")
    return 0


def train_and_report(task: str, options: dict[str, Any]) -> int:
    from ..engine.distributed import launched_by_torchrun, shutdown
    from ..engine.loop import RunStopped
    from ..tasks import resume, train, train_or_resume

    resume_dir = options.pop("resume", None)
    try:
        if resume_dir == "auto":
            if "out" not in options or "overwrite" in options:
                raise ValueError("--resume auto needs --out DIR (the run's folder, resumed where it holds this run's "
                                 "checkpoint), and no --overwrite")
            _refuse_other_tasks(task, options)
            result = train_or_resume(task, options.pop("out"), **options)
        elif resume_dir is not None:
            if "out" in options or "overwrite" in options:
                raise ValueError("--resume continues a run in its own folder; leave out --out and --overwrite")
            result = resume(resume_dir, **options)
        else:
            _refuse_other_tasks(task, options)
            result = train(task, **options)
    except RunStopped as stopped:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"vitlab train: {stopped}", file=sys.stderr)
        return RunStopped.EXIT_STATUS
    finally:
        shutdown()
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks
        if launched_by_torchrun():
            print(f"processes: {os.environ['WORLD_SIZE']}")
        print(f"run folder: {result['run_dir']}")
        summary = _summary(result)
        if summary:
            print(summary)
    return 0


def _refuse_other_tasks(task: str, options: dict[str, Any]) -> None:
    tasks = _task_classes()
    mine = set(tasks[task].Config.__dataclass_fields__) | set(LoopConfig.__dataclass_fields__) | {"out", "overwrite"}
    for key in options:
        if key not in mine:
            owners = [name for name, cls in tasks.items() if key in cls.Config.__dataclass_fields__]
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{flag} is an option of --task {' / '.join(owners)}, not of --task {task}")


def _summary(result: dict[str, Any]) -> str:
    """What the run ends with: the validation figure that selected the checkpoint, and that checkpoint's test
    figures (the one look at the test data)."""
    minutes = result.get("elapsed_s", 0.0) / 60
    where = f"after {result['epoch']} epochs" if "epoch" in result else f"after {result['step']} steps"
    lines = []
    if result.get("selected_by") and result.get("selected_value") is not None:
        at = (f"epoch {result['selected_epoch']}" if "selected_epoch" in result
              else f"step {result.get('selected_step')}")
        lines.append(f"best {result['selected_by']}: {result['selected_value']:.4f} at {at} (selects "
                     f"{result.get('selected_weights', 'best')}.safetensors)")
    tests = {key: value for key, value in result.items() if key.startswith("test_") and isinstance(value, float)}
    if tests:
        figures = ", ".join(f"{key} {value:.4f}" for key, value in tests.items())
        lines.append(f"test, once, on that checkpoint: {figures} ({where}, {minutes:.1f} min of training and "
                     f"evaluation)")
        if "test_acc" in tests:  # the main job's figure, in words
            lines.append(f"test accuracy: {tests['test_acc']:.4f} {where}, {minutes:.1f} min of training and "
                         f"evaluation")
    elif any(key.startswith("val_") for key in result):
        lines.append(f"(the data has no test part: only validation figures, {where}, {minutes:.1f} min)")
    return "\n".join(lines)
