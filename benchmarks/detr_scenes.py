"""COCO AP on the scenes val set against training time: vitlab's detr_small against torchvision's Faster R-CNN.

    python benchmarks/detr_scenes.py                          # both detectors, 60 min of training each
    python benchmarks/detr_scenes.py --models detr --epochs 25
    python benchmarks/detr_scenes.py --models fasterrcnn --budget-min 60
    python benchmarks/detr_scenes.py --models detr-pretrained --epochs 17 --pretrain-epochs 1

The data is `vitlab make-scenes` with its defaults (4,000 train and 500 val scenes of 128 × 128 pixels with 1–6
Fashion-MNIST items each), made once under --data. Neither detector starts from pretrained weights: none can be
downloaded here.

- detr_small is a full `vitlab train --task detection` run (the command line's engine), evaluated with COCO AP
  after every epoch. Its recipe differs from the command's defaults where random weights ask for it, as measured
  in short probes (2–3 epochs each): the backbone at the same lr as the rest (the paper's 1e-5 is for an ImageNet
  backbone), lr 2e-4, batch 4 (more updates for the same images) and no dropout.
- detr-pretrained is the same run with the backbone started from a classifier: `vitlab train` first trains
  resnet18_tv_28 (torchvision's stem) on Fashion-MNIST's train items for --pretrain-epochs (the items the train
  scenes are cut from; val scenes hold test items), and DETR loads it with --backbone-weights, as the paper starts
  from ImageNet. The classifier's training time is part of the curve's minutes.
- Faster R-CNN is torchvision's `fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None)` at the
  scenes' own size (min_size = max_size = 128) with 128 sampled RoIs per image, trained here by a plain loop
  with the optimizer of torchvision's
  detection reference (SGD, momentum 0.9, weight decay 1e-4, batch 8, warm-up then cosine over the budget), and
  evaluated on the same val set by the same pycocotools code every `--eval-every-min` minutes of training.

Time is training time only (evaluations excluded), on this machine's threads. Writes
benchmarks/results/detr_scenes.json (each model's result is kept when the other is rerun) and detr_scenes.png,
and prints a markdown table. Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the root makes `benchmarks` import
RESULTS = Path(__file__).parent / "results"
BAR = 0.5  # AP50 that detr_small must reach within 60 minutes of training


def ensure_scenes(folder: Path, quick: bool) -> Path:
    from vitlab.data.scenes import SceneOptions, make_scenes

    if not (folder / "annotations" / "instances_val.json").is_file():
        options = SceneOptions(train=32, val=8, test=8) if quick else SceneOptions()
        make_scenes(folder, options, None, allow_partial_data=quick)
    return folder


# ---- DETR: the command line's engine ----------------------------------------------------------------------------
def finished(run: Path) -> bool:
    """Whether the run in this folder trained to its end and scored its test split."""
    from vitlab.engine.run import read_metrics

    if not (run / "metrics.jsonl").is_file():
        return False
    rows = read_metrics(run)
    return bool(rows) and any(key.startswith("test_") for key in rows[-1])


def run_detr(data: Path, epochs: int, options: dict, run_dir: str | None, already_spent_s: float = 0.0,
             model: str = "detr_small", continue_run: bool = False) -> dict:
    """A `vitlab train --task detection` run of `model`, its val AP after every epoch against training time. With
    `continue_run`, a run already in `run_dir` is read if it finished and resumed from its last checkpoint if it
    stopped (a benchmark that is killed loses at most an epoch); otherwise the folder is started over."""
    from vitlab.engine.run import read_metrics
    from vitlab.tasks import resume, train

    with tempfile.TemporaryDirectory() as root:
        run = Path(run_dir) if run_dir else Path(root) / "detr"
        if continue_run and finished(run):
            print(f"{run}: finished earlier, read as it is")
        elif continue_run and (run / "config.json").is_file():
            print(f"{run}: continuing the stopped run from its last checkpoint")
            resume(str(run))
        else:
            train("detection", out=str(run), overwrite=True, data=str(data), model=model, epochs=epochs, **options)
        *rows, test = read_metrics(run)
    curve, spent = [], already_spent_s
    for row in rows:  # validation figures: the val scenes select; the test scenes are scored once, in `test`
        spent += row["train_time_s"]
        curve.append({"train_min": spent / 60, "epoch": row["epoch"], "map": row["val_map"],
                      "map_50": row["val_map_50"], "map_75": row["val_map_75"], "mar_100": row["val_mar_100"],
                      "loss": row["train_loss"]})
    return {"model": model, "options": {"epochs": epochs, **options}, "curve": curve,
            "test": {key[5:]: value for key, value in test.items() if key.startswith("test_")},
            "selected_epoch": test.get("selected_epoch"),
            "images_per_s": sum(r["train_images_per_s"] for r in rows) / len(rows)}


def run_detr_pretrained(data: Path, epochs: int, options: dict, run_dir: str | None, pretrain_epochs: float,
                        quick: bool) -> dict:
    """detr_small whose backbone first learns to classify Fashion-MNIST's train items (the items the train scenes
    are made of; the val scenes hold test items) with `vitlab train`: resnet18_tv_28, whose stem is torchvision's,
    so its weights load through --backbone-weights. Its training time is counted in the curve's minutes."""
    from vitlab.engine.run import read_metrics
    from vitlab.tasks import train

    with tempfile.TemporaryDirectory() as root:
        classifier = Path(root) / "backbone"
        mini = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fashion-mnist-mini"
        extra = {"data_dir": str(mini), "allow_partial_data": True} if quick else {}
        train("classification", out=str(classifier), model="resnet18_tv_28", epochs=1 if quick else pretrain_epochs,
              warmup_epochs=0.1, **extra)
        rows = read_metrics(classifier)
        pretrain_s = sum(row.get("train_time_s", 0.0) for row in rows)  # the test row trained nothing
        result = run_detr(data, epochs, {**options, "backbone_weights": str(classifier)}, run_dir, pretrain_s)
    result["model"] = "detr_small, backbone pretrained"
    result["pretraining"] = {"model": "resnet18_tv_28", "data": "Fashion-MNIST train",
                             "epochs": pretrain_epochs, "train_min": pretrain_s / 60,
                             "test_acc": rows[-1].get("test_acc"), "val_acc": rows[-2].get("val_acc")}
    return result


