"""Exact-sequence accuracy against steps and wall time, for the original Transformer on each toy task.

    python benchmarks/seq2seq_tasks.py                       # reverse, copy, sort, add with the default options
    python benchmarks/seq2seq_tasks.py --tasks add --steps 4000

Each task is a full `vitlab train-seq2seq` run (the same engine as the command line, default options unless
given) in a temporary folder; the held-out ("unseen") exact-sequence accuracy is recorded at every evaluation.
Writes benchmarks/results/seq2seq_tasks.json and .png, prints a markdown table and puts it in the Transformer's
page of the site (docs/systems/transformer.md) between the `<!-- seq2seq-tasks -->` markers (`--no-readme`: leave
the page alone). Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the root makes `benchmarks` import
from benchmarks.harness import add_beside_option, write_json
from vitlab.data.sequences import MAX_HELD_OUT_SHARE, TASKS
from vitlab.engine.run import read_metrics
from vitlab.tasks import train
from vitlab.tasks.launch import loop_config
from vitlab.tasks.seq2seq import Seq2SeqConfig, Seq2SeqTask

RESULTS = Path(__file__).parent / "results"
PAGE = Path(__file__).parents[1] / "docs" / "systems" / "transformer.md"
MARKER = "<!-- seq2seq-tasks -->"


def run_task(task: str, steps: int | None, root: Path) -> dict:
    config = Seq2SeqConfig(problem=task)
    loop = loop_config(Seq2SeqTask, config, {"steps": steps} if steps else {})
    train("seq2seq", out=str(root / task), problem=task, **({"steps": steps} if steps else {}))
    *rows, test = read_metrics(root / task)
    resolved = config.sequence_task()
    return {"task": task, "lengths": [resolved.min_len, resolved.max_len], "num_symbols": resolved.num_symbols,
            "options": {**dataclasses.asdict(config), **dataclasses.asdict(loop)}, "curve": rows,
            "selected_step": test["selected_step"], "test_exact_acc": test["test_exact_acc"],
            "steps": test["step"], "elapsed_s": test["elapsed_s"],
            "test_exact_acc_by_len": test["test_exact_acc_by_len"]}


def markdown(results: list[dict]) -> str:
    steps = [row["step"] for row in results[0]["curve"]]
    lines = ["| task | source lengths | " + " | ".join(f"step {s}" for s in steps) + " | time (train + eval) |",
             "| --- | --- |" + " --- |" * len(steps) + " --- |"]
    for r in results:
        accs = {row["step"]: f"{100 * row['val_exact_acc']:.1f}" for row in r["curve"]}
        low, high = r["lengths"]
        lengths = f"{low}–{high} digits + {low}–{high} digits" if r["task"] == "add" else f"{low}–{high}"
        lines.append(f"| {r['task']} | {lengths} | " + " | ".join(accs.get(s, "") for s in steps)
                     + f" | {r['elapsed_s'] / 60:.1f} min |")
    return "\n".join(lines)


def markdown_by_length(results: list[dict]) -> str:
    """The test accuracy per source length of the selected checkpoint (for add: both operands and the "+")."""
    lengths = sorted({int(n) for r in results for n in r["test_exact_acc_by_len"]})
    lines = ["| task | " + " | ".join(f"length {n}" for n in lengths) + " |", "| --- |" + " --- |" * len(lengths)]
    for r in results:
        by_len = r["test_exact_acc_by_len"]
        lines.append(f"| {r['task']} | " + " | ".join(f"{100 * by_len[str(n)]:.0f}" if str(n) in by_len else ""
                                                       for n in lengths) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        ax.plot([row["step"] for row in r["curve"]], [100 * row["val_exact_acc"] for row in r["curve"]],
                marker="o", label=r["task"])
    ax.set_xlabel("optimizer step (batch 64)")
    ax.set_ylabel("held-out exact-sequence accuracy (%)")
    ax.set_ylim(0, 101)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Transformer (post-norm, d=64, N=2) on toy tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def update_readme(table: str, note: str) -> bool:
    """Replace what lies between the two markers in the page; False when they are not there."""
    text = PAGE.read_text() if PAGE.is_file() else ""
    parts = text.split(MARKER)
    if len(parts) != 3:
        return False
    PAGE.write_text(parts[0] + MARKER + "\n" + table + "\n\n" + note + "\n" + MARKER + parts[2])
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--steps", type=int, help="optimizer steps per task (default: the command's default)")
    parser.add_argument("--out", default=str(RESULTS / "seq2seq_tasks.json"))
    parser.add_argument("--no-readme", dest="readme", action="store_false", help="do not update the page")
    add_beside_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        results = [run_task(task, args.steps, Path(root)) for task in args.tasks]
    table = markdown(results) + "\n\nAt the last step, by source length (%):\n\n" + markdown_by_length(results)
    print(table)
    out = Path(args.out)
    machine = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
               platform.machine(), "python": platform.python_version()}
    write_json(out, {"machine": machine, "results": results, "table": table}, beside=args.beside)
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    note = (f"Time: wall clock for training plus the held-out evaluations, 1 torch thread (the command's default), "
            f"torch {torch.__version__}, fp32, on {os.cpu_count()} CPU cores. The held-out set takes at most "
            f"{MAX_HELD_OUT_SHARE:.0%} of any length's sources, so short lengths have few test sequences "
            f"(1 of length 1).")
    if args.readme and update_readme(table, note):
        print(f"updated the table in {PAGE}")


if __name__ == "__main__":
    main()
