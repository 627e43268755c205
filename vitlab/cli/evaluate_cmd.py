"""`vitlab eval RUN_DIR`: evaluate a trained run on its held-out data, by the run's task (read from config.json),
with the task's own options (each task's EvalOptions, tasks/<task>/config.py): accuracy, per-class accuracy and
confusion matrix for classification; COCO's box AP and AR for detection; per-class IoU, mIoU and pixel accuracy for
segmentation; per degradation Y-PSNR, Y-SSIM and RGB PSNR for restoration; reconstruction PSNR and SSIM, codebook
usage and perplexity for a VQGAN, and for a prior also FID and the class accuracy of its samples; exact-sequence
accuracy for seq2seq."""

from __future__ import annotations

import argparse
import json

from ..commands import command
from ..engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag
from ..tasks.runtime_flags import add_runtime_flags, on_runtime
from .options import add_run_command, task_options

FIELDS: list[str] = []


HELP = "evaluate a trained run on its test data (or other data)"


@command("eval", order=20)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    FIELDS[:] = add_run_command(subparsers, "eval", HELP, "EvalOptions", add_common_options, run)


def add_common_options(p: argparse.ArgumentParser) -> None:
    """What `vitlab eval` takes for a run of any task."""
    add_source_arguments(p)
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.add_argument("--split", choices=["test", "val"], default="test",
                   help="which part of the run's data to score (default: test; the validation part where the data "
                        "has no test part, and the answer says so)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    add_runtime_flags(p)


def run(args: argparse.Namespace) -> int:
    from ..tasks.sources import open_source

    source = open_source(args.run_dir, task=args.source_task, weights=args.weights)
    task, model = source.task, source.model
    options = task_options(args, FIELDS, task, "EvalOptions")
    if source.run_dir is None and not options.get("data"):
        raise ValueError(f"{args.run_dir} is a model by name, with no data of its own: give the data to score it "
                         f"on, --data DIR")
    if task.python_loop:
        if args.runtime != "torch" or args.precision != "fp32":
            raise ValueError(task.python_loop)
    else:
        model = on_runtime(model, args, source)
    result = task.evaluate_run(model, source.saved, source.run_dir or source.name, split=args.split, **options)
    print(json.dumps(result) if args.json else task.format_evaluation(result, source.weights))
    return 0
