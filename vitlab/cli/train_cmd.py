"""`vitlab train`: train a task (image classification by default) from the command line, or resume a run.

The options are generated from the configs: the loop's (shared by every task) and each task's. An option of
another task than the chosen one is refused."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from ..commands import command
from ..engine.config import LoopConfig
from ..engine.flags import add_config_options, given


def _task_classes() -> dict[str, type]:
    from ..tasks import TASKS

    return TASKS


@command("train", order=10)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    tasks = _task_classes()
    p = subparsers.add_parser(
        "train", help="train a model", description="Train a model. Without options it runs the default recipe: a "
        "ViT on Fashion-MNIST. `--task seq2seq` trains the original Transformer on a toy sequence problem.")
    p.add_argument("--task", choices=list(tasks), default="classification", help="what to train (default: "
                   "classification)")
    add_run_options(p)
    add_config_options(p.add_argument_group("training (every task)"), LoopConfig,
                       default_texts=loop_default_texts(tasks.values()))
    seen: set[str] = {f for f in LoopConfig.__dataclass_fields__}
    for name, cls in tasks.items():
        group = p.add_argument_group(f"--task {name}", description=shared_options_text(cls.Config, seen))
        seen.update(add_config_options(group, cls.Config, skip=seen))
    p.set_defaults(run=run)


def shared_options_text(config_cls: type, listed: set[str]) -> str | None:
    """For a task's options already listed under another task (--data, --model, …): what they mean here."""
    from ..engine.flags import flag_of, shown_default

    shared = [field for field in dataclasses.fields(config_cls) if field.name in listed
              and field.name not in LoopConfig.__dataclass_fields__ and field.metadata.get("cli", True)]
    if not shared:
        return None
    texts = [f"{flag_of(field)}: {field.metadata.get('help', '')} (default: "
             f"{field.metadata.get('default_text') or shown_default(field.default)})" for field in shared]
    return "also, with this meaning here: " + "; ".join(texts)


def loop_default_texts(task_classes) -> dict[str, str]:
    """"fashion-mnist 128, folder 64, seq2seq 64" for each loop option some task's recipe sets."""
    def show(value: Any) -> str:
        return " ".join(map(str, value)) if isinstance(value, tuple) else "off" if value is None else str(value)

    by_field: dict[str, list[str]] = {}
    recipes = [recipe for cls in task_classes for recipe in cls.recipes().items()]
    for recipe, defaults in recipes:
        for key, value in defaults.items():
            by_field.setdefault(key, []).append(f"{recipe} {show(value)}")
    base = {field.name: field.default for field in dataclasses.fields(LoopConfig)}
    return {key: ("" if len(texts) == len(recipes) else f"{show(base[key])}; ") + "recipe — " + ", ".join(texts)
            for key, texts in by_field.items()}


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=argparse.SUPPRESS, help="run folder to write (default: runs/TASK-TIMESTAMP)")
    p.add_argument("--overwrite", action="store_true", default=argparse.SUPPRESS,
                   help="start over in an --out folder that already holds a run (default: refuse)")
    p.add_argument("--resume", metavar="RUN_DIR", default=argparse.SUPPRESS,
                   help="continue a run that stopped, from its last checkpoint, with its own options; only the "
                   "run's length, this stop's limits, --data-dir, --device, --threads, --workers, --compile and the "
                   "checkpoint intervals may change. `--resume auto --out DIR`: resume the run in DIR where it "
                   "holds a checkpoint of this same run, else start it there (for torchrun --max-restarts and "
                   "schedulers that requeue a job) (default: a new run)")


def run(args: argparse.Namespace) -> int:
    options = given(args, exclude=("task",))
    return train_and_report(args.task, options)


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
