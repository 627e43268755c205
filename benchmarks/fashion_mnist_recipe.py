"""Accuracy against wall-clock time on Fashion-MNIST, for the default recipe and its variants.

    python benchmarks/fashion_mnist_recipe.py                       # default recipe + hybrid, side by side
    python benchmarks/fashion_mnist_recipe.py --variants plain_d96 convstem_d96 --epochs 5

Each variant is a full `vitlab train` run (through the same engine as the command line) in
benchmarks/results/runs/NAME; the validation accuracy after every epoch (5,000 of the training images held out)
is plotted against the cumulative training time (evaluation time excluded, and reported separately); the best
epoch by validation accuracy is the selected checkpoint, and the 10,000 test images are scored once, on it, at
the end. Where the recipe scores with test-time flip (each image's logits averaged with its mirror's), validation
and test alike are scored so, and the table says it. Writes benchmarks/results/fashion_mnist_recipe.json and .png
and prints a markdown table. Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vitlab.engine.run import read_metrics
from vitlab.interop import load_model
from vitlab.tasks import train
from vitlab.tasks.classification.recipes import RECIPES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is a package there
from benchmarks.harness import add_beside_option, provenance, write_results

RESULTS = Path(__file__).parent / "results"

# name -> (model, model overrides, recipe overrides)
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "default": (RECIPES["fashion-mnist"]["task"]["model"], {}, {}),  # the hybrid: vit_mini_convstem_28, 8 epochs
    "plain_patch7": ("vit_tiny_patch7_28", {"dim": 128, "num_heads": 4}, {"epochs": 9}),  # = vit_mini_patch7_28
    "plain_patch4_d64": ("vit_tiny_patch4_28", {"dim": 64, "num_heads": 2}, {"epochs": 10}),
    "tiny_convstem": ("vit_tiny_convstem_28", {}, {"epochs": 5}),
    # with the lean last block (engine/lean.py) an epoch costs ~0.89 of what it did: two more epochs
    "epochs10": (RECIPES["fashion-mnist"]["task"]["model"], {}, {"epochs": 10}),
    # one block fewer trains 1.22x as fast (804 against 660 img/s, a step at batch 128, measured here): 12 epochs
    "d5_epochs12": (RECIPES["fashion-mnist"]["task"]["model"], {"depth": 5}, {"epochs": 12}),
    # without the conv stem (14 % of the step): 765 img/s at batch 128 here, so 11 epochs in about 15 minutes
    "plain7_epochs11": ("vit_mini_patch7_28", {}, {"epochs": 11}),
}


def run_variant(name: str, epochs: int | None, lr: float | None, seed: int, reuse: bool) -> dict:
    model, model_overrides, recipe_overrides = VARIANTS[name]
    run_dir = RESULTS / "runs" / name
    options = dict(data="fashion-mnist", out=str(run_dir), model=model, seed=seed, model_overrides=model_overrides,
                   overwrite=True, **recipe_overrides)
    if epochs is not None:
        options["epochs"] = epochs
    if lr is not None:
        options["lr"] = lr
    start = time.perf_counter()
    if reuse and finished(run_dir):
        print(f"{name}: reusing the finished run in {run_dir}")
    else:
        train(**options)
    wall = time.perf_counter() - start
    *rows, test = read_metrics(run_dir)
    train_time = 0.0
    curve = []
    for row in rows:
        train_time += row["train_time_s"]
        curve.append({"epoch": row["epoch"], "train_time_s": round(train_time, 1),
                      "elapsed_s": round(row["elapsed_s"], 1), "val_acc": row.get("val_acc")})
    info = json.loads((run_dir / "config.json").read_text())
    params = sum(p.numel() for p in load_model(run_dir / "last.safetensors").parameters())
    return {"variant": name, "model": model, "model_overrides": model_overrides,
            "recipe": {**info["loop"], **info["config"]}, "split": info["data"]["split"],
            "params": params, "best_val_acc": test["selected_value"], "selected_epoch": test["selected_epoch"],
            "test_acc": test["test_acc"], "train_time_s": round(train_time, 1),
            "wall_time_s": round(wall, 1), "elapsed_s": round(test["elapsed_s"], 1),
            "images_per_s": round(rows[-1]["train_images_per_s"], 1),
            "curve": curve}


def finished(run_dir: Path) -> bool:
    """A run folder that completed its recipe: its last row is the test, scored once at the end."""
    rows = read_metrics(run_dir)
    return (run_dir / "config.json").is_file() and bool(rows) and "test_acc" in rows[-1]


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        xs = [p["train_time_s"] / 60 for p in r["curve"]]
        ys = [100 * p["val_acc"] for p in r["curve"]]
        ax.plot(xs, ys, "o-", label=f"{r['variant']} ({r['params'] / 1e6:.2f} M params)")
    ax.axhline(90, color="gray", ls="--", lw=1)
    ax.axvline(15, color="gray", ls=":", lw=1)
    ax.set(xlabel="training time (min, 2 CPU cores)", ylabel="Fashion-MNIST validation accuracy (%)",
           title="accuracy against training time")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table_of(record: dict) -> str:
    """The results table (each variant's validation accuracy after every evaluation, the checkpoint chosen on it
    and that checkpoint's test accuracy), from what the JSON records."""
    lines = ["| variant | model | params | epochs | train time (min) | images/s | validation accuracy after each "
             "epoch | best validation accuracy (epoch) | test accuracy of that checkpoint | test-time flip |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |"]
    for r in record["results"]:
        curve = ", ".join(f"{100 * point['val_acc']:.1f}" for point in r["curve"])
        model = f"{r['model']} {r['model_overrides']}" if r["model_overrides"] else r["model"]
        lines.append(f"| {r['variant']} | {model} | {r['params']:,} | "
                     f"{r['recipe']['epochs']} | {r['train_time_s'] / 60:.1f} | {r['images_per_s']:.0f} | {curve} | "
                     f"{100 * r['best_val_acc']:.2f} % ({r['selected_epoch']}) | {100 * r['test_acc']:.2f} % | "
                     f"{'yes' if r['recipe'].get('test_time_flip') else 'no'} |")
    m = record["machine"]
    lines.append(f"\n`{record['command']}` at {record['commit']}, {m['cpu']} ({m['cpu_capability']}), "
                 f"{m['threads']} threads")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["default", "plain_patch7"], choices=sorted(VARIANTS))
    parser.add_argument("--epochs", type=int, help="override the recipe's epochs")
    parser.add_argument("--lr", type=float, help="override the recipe's learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="fashion_mnist_recipe", help="name of the result files")
    parser.add_argument("--reuse", action="store_true", help="take finished runs in results/runs as they are")
    add_beside_option(parser)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = [run_variant(name, args.epochs, args.lr, args.seed, args.reuse) for name in args.variants]
    out = {**provenance(beside=args.beside), "results": results}
    write_results(RESULTS, args.tag, out, table_of(out) + "\n", beside=args.beside)
    plot(results, RESULTS / f"{args.tag}.png")


if __name__ == "__main__":
    main()