# ---- Faster R-CNN: torchvision's model, a plain baseline loop ----------------------------------------------------
def run_fasterrcnn(data: Path, budget_min: float, eval_every_min: float, batch_size: int, lr: float) -> dict:
    import torchvision
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

    from vitlab.data.coco import CocoDetection, detection_transforms, find_split, pad_collate
    from vitlab.tasks.detection.coco_eval import coco_metrics

    train_set = CocoDetection(*find_split(data, "train"), channels=3, transforms=detection_transforms(True))
    val_set = CocoDetection(*find_split(data, "val"), channels=3, transforms=detection_transforms(False))
    torch.manual_seed(0)
    # 128 sampled RoIs per image instead of 512: a scene holds at most 6 objects, and on a CPU torchvision's
    # roi_align backward over 512 × 8 RoIs took 56 % of a training step (3.2 of 5.6 s, measured here)
    model = fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None,
                                              num_classes=train_set.num_classes + 1, min_size=128, max_size=128,
                                              box_batch_size_per_image=128)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=True,
                                         collate_fn=pad_collate, generator=torch.Generator().manual_seed(0))
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=16, collate_fn=pad_collate)
    ground_truth = json.loads(val_set.annotations_file.read_text())
    budget, warmup = budget_min * 60, 200

    def evaluate() -> dict:
        model.eval()
        detections = []
        with torch.no_grad():
            for images, _, targets in val_loader:
                sizes = [t["size"].tolist() for t in targets]
                outputs = model([image[:, :h, :w] for image, (h, w) in zip(images, sizes)])
                for target, out in zip(targets, outputs):
                    xywh = torchvision.ops.box_convert(out["boxes"], "xyxy", "xywh").tolist()
                    detections += [{"image_id": target["image_id"], "score": s,
                                    "category_id": train_set.label_to_category[int(label) - 1], "bbox": box}
                                   for box, s, label in zip(xywh, out["scores"].tolist(), out["labels"].tolist())]
        model.train()
        return coco_metrics(ground_truth, detections, [image["id"] for image in val_set.images])

    curve, spent, step, images_seen, next_eval, epoch = [], 0.0, 0, 0, eval_every_min * 60, 0
    model.train()
    while spent < budget:
        epoch += 1
        for images, _, targets in loader:
            start = time.perf_counter()
            factor = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, spent / budget)))
            for group in optimizer.param_groups:
                group["lr"] = lr * factor
            sizes = [t["size"].tolist() for t in targets]
            batch = [image[:, :h, :w] for image, (h, w) in zip(images, sizes)]
            boxes = [{"boxes": t["boxes"].as_subclass(torch.Tensor), "labels": t["labels"] + 1} for t in targets]
            loss = sum(model(batch, boxes).values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            spent += time.perf_counter() - start
            step += 1
            images_seen += len(batch)
            if spent >= next_eval or spent >= budget:
                metrics = evaluate()
                curve.append({"train_min": spent / 60, "epoch": round(images_seen / len(train_set), 2),
                              "map": metrics["map"], "map_50": metrics["map_50"], "map_75": metrics["map_75"],
                              "mar_100": metrics["mar_100"], "loss": loss.item()})
                print(json.dumps({"model": "fasterrcnn", **{k: round(v, 4) for k, v in curve[-1].items()}}),
                      flush=True)
                next_eval += eval_every_min * 60
            if spent >= budget:
                break
    return {"model": "fasterrcnn_mobilenet_v3_large_fpn", "options": {
        "budget_min": budget_min, "batch_size": batch_size, "lr": lr, "optimizer": "SGD momentum 0.9 wd 1e-4",
        "schedule": f"linear warm-up {warmup} steps, cosine over the budget", "min_size": 128, "max_size": 128,
        "box_batch_size_per_image": 128},
        "curve": curve, "images_per_s": images_seen / max(spent, 1e-9)}


# ---- report -----------------------------------------------------------------------------------------------------
def at_budget(result: dict, minutes: float) -> dict | None:
    """The last evaluation within `minutes` of training (and the one that closes a budget a step past it)."""
    within = [row for row in result["curve"] if row["train_min"] <= minutes * 1.01]
    return within[-1] if within else None


def markdown(results: dict[str, dict], budget_min: float) -> str:
    lines = ["| detector | training images/s | best AP50 (at min) | AP50 at the budget | AP at the budget | "
             "AR@100 at the budget |", "| --- | --- | --- | --- | --- | --- |"]
    for result in results.values():
        best = max(result["curve"], key=lambda row: row["map_50"])
        last = at_budget(result, budget_min) or result["curve"][-1]
        lines.append(f"| {result['model']} | {result['images_per_s']:.1f} | {best['map_50']:.3f} "
                     f"({best['train_min']:.0f}) | {last['map_50']:.3f} | {last['map']:.3f} | {last['mar_100']:.3f} |")
    return "\n".join(lines)


NAMES = {"detr": "detr_small", "detr_pretrained": "detr_small, backbone pretrained",
         "fasterrcnn": "fasterrcnn_mobilenet_v3_large_fpn"}


def table_of(record: dict) -> str:
    """benchmarks/results/detr_scenes.md from what the results file records (benchmarks/report.py renders it the
    same way): val AP50 every 10 minutes of training (the latest evaluation by then, its minute in brackets), each
    detector at the end of its run, and the machine."""
    results, budget = record["results"], record["budget_min"]
    minutes = list(range(10, int(budget) + 1, 10))
    lines = ["| val AP50 by training minute | " + " | ".join(str(m) for m in minutes) + " |",
             "| --- |" + " --- |" * len(minutes)]
    for key, result in results.items():
        cells, ended = [], False
        for minute in minutes:
            row = at_budget(result, minute)
            if ended or row is None:
                cells.append("—")
            elif row is result["curve"][-1] and row["train_min"] < minute - 5:  # the run ended before this minute
                cells.append(f"{row['map_50']:.3f} (ended at {row['train_min']:.0f})")
                ended = True
            else:
                cells.append(f"{row['map_50']:.3f}")
        lines.append(f"| {NAMES.get(key, key)} | " + " | ".join(cells) + " |")
    lines += ["", markdown(results, budget)]
    pretraining = results.get("detr_pretrained", {}).get("pretraining")
    if pretraining:
        lines += ["", f"The pretrained backbone: `{pretraining['model']}`, {pretraining['epochs']} epoch of "
                      f"{pretraining['data']}, {pretraining['train_min']:.1f} min, test accuracy "
                      f"{100 * pretraining['test_acc']:.2f} %."]
    from benchmarks.harness import with_machines

    return with_machines("\n".join(lines), record, NAMES)


def plot(results: dict[str, dict], path: Path, budget_min: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for result in results.values():
        minutes = [row["train_min"] for row in result["curve"]]
        axes[0].plot(minutes, [row["map_50"] for row in result["curve"]], marker="o", ms=3, label=result["model"])
        axes[1].plot(minutes, [row["map"] for row in result["curve"]], marker="o", ms=3, label=result["model"])
    for ax, name in zip(axes, ("AP50", "AP (IoU 0.50:0.95)")):
        ax.set_xlabel("training time (min, 2 CPU cores)")
        ax.set_ylabel(f"scenes val {name}")
        ax.axvline(budget_min, color="gray", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1)
        ax.legend()
    axes[0].axhline(BAR, color="gray", lw=0.8, ls="--")
    fig.suptitle("Detection on vitlab make-scenes, from random weights")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["detr", "detr-pretrained", "fasterrcnn"],
                        default=["detr", "fasterrcnn"])
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--epochs", type=int, default=16, help="detr_small's epochs (16: 45-50 min on 2 cores)")
    parser.add_argument("--batch-size", type=int, default=4, help="detr_small's batch")
    parser.add_argument("--lr", type=float, default=2e-4, help="detr_small's lr, backbone included")
    parser.add_argument("--dropout", type=float, default=0.0, help="detr_small's dropout")
    parser.add_argument("--pretrain-epochs", type=int, default=1, help="detr-pretrained: the backbone's epochs "
                        "of Fashion-MNIST classification")
    parser.add_argument("--frcnn-batch-size", type=int, default=8)
    parser.add_argument("--budget-min", type=float, default=60.0, help="Faster R-CNN's training time, and the bar's")
    parser.add_argument("--frcnn-lr", type=float, default=0.01)
    parser.add_argument("--eval-every-min", type=float, default=2.5, help="Faster R-CNN's evaluations")
    parser.add_argument("--run-dir", help="keep detr_small's run folder here (for `vitlab predict`; default: a "
                        "temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, seconds of training")
    parser.add_argument("--out", default=str(RESULTS / "detr_scenes.json"))
    from benchmarks.harness import add_beside_option, provenance, write_json, write_table
    from benchmarks.harness import machine as host_machine

    add_beside_option(parser)
    args = parser.parse_args(argv)
    data = ensure_scenes(Path(args.data), args.quick)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    results: dict[str, dict] = dict(previous.get("results", {}))
    if "detr" in args.models:
        options = {"batch_size": args.batch_size, "lr": args.lr, "backbone_lr": args.lr, "dropout": args.dropout}
        if args.quick:
            options.update(eval_batch_size=8, num_queries=8)
        results["detr"] = {**run_detr(data, 1 if args.quick else args.epochs, options, args.run_dir),
                           "provenance": provenance(beside=args.beside)}
    if "detr-pretrained" in args.models:
        options = {"batch_size": args.batch_size, "lr": args.lr, "backbone_lr": args.lr, "dropout": args.dropout}
        if args.quick:
            options.update(eval_batch_size=8, num_queries=8)
        results["detr_pretrained"] = {**run_detr_pretrained(data, 1 if args.quick else args.epochs, options,
                                                            args.run_dir, args.pretrain_epochs, args.quick),
                                      "provenance": provenance(beside=args.beside)}
    if "fasterrcnn" in args.models:
        budget = 0.05 if args.quick else args.budget_min
        results["fasterrcnn"] = {**run_fasterrcnn(data, budget, budget if args.quick else args.eval_every_min,
                                                  args.frcnn_batch_size, args.frcnn_lr),
                                 "provenance": provenance(beside=args.beside)}
    table = markdown(results, args.budget_min)
    print(table)
    machine = host_machine()  # the CPU's model name and ISA, as every results file records them
    bar = None
    for key in ("detr", "detr_pretrained"):
        if key in results:
            reached = [row for row in results[key]["curve"] if row["map_50"] >= BAR]
            bar = bar or {"ap50_target": BAR, "budget_min": 60}
            bar[key] = {"reached_at_min": reached[0]["train_min"] if reached else None,
                        "met": bool(reached) and reached[0]["train_min"] <= 60}
    record = write_json(out, {"machine": machine, "data": str(data), "budget_min": args.budget_min, "bar": bar,
                              "results": results, "table": table}, beside=args.beside)
    write_table(out.with_suffix(".md"), table_of(record))
    plot(results, out.with_suffix(".png"), args.budget_min)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
