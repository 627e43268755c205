"""`vitlab runs [DIR]`: the run folders under DIR side by side, newest first: what each trains, how far it got,
whether it finished, stopped (and resumes) or failed before its first checkpoint, and what it scored.

Only config.json and metrics.jsonl are read, and nothing is written: a folder that cannot be read is listed as
damaged, with why, and the listing goes on."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..commands import command
from ..engine.run import CONFIG_FILE, METRICS_FILE, PREVIOUS_STATE_FILE, STATE_FILE, read_jsonl

# what a status means, for the help and the docs
STATUSES = {
    "finished": "ran its whole length (and scored its test data once, where it has some)",
    "stopped": "stopped before its end with a checkpoint: vitlab train --resume RUN_DIR continues it (a run still "
               "training shows so too)",
    "failed": "ended before its first checkpoint: nothing to resume; start it again with --overwrite",
    "damaged": "its files cannot be read as a run's (the reason is given)",
}
DEEPEST = 3  # folders below DIR searched for runs (runs/sweep/lr-1e-3)


@command("runs", order=45)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("runs", help="list the run folders under a folder, newest first",
                              description="One line per run folder under DIR, newest first: its task, model and "
                              "data, how far it got, its status, the validation figure that selected its weights "
                              "(and at which epoch), its test figure and its minutes. Statuses: " + "; ".join(
                                  f"{name}: {text}" for name, text in STATUSES.items()) + ".")
    p.add_argument("dir", nargs="?", default="runs", metavar="DIR", help="where the run folders are (default: runs)")
    p.add_argument("--json", action="store_true", help="print the runs as JSON, a list of objects (default: a table)")
    p.add_argument("--sort", metavar="METRIC", help="order by this figure of each run's selected row instead of by "
                   "time: val, test, minutes, or a metric's name (val_acc, test_map, ...); best first (lowest first "
                   "for losses and for metrics a task minimises); runs without it last")
    p.set_defaults(run=run)


@dataclass
class RunSummary:
    name: str
    status: str
    task: str | None = None
    model: str | None = None
    data: str | None = None
    done: float | None = None  # epochs (or steps) done
    planned: float | None = None
    unit: str = "epochs"
    val_metric: str | None = None  # the validation figure that selects the weights, its value and where
    val: float | None = None
    val_at: float | None = None
    test_metric: str | None = None
    test: float | None = None
    minutes: float | None = None
    why: str | None = None  # a damaged folder's reason
    figures: dict[str, float] | None = None  # every figure of the selected row, for --sort
    modified: float = 0.0

    def progress(self) -> str:
        if self.done is None and self.planned is None:
            return ""
        done = "0" if self.done is None else f"{self.done:g}"
        return f"{done}/{self.planned:g} {self.unit}" if self.planned else f"{done} {self.unit}"


def run(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; give the folder that holds your runs (vitlab runs "
                                f"DIR; default: runs)")
    runs = sorted((summarize(path, folder) for path in find_runs(folder)), key=lambda r: -r.modified)
    if args.sort:
        runs = sort_by(runs, args.sort)
    if args.json:
        print(json.dumps([{key: value for key, value in asdict(r).items() if key != "modified"} for r in runs],
                         indent=1))
    elif not runs:
        print(f"no runs under {folder}")
    else:
        print(table(runs))
    return 0


def find_runs(folder: Path) -> list[Path]:
    """Folders at most DEEPEST levels below `folder` (itself included) holding a run's files; a run's own
    sub-folders (its exported graphs) are not searched."""
    found = []

    def visit(path: Path, depth: int) -> None:
        if any((path / name).exists() for name in (CONFIG_FILE, METRICS_FILE, STATE_FILE, PREVIOUS_STATE_FILE)):
            found.append(path)
            return
        if depth < DEEPEST:
            try:
                children = sorted(child for child in path.iterdir()
                                  if child.is_dir() and not child.name.startswith("."))
            except OSError:
                return
            for child in children:
                visit(child, depth + 1)

    visit(folder, 0)
    return found


def summarize(path: Path, root: Path) -> RunSummary:
    name = str(path.relative_to(root)) if path != root else path.name
    times = [file.stat().st_mtime for file in path.iterdir() if file.is_file()] if path.is_dir() else []
    summary = RunSummary(name, "damaged", modified=max(times, default=0.0))
    try:
        record = json.loads((path / CONFIG_FILE).read_text())
        if not isinstance(record, dict) or not isinstance(record.get("task"), str):
            raise ValueError("it names no task")
        rows = read_jsonl(path / METRICS_FILE) if (path / METRICS_FILE).is_file() else []
    except FileNotFoundError:
        summary.why = "no config.json (a run folder copied in part, or not a run)"
        return summary
    except (OSError, UnicodeDecodeError, ValueError) as error:
        summary.why = f"config.json: {' '.join(str(error).split()) or type(error).__name__}"
        return summary
    try:
        _fill(summary, record, rows, path)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        summary.status, summary.why = "damaged", f"config.json or metrics.jsonl: unexpected content ({error!r})"
    return summary


def _fill(summary: RunSummary, record: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    from ..tasks import TASKS

    config, loop = record.get("config") or {}, record.get("loop") or {}
    summary.task = record["task"]
    summary.model = config.get("model") or (record.get("model_config") or {}).get("name")
    data = config.get("data") or (record.get("data") or {}).get("name")
    summary.data = str(data) if data is not None else None
    summary.unit = "epochs" if loop.get("epochs") else "steps"
    summary.planned = loop.get("epochs") or loop.get("steps")
    progress_rows = [row for row in rows if "selected_by" not in row]
    if progress_rows:
        last = progress_rows[-1]
        summary.done = last.get("epoch") if summary.unit == "epochs" else last.get("step")
    final = next((row for row in reversed(rows) if "selected_by" in row), None)
    elapsed = [row["elapsed_s"] for row in rows if isinstance(row.get("elapsed_s"), (int, float))]
    summary.minutes = round(elapsed[-1] / 60, 1) if elapsed else None
    metric, direction = TASKS[summary.task].best if summary.task in TASKS else (None, "max")
    if final is not None:
        summary.val_metric, summary.val = final["selected_by"], final.get("selected_value")
        summary.val_at = final.get("selected_epoch", final.get("selected_step"))
        where = ("step", final["selected_step"]) if "selected_step" in final else ("epoch", summary.val_at)
        selected = next((row for row in progress_rows if row.get(where[0]) == where[1]), {})
        figures = {key: value for row in (selected, final) for key, value in row.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool)}
    else:  # not finished: the best validation figure so far, as the run would select it
        scored = [row for row in progress_rows if isinstance(row.get(metric), (int, float))]
        best = (max if direction == "max" else min)(scored, key=lambda row: row[metric]) if scored else None
        if best is not None:
            summary.val_metric, summary.val = metric, best[metric]
            summary.val_at = best.get("epoch", best.get("step"))
        figures = {key: value for key, value in (best or {}).items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool)}
    if summary.val_metric:
        summary.test_metric = "test_" + summary.val_metric.removeprefix("val_")
        summary.test = final.get(summary.test_metric) if final else None
    summary.figures = {**figures, "val": summary.val, "test": summary.test, "minutes": summary.minutes}
    reached = summary.done is not None and summary.planned is not None and summary.done >= summary.planned
    if final is not None or reached:
        summary.status = "finished"
    elif any((path / name).is_file() for name in (STATE_FILE, PREVIOUS_STATE_FILE)):
        summary.status = "stopped"
    else:
        summary.status = "failed"


def sort_by(runs: list[RunSummary], metric: str) -> list[RunSummary]:
    """Best first: highest, or lowest for a loss, minutes and what a task minimises; runs without it last."""
    from ..tasks import TASKS

    minimised = {cls.best[0] for cls in TASKS.values() if cls.best[1] == "min"}
    minimised |= {"test_" + name.removeprefix("val_") for name in minimised}
    lowest = metric in minimised or "loss" in metric or metric == "minutes"
    having = [r for r in runs if isinstance((r.figures or {}).get(metric), (int, float))]
    having.sort(key=lambda r: r.figures[metric], reverse=not lowest)
    return having + [r for r in runs if r not in having]


def table(runs: list[RunSummary]) -> str:
    def figure(name: str | None, value: float | None, at: float | None = None, unit: str = "epochs") -> str:
        if value is None:
            return ""
        return f"{name} {value:.4f}" + (f" ({unit[:-1]} {at:g})" if at is not None else "")

    header = ("run", "task", "model", "data", "progress", "status", "selected on validation", "test", "min")
    lines = [(r.name, r.task or "", r.model or "", _short(r.data), r.progress(), r.status,
              figure(r.val_metric, r.val, r.val_at, r.unit), figure(r.test_metric, r.test),
              "" if r.minutes is None else f"{r.minutes:.1f}") for r in runs if r.status != "damaged"]
    widths = [max(len(row[i]) for row in (header, *lines)) for i in range(len(header) - 1)]
    shown = {id(row): "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
             for row in (header, *lines)}
    name_width = widths[0]
    text = [shown[id(header)].rstrip()]
    rows = iter(lines)
    for r in runs:  # in order, a damaged run's reason on its line
        text.append(f"{r.name.ljust(name_width)}  damaged: {r.why}" if r.status == "damaged"
                    else shown[id(next(rows))].rstrip())
    return "\n".join(text)


def _short(data: str | None) -> str:
    """A data path as its last two parts (/home/me/data/scenes: data/scenes)."""
    if not data:
        return ""
    parts = Path(data).parts
    return data if len(parts) <= 2 else os.path.join(*parts[-2:])
