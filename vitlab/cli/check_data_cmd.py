"""`vitlab check-data --task TASK --data DIR`: a data folder checked as a training run checks it when it starts
(and every image decoded besides), without training: per split what it holds, and every problem by kind with the
first few and what to do. Exit code 0 when clean, 2 when problems were found.

The task does the checking (`Task.check_data`), so this command names none."""

from __future__ import annotations

import argparse

from ..commands import command


def checkable_tasks() -> list[str]:
    from ..tasks import TASKS
    from ..tasks.base import Task

    return [name for name, task in TASKS.items() if task.check_data.__func__ is not Task.check_data.__func__]


@command("check-data", order=50)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    tasks = checkable_tasks()
    p = subparsers.add_parser(
        "check-data", help="check a data folder's annotations, masks and images without training",
        description="Check every split of a data folder as `vitlab train` checks it when a run starts, and decode "
                    "every image: the counts per split, then each kind of problem with how many, the first few "
                    "(file and entry) and what to do. Exit code 0 when nothing is wrong, 2 when something is.")
    p.add_argument("--task", required=True, choices=tasks, help=f"the task the data is for: {', '.join(tasks)}")
    p.add_argument("--data", required=True, metavar="DIR", help="the data folder, as `vitlab train --data` takes it")
    p.add_argument("--first", type=int, default=5, metavar="N", help="problems shown of each kind (default: 5)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tasks import TASKS

    reports = TASKS[args.task].check_data(args.data)
    for report in reports:
        print(report.format(args.first))
    problems = sum(report.num_problems for report in reports)
    if problems:
        print(f"{problems:,} problem(s) in {args.data}; fix them, or train with --skip-bad-images / "
              f"--skip-bad-annotations to leave the bad entries out")
        return 2
    print(f"{args.data}: no problems found in {len(reports)} split(s)")
    return 0
