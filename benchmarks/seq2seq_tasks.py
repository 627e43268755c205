"""Exact-sequence accuracy against steps and wall time, for the original Transformer on each toy task.

    python benchmarks/seq2seq_tasks.py                       # reverse, copy, sort, add with the default options
    python benchmarks/seq2seq_tasks.py --tasks add --steps 4000

Each task is a full `vitlab train --task seq2seq` run (the same engine as the command line, default options unless
given) in a temporary folder; the held-out ("unseen") exact-sequence accuracy is recorded at every evaluation.
Writes benchmarks/results/seq2seq_tasks.json, .md and .png and prints the table; the Transformer's page of the
site (docs/systems/transformer.md) quotes the .md (`python benchmarks/report.py` refreshes the quote). Run one
benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the root makes `benchmarks` import
from benchmarks.harness import add_beside_option, cpu_and_isa, write_json, write_table
from benchmarks.harness import machine as host_machine
from vitlab.data.sequences import MAX_HELD_OUT_SHARE, TASKS
from vitlab.engine.run import read_metrics
from vitlab.tasks import train
from vitlab.tasks.launch import loop_config
from vitlab.tasks.seq2seq import Seq2SeqConfig, Seq2SeqTask

RESULTS = Path(__file__).parent / "results"


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


def _held_out(row: dict) -> float:
    """An evaluation's exact-sequence accuracy: on the val split; files measured before val and test were split
    recorded their one held-out set as test_exact_acc."""
    return row["val_exact_acc"] if "val_exact_acc" in row else row["test_exact_acc"]


def _by_length(result: dict) -> dict[str, float]:
    return result["test_exact_acc_by_len"] if "test_exact_acc_by_len" in result else result["final_exact_acc_by_len"]


def markdown(results: list[dict]) -> str:
    steps = [row["step"] for row in results[0]["curve"]]
    lines = ["| task | source lengths | " + " | ".join(f"step {s}" for s in steps) + " | time (train + eval) |",
             "| --- | --- |" + " --- |" * len(steps) + " --- |"]
    for r in results:
        accs = {row["step"]: f"{100 * _held_out(row):.1f}" for row in r["curve"]}
        low, high = r["lengths"]
        lengths = f"{low}–{high} digits + {low}–{high} digits" if r["task"] == "add" else f"{low}–{high}"
        lines.append(f"| {r['task']} | {lengths} | " + " | ".join(accs.get(s, "") for s in steps)
                     + f" | {r['elapsed_s'] / 60:.1f} min |")
    return "\n".join(lines)


def markdown_by_length(results: list[dict]) -> str:
    """The test accuracy per source length of the selected checkpoint (for add: both operands and the "+")."""
    lengths = sorted({int(n) for r in results for n in _by_length(r)})
    lines = ["| task | " + " | ".join(f"length {n}" for n in lengths) + " |", "| --- |" + " --- |" * len(lengths)]
    for r in results:
        by_len = _by_length(r)
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


def table_of(record: dict) -> str:
    """benchmarks/results/seq2seq_tasks.md from what the results file records (benchmarks/report.py renders it the
    same way; the Transformer's page quotes it)."""
    results, machine = record["results"], record["machine"]
    cores = f"on {machine['cpus']} CPU cores" if machine.get("cpus") else "core count not recorded"
    note = (f"Time: wall clock for training plus the held-out evaluations, 1 torch thread (the command's default), "
            f"torch {machine['torch']}, fp32, {cpu_and_isa(machine)}, {cores}. The held-out set takes at most "
            f"{MAX_HELD_OUT_SHARE:.0%} of any length's sources, so short lengths have few test sequences (1 of length "
            f"1).")
    if "selected_step" in results[0]:
        head = "Val exact-sequence accuracy (%, greedy decoding) after each evaluation:"
        tail = ("Test accuracy of the checkpoint val selected ("
                + ", ".join(f"{r['task']}: step {r['selected_step']}" for r in results) + "), by source length (%):")
    else:
        head = ("Held-out exact-sequence accuracy (%, greedy decoding) after each evaluation (measured when one "
                "held-out set served every evaluation, before val and test were split):")
        tail = "At the last step, by source length (%):"
    return (head + "\n\n" + markdown(results) + "\n\n" + tail + "\n\n" + markdown_by_length(results) + "\n\n"
            + note + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--steps", type=int, help="optimizer steps per task (default: the command's default)")
    parser.add_argument("--out", default=str(RESULTS / "seq2seq_tasks.json"))
    add_beside_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        results = [run_task(task, args.steps, Path(root)) for task in args.tasks]
    out = Path(args.out)
    machine = host_machine()  # the CPU's model name and ISA, as every results file records them
    record = write_json(out, {"machine": machine, "results": results}, beside=args.beside)
    table = table_of(record)
    write_table(out.with_suffix(".md"), table)
    print(table)
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}; `python benchmarks/report.py` "
          "puts the table on the Transformer's page")

if __name__ == "__main__":
    main()
