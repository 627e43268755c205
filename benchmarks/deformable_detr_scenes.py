"""Deformable DETR against DETR on the scenes: COCO AP on val against epochs and against training time, the same
data, recipe and budget.

    python benchmarks/deformable_detr_scenes.py                  # deformable_detr_small, 6 epochs (~55 min)
    python benchmarks/deformable_detr_scenes.py --models detr_small deformable_detr_small   # DETR rerun too

Both are full `vitlab train --task detection` runs from random weights with detr_scenes.py's recipe for detr_small
(batch 4, lr 2e-4 for the backbone too, no dropout, cosine over the epochs; Deformable DETR's offset predictors at
0.1 of it, the official recipe), evaluated after every epoch; a model's earlier result is kept when only the other
is rerun. detr_small's 16-epoch curve is taken from detr_scenes.py's results when it was measured there with this
recipe (it is the same run, ~45 min), and taken again at every run, unless detr_small is asked for. The budget is
the same wall-clock time: an epoch of deformable_detr_small takes ~2.7× one of detr_small (four maps of up to 16²
pixels in the encoder instead of one of 8², and the ResNet's last stage), so it gets 6 epochs to DETR's 16. The bar:
deformable_detr_small reaches detr_small's final AP50 in at most a third of detr_small's epochs (the paper: a tenth,
on COCO, from ImageNet weights). Writes benchmarks/results/deformable_detr_scenes.json, .md (the table with each
run's machine: the two runs are made one at a time) and .png, and prints the table. Run one benchmark at a time: the
machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
MODELS = ("detr_small", "deformable_detr_small")


def bar(results: dict[str, dict]) -> dict | None:
    """Whether deformable_detr_small reached detr_small's final AP50 within a third of detr_small's epochs."""
    if not all(model in results for model in MODELS):
        return None
    detr = results["detr_small"]["curve"]
    target, allowed = detr[-1]["map_50"], detr[-1]["epoch"] / 3
    reached = [row for row in results["deformable_detr_small"]["curve"] if row["map_50"] >= target]
    return {"detr_final_ap50": target, "detr_epochs": detr[-1]["epoch"], "allowed_epochs": allowed,
            "reached_at_epoch": reached[0]["epoch"] if reached else None,
            "met": bool(reached) and reached[0]["epoch"] <= allowed}


def reused_detr(path: Path, options: dict) -> dict[str, dict]:
    """detr_small's curve from detr_scenes.py's results, if it was trained there with these options."""
    if not path.is_file():
        return {}
    result = json.loads(path.read_text())["results"].get("detr")
    if not result or result["options"] != options:
        print(f"{path}'s detr_small run has options {result and result['options']}, not {options}: not reused")
        return {}
    return {"detr_small": {**result, "source": f"{path.name} (the same recipe)"}}


def with_reused_detr(results: dict[str, dict], trained: list[str], path: Path, options: dict) -> dict[str, dict]:
    """`results` with detr_small's curve taken again from detr_scenes.py's results, so that a rerun there reaches
    this table too; a detr_small trained here (now or by an earlier run) is kept."""
    earlier = results.get("detr_small")
    if "detr_small" in trained or (earlier is not None and "source" not in earlier):
        return results
    return {**results, **reused_detr(path, options)}


def markdown(results: dict[str, dict]) -> str:
    lines = ["| model | epochs | training min | images/s | AP50 after each epoch | final AP | final AR@100 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, result in results.items():
        curve = result["curve"]
        ap50 = ", ".join(f"{row['map_50']:.3f}" for row in curve)
        lines.append(f"| {model} | {curve[-1]['epoch']} | {curve[-1]['train_min']:.0f} | "
                     f"{result['images_per_s']:.1f} | {ap50} | "
                     f"{curve[-1]['map']:.3f} | {curve[-1]['mar_100']:.3f} |")
    return "\n".join(lines)


def table_of(record: dict) -> str:
    """The results table (benchmarks/report.py renders the pages' copy the same way) and each run's machine: the
    two runs are filled one at a time, and detr_small's may be detr_scenes.py's, from another session."""
    from benchmarks.harness import with_machines

    return with_machines(markdown(record["results"]), record)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for model, result in results.items():
        curve = result["curve"]
        axes[0].plot([row["epoch"] for row in curve], [row["map_50"] for row in curve], marker="o", ms=3,
                     label=model)
        axes[1].plot([row["train_min"] for row in curve], [row["map_50"] for row in curve], marker="o", ms=3,
                     label=model)
    for ax, x in zip(axes, ("epochs", "training time (min, 2 CPU cores)")):
        ax.set_xlabel(x)
        ax.set_ylabel("scenes val AP50")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Deformable DETR and DETR on vitlab make-scenes, from random weights")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=["deformable_detr_small"])
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--epochs", type=int, default=16, help="detr_small's epochs")
    parser.add_argument("--deformable-epochs", type=int, default=6, help="deformable_detr_small's epochs")
    parser.add_argument("--detr-from", default=str(RESULTS / "detr_scenes.json"),
                        help="detr_scenes.py's results, whose detr_small curve is reused when it has this recipe")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-4, help="lr, backbone included")
    parser.add_argument("--run-dir", help="keep deformable_detr_small's run there (for detr_pictures.py)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch")
    parser.add_argument("--out", default=str(RESULTS / "deformable_detr_scenes.json"))
    from benchmarks.harness import add_beside_option, machine, provenance, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    from benchmarks.detr_scenes import ensure_scenes, run_detr

    data = ensure_scenes(Path(args.data), args.quick)
    out = Path(args.out)
    results: dict[str, dict] = json.loads(out.read_text())["results"] if out.is_file() else {}
    options = {"batch_size": args.batch_size, "lr": args.lr, "backbone_lr": args.lr, "dropout": 0.0}
    if args.quick:
        options.update(eval_batch_size=8, num_queries=8)
    for model in args.models:
        epochs = args.deformable_epochs if model == "deformable_detr_small" else args.epochs
        run_dir = args.run_dir if model == "deformable_detr_small" else None
        # each run with the provenance of its own invocation: a model's earlier run is kept when another is run
        results[model] = {**run_detr(data, 1 if args.quick else epochs, options, run_dir, model=model),
                          "provenance": provenance(beside=args.beside)}
    if not args.quick:
        results = with_reused_detr(results, args.models, Path(args.detr_from), {"epochs": args.epochs, **options})
    results = {model: results[model] for model in MODELS if model in results}
    table = markdown(results)
    print(table)
    record = write_json(out, {"machine": machine(), "data": str(data), "bar": bar(results), "results": results,
                              "table": table}, beside=args.beside)
    write_table(out.with_suffix(".md"), table_of(record))
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
