"""`vitlab predict RUN_DIR INPUT...`: what a trained run makes of each input, by the run's task, with the task's
own options (each task's PredictOptions): the top-k classes of image files (classification), detections, class
masks, restored images, the output tokens of source sequences (seq2seq)."""

from __future__ import annotations

import argparse
import json

from ..commands import command
from ..engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag
from ..tasks.runtime_flags import add_runtime_flags, on_runtime
from .options import add_run_command, task_options

FIELDS: list[str] = []


HELP = ("predict with a trained run or a released model (classify, detect, segment, restore image files; translate "
        "sequences)")


@command("predict", order=30)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    FIELDS[:] = add_run_command(subparsers, "predict", HELP, "PredictOptions", add_common_options, run)


def add_common_options(p: argparse.ArgumentParser) -> None:
    """What `vitlab predict` takes for a run of any task."""
    add_source_arguments(p)
    p.add_argument("inputs", metavar="INPUT", nargs="+", help="image files (any format Pillow reads), or for a "
                   "seq2seq run source sequences such as \"3 1 4\"")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    add_runtime_flags(p)


def run(args: argparse.Namespace) -> int:
    from ..tasks.sources import open_source

    source = open_source(args.run_dir, task=args.source_task, weights=args.weights)
    task, model = source.task, source.model
    options = task_options(args, FIELDS, task, "PredictOptions")
    task.options(task.PredictOptions, options)  # bad values refused before any input is read
    if task.python_loop:
        if args.runtime != "torch":
            raise ValueError(task.python_loop)
    else:
        model = on_runtime(model, args, source)
    results = task.predict(model, source.saved, args.inputs, **options)
    print(json.dumps(results) if args.json else "\n".join(task.format_prediction(item) for item in results))
    return 0
