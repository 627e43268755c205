"""mIoU on the scenes val set: SETR's three decoders after the same training budget, against torchvision's LR-ASPP.

    python benchmarks/setr_scenes.py                                  # all four, 45 minutes of training each
    python benchmarks/setr_scenes.py --models setr_pup_small --budget-min 45
    python benchmarks/setr_scenes.py --models lraspp --budget-min 45
    python benchmarks/setr_scenes.py --quick                          # a smoke run

The data is `vitlab make-scenes` with its defaults (4,000 train and 500 val scenes of 128 × 128 pixels, masks of
background + 10 Fashion-MNIST classes), made once under --data. Nothing starts from pretrained weights: none can
be downloaded here.

- The SETR models are full `vitlab train --task segmentation` runs (the command line's engine, its default recipe:
  SGD with momentum, lr 0.01 with the heads at 10×, poly; random resizing 0.5–2×, 128-pixel crops, flips;
  auxiliary weight 0.4), as many epochs as the budget holds at the throughput measured on this machine (their
  `--epochs` per model below), evaluated by sliding windows after every epoch.
- LR-ASPP is torchvision's `lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)`, trained here by a
  plain loop on the same loader (the same crops, flips and normalisation) with the same optimizer and schedule
  over the budget's wall-clock time, and scored by the same confusion-matrix code every `--eval-every-min`.

The bar: the best SETR decoder reaches mIoU ≥ 0.6 on scenes val within 45 minutes of training. Time is training
time only (evaluations excluded). Writes benchmarks/results/setr_scenes.json (each model's result is kept when
another is rerun, with its own provenance), setr_scenes.md (the table with each run's machine) and setr_scenes.png,
and prints the table. Run one benchmark at a time: the machine has 2
cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
BAR = 0.6
# epochs that fill 45 minutes at the training throughput measured on 2 cores (batch 8, 128-pixel crops, a full
# optimizer step with the auxiliary heads, the loader included): naive 12.5 images/s, pup 9.8, mla 11.6 ->
# 5.3, 6.8 and 5.7 minutes per epoch of 4,000 scenes
EPOCHS_45_MIN = {"setr_naive_small": 8, "setr_pup_small": 6, "setr_mla_small": 7}
MODELS = (*EPOCHS_45_MIN, "lraspp")


def run_setr(data: Path, model: str, epochs: int, options: dict, keep_runs: Path | None = None) -> dict:
    from vitlab.engine.run import read_metrics
    from vitlab.tasks import train

    with tempfile.TemporaryDirectory() as root:
        run = (keep_runs or Path(root)) / model
        train("segmentation", out=str(run), overwrite=True, data=str(data), model=model, epochs=epochs, **options)
        *rows, test = read_metrics(run)
    curve, spent = [], 0.0
    for row in rows:  # validation figures: the val scenes select; the test scenes are scored once, in `test`
        spent += row["train_time_s"]
        curve.append({"train_min": spent / 60, "epoch": row["epoch"], "miou": row["val_miou"],
                      "pixel_acc": row["val_pixel_acc"], "loss": row["train_loss"]})
    return {"model": model, "options": {"epochs": epochs, **options}, "curve": curve,
            "test": {key[5:]: value for key, value in test.items() if key.startswith("test_")},
            "selected_epoch": test.get("selected_epoch"),
            "images_per_s": sum(r["train_images_per_s"] for r in rows) / len(rows)}


def run_lraspp(data: Path, budget_min: float, eval_every_min: float, batch_size: int, lr: float,
               quick: bool) -> dict:
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    from vitlab.data.segmentation import pad_collate_masks
    from vitlab.engine.optim import warmup_poly
    from vitlab.models.setr import SegmentationOutput
    from vitlab.tasks.segmentation import SegmentationConfig, SegmentationTask
    from vitlab.tasks.segmentation.metrics import scores
    from vitlab.tasks.segmentation.task import pixel_cross_entropy

    task = SegmentationTask(SegmentationConfig(data=str(data), model="setr_pup_small", eval_batch_size=8))
    train_set, val_set, _ = task.datasets()
    torch.manual_seed(0)
    model = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=val_set.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=not quick,
                                         collate_fn=pad_collate_masks, generator=torch.Generator().manual_seed(0))
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=8, collate_fn=pad_collate_masks)

    class Wrapped(torch.nn.Module):  # the output SETR gives, so that the same evaluation code scores both
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return SegmentationOutput(self.inner(x)["out"])

    wrapped = Wrapped(model)
    budget = budget_min * 60
    curve, spent, images_seen, next_eval = [], 0.0, 0, eval_every_min * 60
    model.train()
    while spent < budget:
        for images, masks in loader:
            start = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = lr * warmup_poly(int(spent), int(budget), 0, 0.9, 0.01)  # poly over the time
            loss = pixel_cross_entropy(model(images)["out"], masks)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            spent += time.perf_counter() - start
            images_seen += len(images)
            if spent >= next_eval or spent >= budget:
                result = scores(task.confusion(wrapped, val_loader, val_set.num_classes))
                curve.append({"train_min": spent / 60, "epoch": round(images_seen / len(train_set), 2),
                              "miou": result["miou"], "pixel_acc": result["pixel_acc"], "loss": loss.item()})
                print(json.dumps({"model": "lraspp", **{k: round(v, 4) for k, v in curve[-1].items()}}), flush=True)
                next_eval += eval_every_min * 60
            if spent >= budget:
                break
    return {"model": "lraspp_mobilenet_v3_large", "options": {
        "budget_min": budget_min, "batch_size": batch_size, "lr": lr, "optimizer": "SGD momentum 0.9",
        "schedule": "poly 0.9 over the budget"}, "curve": curve, "images_per_s": images_seen / max(spent, 1e-9)}


def markdown(results: dict[str, dict]) -> str:
    lines = ["| model | epochs | training min | images/s | mIoU after each evaluation | best mIoU | final pixel acc |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, result in results.items():
        curve = result["curve"]
        mious = ", ".join(f"{row['miou']:.3f}" for row in curve)
        lines.append(f"| {model} | {curve[-1]['epoch']} | {curve[-1]['train_min']:.0f} | {result['images_per_s']:.1f} "
                     f"| {mious} | {max(row['miou'] for row in curve):.3f} | {curve[-1]['pixel_acc']:.3f} |")
    return "\n".join(lines)


def table_of(record: dict) -> str:
    """The results table (benchmarks/report.py renders the pages' copy the same way) and the machine of its runs:
    one line where they share it, each run's where a model was rerun on another."""
    from benchmarks.harness import with_machines

    return with_machines(markdown(record["results"]), record)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for model, result in results.items():
        ax.plot([row["train_min"] for row in result["curve"]], [row["miou"] for row in result["curve"]],
                marker="o", ms=3, label=model)
    ax.axhline(BAR, color="grey", ls="--", lw=1, label=f"bar {BAR}")
    ax.set_xlabel("training time (min, 2 CPU cores)")
    ax.set_ylabel("scenes val mIoU")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--budget-min", type=float, default=45.0)
    parser.add_argument("--eval-every-min", type=float, default=5.0, help="LR-ASPP's evaluation interval")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch")
    parser.add_argument("--out", default=str(RESULTS / "setr_scenes.json"))
    parser.add_argument("--keep-runs", type=Path, help="train the SETR runs under this folder and keep them "
                        "(for `vitlab predict`); by default they go to a temporary folder")
    from benchmarks.harness import add_beside_option, machine, provenance, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    from benchmarks.detr_scenes import ensure_scenes

    data = ensure_scenes(Path(args.data), args.quick)
    out = Path(args.out)
    results: dict[str, dict] = json.loads(out.read_text())["results"] if out.is_file() else {}
    scale = args.budget_min / 45.0
    for model in args.models:
        if model == "lraspp":
            results[model] = run_lraspp(data, 0.05 if args.quick else args.budget_min,
                                        0.05 if args.quick else args.eval_every_min, 8, 0.01, args.quick)
        else:
            epochs = 1 if args.quick else max(1, round(EPOCHS_45_MIN[model] * scale))
            options = {"eval_batch_size": 8, "crop_size": 64} if args.quick else {}
            results[model] = run_setr(data, model, epochs, options, args.keep_runs)
        # each run with the provenance of its own invocation: a model's earlier run is kept when another is run
        results[model] = {**results[model], "provenance": provenance(beside=args.beside)}
    results = {model: results[model] for model in MODELS if model in results}
    setr = [max(row["miou"] for row in r["curve"]) for m, r in results.items() if m != "lraspp"]
    bar = {"miou_target": BAR, "budget_min": args.budget_min, "best_setr_miou": max(setr) if setr else None,
           "met": bool(setr) and max(setr) >= BAR}
    table = markdown(results)
    print(table)
    record = write_json(out, {"machine": machine(), "data": str(data), "bar": bar, "results": results,
                              "table": table}, beside=args.beside)
    write_table(out.with_suffix(".md"), table_of(record))
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
