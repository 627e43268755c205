"""DeiT's claim on small data: does a student distilled from a convnet beat the same ViT trained alone?

    python benchmarks/deit_distillation.py                  # teacher, then 2 seeds × (no teacher, hard)
    python benchmarks/deit_distillation.py --kinds none hard soft --seeds 0 1 2 --epochs 5 --reuse

1. The teacher: `resnet18_28` (torchvision's ResNet-18, stem fitted to 28×28), trained with `vitlab train`.
2. For each seed, at the same number of epochs and the same recipe (the Fashion-MNIST default's optimiser,
   schedule, label smoothing and flips):
     none  deit_mini_patch7_28            the ViT alone (= vit_mini_patch7_28)
     hard  deit_mini_distilled_patch7_28  + distillation token, learning the teacher's argmax (DeiT's ⚗)
     soft  deit_mini_distilled_patch7_28  + distillation token, KL to the teacher at temperature τ
Every run goes through the same engine as the command line, into benchmarks/results/runs/deit-*. Writes
benchmarks/results/deit_distillation.json and prints a markdown table: test accuracy per seed, mean and spread.
Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from vitlab.engine.run import read_metrics
from vitlab.tasks import train as train_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is a package there
from benchmarks.harness import add_beside_option, provenance, write_json

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "runs"
STUDENTS = {"none": "deit_mini_patch7_28", "hard": "deit_mini_distilled_patch7_28",
            "soft": "deit_mini_distilled_patch7_28"}


def finished(run_dir: Path, epochs: int) -> bool:
    rows = read_metrics(run_dir)
    return (run_dir / "config.json").is_file() and bool(rows) and rows[-1]["epoch"] == epochs and \
        "test_acc" in rows[-1]


def train(run_dir: Path, reuse: bool, **options) -> dict:
    """A finished run's summary: the test accuracy of the checkpoint selected on validation accuracy, training
    time, images/s, and the validation accuracy after each epoch."""
    start = time.perf_counter()
    if reuse and finished(run_dir, options["epochs"]):
        print(f"reusing the finished run in {run_dir}")
    else:
        train_run(data="fashion-mnist", out=str(run_dir), overwrite=True, **options)
    *rows, test = read_metrics(run_dir)
    return {"run_dir": str(run_dir.relative_to(RESULTS.parent.parent)), "test_acc": test["test_acc"],
            "selected_epoch": test["selected_epoch"], "train_time_s": round(sum(r["train_time_s"] for r in rows), 1),
            "images_per_s": round(rows[-1]["train_images_per_s"], 1), "wall_s": round(time.perf_counter() - start, 1),
            "val_curve": [round(r["val_acc"], 4) for r in rows if "val_acc" in r]}


def table_of(record: dict) -> str:
    """Each student's validation accuracy after every epoch of every seed and the test accuracy of its selected
    checkpoint (mean over seeds), and the teacher's, from what deit_distillation.json records."""
    lines = ["| student | teacher | validation accuracy after each epoch (one list per seed) | test accuracy of the "
             "selected checkpoint, mean ± half-range |", "| --- | --- | --- | --- |"]
    teacher = record["teacher"]
    for row in record["table"]:
        runs = sorted((run for run in record["runs"] if run["kind"] == row["kind"]), key=lambda run: run["seed"])
        curves = "; ".join(", ".join(f"{100 * acc:.1f}" for acc in run["val_curve"]) for run in runs)
        distilled = f"{row['kind']}, {teacher['model']}" if row["kind"] != "none" else "none"
        lines.append(f"| {row['model']} | {distilled} | {curves} | {row['mean']:.2f} ± {row['spread']:.2f} % |")
    curve = ", ".join(f"{100 * acc:.1f}" for acc in teacher["val_curve"])
    lines.append(f"| teacher {teacher['model']} | — | {curve} | {100 * teacher['test_acc']:.2f} % |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of every student (default: 3)")
    parser.add_argument("--teacher-epochs", type=int, default=2, help="epochs of the teacher (default: 2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--kinds", nargs="+", default=["none", "hard"], choices=sorted(STUDENTS))
    parser.add_argument("--reuse", action="store_true", help="take finished runs in results/runs as they are")
    add_beside_option(parser)
    args = parser.parse_args()

    teacher_dir = RUNS / "deit-teacher-resnet18_28"
    teacher = train(teacher_dir, args.reuse, model="resnet18_28", epochs=args.teacher_epochs)
    print(f"teacher resnet18_28: {100 * teacher['test_acc']:.2f} %")
    runs = []
    for seed in args.seeds:
        for kind in args.kinds:
            extra = {"distill": kind, "teacher": str(teacher_dir)} if kind != "none" else {}
            summary = train(RUNS / f"deit-{kind}-seed{seed}", args.reuse, model=STUDENTS[kind], epochs=args.epochs,
                            seed=seed, **extra)
            runs.append({"kind": kind, "model": STUDENTS[kind], "seed": seed, **summary})
            print(f"{kind} seed {seed}: {100 * summary['test_acc']:.2f} %")

    table = []
    for kind in args.kinds:
        accs = [100 * r["test_acc"] for r in runs if r["kind"] == kind]
        times = [r["train_time_s"] for r in runs if r["kind"] == kind]
        table.append({"kind": kind, "model": STUDENTS[kind], "accs": accs, "mean": statistics.mean(accs),
                      "spread": (max(accs) - min(accs)) / 2, "train_time_s": statistics.mean(times)})
    write_json(RESULTS / "deit_distillation.json", {
        **provenance(beside=args.beside), "epochs": args.epochs,
        "teacher": {"model": "resnet18_28", "epochs": args.teacher_epochs, **teacher}, "runs": runs, "table": table},
        beside=args.beside)

    print(f"\nFashion-MNIST test accuracy, {args.epochs} epochs per student, seeds {args.seeds}:\n")
    print(table_of(json.loads((RESULTS / "deit_distillation.json").read_text())))

if __name__ == "__main__":
    main()
