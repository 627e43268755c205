"""SETR from a pretrained encoder against SETR from scratch and against LR-ASPP, at equal minutes of segmentation
training, each run back to back on one machine; two pretrainings, picked between by measurement.

    python benchmarks/setr_pretraining.py                        # both pretrainings, scratch, LR-ASPP (≈ 3 h)
    python benchmarks/setr_pretraining.py --runs classified scratch --epochs 7
    python benchmarks/setr_pretraining.py --quick                # a smoke run on a tiny set

The paper starts SETR's ViT from ImageNet-21k weights; none can be downloaded here, so the encoder (setr_*_small's:
six blocks of width 192 on 8-pixel patches) is pretrained here, in one of two ways:

- `mae`: masked image modelling on the training scenes themselves, their images only, never a mask (`vitlab train
  --task mim` with `mae_small`: that encoder with MAE's light decoder, 75 % of the patches hidden); the weights
  with the lowest reconstruction loss on the val scenes' images are kept;
- `classified`: supervised classification of Fashion-MNIST's *training* images (the garments the train scenes are
  made of; the val and test scenes are made of its test images, which this never trains on), at 32 pixels, the
  encoder as `vit_tiny_patch16_224` with 8-pixel patches and six blocks (the paper's recipe: a ViT trained to
  classify, then segmenting); the weights with the best accuracy on 5,000 held-out training images are kept.

The kept weights start `setr_mla_small` with `--weights` (classifier and decoder dropped, position grid resampled,
one input channel repeated to three, each said). The same SETR recipe (`vitlab train --task segmentation`'s
defaults) trains from random weights as the control, then LR-ASPP (torchvision, random weights, setr_scenes.py's
loop) for as many minutes as the longest SETR run trained. Every curve is val mIoU against minutes of
segmentation training; each pretraining's own minutes are stated beside, not hidden. The bars: SETR from the
pretrained encoder ≥ 0.5 mIoU within 45 minutes of SETR training and ahead of LR-ASPP at equal minutes.

Writes benchmarks/results/setr_pretraining.{json,md,png}; runs already there are kept when others are run (each
with its own commit, machine and what ran beside it, so a comparison across machines shows). Run one benchmark at
a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
BAR, BUDGET_MIN = 0.5, 45.0
MODEL = "setr_mla_small"
PRETRAINED = ("mae", "classified")  # SETR runs that start from a pretrained encoder
NAMES = {"mae": f"{MODEL}, encoder from MAE on the train scenes",
         "classified": f"{MODEL}, encoder from Fashion-MNIST classification",
         "scratch": f"{MODEL}, from scratch", "lraspp": "LR-ASPP (MobileNetV3), from scratch"}
# the classification pretraining: setr_*_small's encoder (setr.py's _small) as a classifier of 32-pixel garments
CLASSIFIER = {"model": "vit_tiny_patch16_224", "model_overrides": {"patch_size": 8, "depth": 6}, "img_size": 32}


def curve_of(run: Path, keys: dict[str, str]) -> tuple[list[dict], dict]:
    """A run's evaluations against its cumulative training minutes, `keys` mapping curve fields to metrics."""
    from vitlab.engine.run import read_metrics

    *rows, test = read_metrics(run)
    spent, curve = 0.0, []
    for row in rows:
        spent += row["train_time_s"]
        curve.append({"train_min": spent / 60, "epoch": row["epoch"], "loss": row["train_loss"],
                      **{name: row[metric] for name, metric in keys.items()}})
    return curve, {"test": test, "images_per_s": sum(r["train_images_per_s"] for r in rows) / len(rows)}


def pretrain_mae(data: Path, run: Path, epochs: int, options: dict) -> dict:
    """A `vitlab train --task mim` run of mae_small on the data's images; its curve and minutes."""
    from vitlab.tasks import train

    train("mim", out=str(run), overwrite=True, data=str(data), model="mae_small", epochs=epochs, **options)
    curve, rest = curve_of(run, {"val_loss": "val_loss"})
    return {"how": "MAE (mae_small) on the train scenes' images, masks unused", "model": "mae_small",
            "options": {"epochs": epochs, **options}, "curve": curve, "train_min": curve[-1]["train_min"],
            "measure": "val reconstruction loss", "test": rest["test"].get("test_loss"),
            "selected_epoch": rest["test"].get("selected_epoch"), "images_per_s": rest["images_per_s"]}


def pretrain_classifier(run: Path, epochs: int, options: dict) -> dict:
    """A `vitlab train` classification run of setr_*_small's encoder on Fashion-MNIST's training images."""
    from vitlab.tasks import train

    train("classification", out=str(run), overwrite=True, data="fashion-mnist", epochs=epochs,
          **{**CLASSIFIER, **options})
    curve, rest = curve_of(run, {"val_acc": "val_acc"})
    return {"how": "classification of Fashion-MNIST's training images at 32 px (5,000 held out select)",
            "model": CLASSIFIER["model"], "options": {"epochs": epochs, **CLASSIFIER, **options}, "curve": curve,
            "train_min": curve[-1]["train_min"], "measure": "val accuracy", "test": rest["test"].get("test_acc"),
            "selected_epoch": rest["test"].get("selected_epoch"), "images_per_s": rest["images_per_s"]}


def bars(results: dict[str, dict], budget_min: float) -> dict:
    """Per pretrained run: its best mIoU within the budget against the bar, and each evaluation against the
    rivals' curves at the same minute."""
    from benchmarks.denoising_detection import at_minute

    out = {}
    for key in PRETRAINED:
        if key not in results:
            continue
        curve = results[key]["curve"]
        within = [row["miou"] for row in curve if row["train_min"] <= budget_min * 1.01]
        best = max(within, default=None)
        entry = {"miou_target": BAR, "budget_min": budget_min, "best_miou_within": best,
                 "met": best is not None and best >= BAR}
        for rival in ("scratch", "lraspp"):
            if rival in results:
                rows = [{"train_min": row["train_min"], "miou": row["miou"],
                         "rival": at_minute(results[rival]["curve"], row["train_min"], "miou")} for row in curve]
                compared = [row for row in rows if row["rival"] is not None]
                entry[f"against_{rival}"] = {"rows": rows, "ahead_at_every_evaluation":
                                             bool(compared) and all(row["miou"] > row["rival"] for row in compared)}
        out[key] = entry
    return out


def pick(results: dict[str, dict]) -> dict | None:
    """The pretraining to use: the one whose SETR is ahead at more of their shared minutes (the other's curve
    interpolated to each evaluation), its pretraining minutes stated beside."""
    from benchmarks.denoising_detection import at_minute

    if not all(key in results for key in PRETRAINED):
        return None
    first, second = (results[key]["curve"] for key in PRETRAINED)
    rows = [(row["miou"], other) for row in first
            if (other := at_minute(second, row["train_min"], "miou")) is not None]
    ahead = sum(mine > other for mine, other in rows)
    winner = PRETRAINED[0] if ahead * 2 > len(rows) else PRETRAINED[1]
    return {"picked": winner, "evaluations_compared": len(rows), f"{PRETRAINED[0]}_ahead_at": ahead,
            "best": {key: max(row["miou"] for row in results[key]["curve"]) for key in PRETRAINED}}


def table_of(record: dict) -> str:
    """The results file's table, from what the file records (benchmarks/report.py renders it the same way)."""
    results = record["results"]
    machines = sorted({f"{r['provenance']['machine']['cpu']} ({r['provenance']['machine']['cpu_capability']})"
                       for r in results.values()})
    head = (f"SETR pretraining on the scenes, run back to back on {' and '.join(machines)}, "
            f"{record['machine']['threads']} threads")
    return markdown(results, record["pretraining"], record["bar"], record["pick"], head)


def markdown(results: dict[str, dict], pretraining: dict[str, dict], bar: dict, choice: dict | None,
             head: str) -> str:
    lines = [head, ""]
    for key, mim in pretraining.items():
        lines.append(f"- Pretraining for `{key}`: {mim['how']}; {mim['options']['epochs']} epochs, "
                     f"{mim['train_min']:.1f} min, {mim['images_per_s']:.0f} images/s; {mim['measure']} "
                     + ", ".join(f"{row[next(iter(k for k in row if k.startswith('val_')))]:.3f}"
                                 for row in mim["curve"])
                     + f"; the best (epoch {mim['selected_epoch']}) starts SETR.")
    lines += ["", "| run | machine | SETR training min | images/s | val mIoU after each evaluation | best val mIoU | "
              "test mIoU (selected on val) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, result in results.items():
        curve, where = result["curve"], result.get("provenance", {})
        test = result.get("test", {}).get("miou")
        machine = where.get("machine", {})
        lines.append(f"| {NAMES[key]} | {machine.get('cpu_capability', '?')}, {where.get('commit', '?')} | "
                     f"{curve[-1]['train_min']:.1f} | {result['images_per_s']:.1f} | "
                     + ", ".join(f"{row['miou']:.3f}" for row in curve)
                     + f" | {max(row['miou'] for row in curve):.3f} | {'—' if test is None else f'{test:.3f}'} |")
    for key, entry in bar.items():
        lines += ["", f"{NAMES[key]}: ≥ {entry['miou_target']} val mIoU within {entry['budget_min']:.0f} min of "
                  f"SETR training " + ("met" if entry["met"] else "missed")
                  + f" (best {entry['best_miou_within']:.3f})."]
        for rival in ("scratch", "lraspp"):
            if f"against_{rival}" in entry:
                rows = entry[f"against_{rival}"]["rows"]
                lines.append(f"Against {NAMES[rival]} at equal minutes: "
                             + ", ".join(f"{row['miou']:.3f} vs {row['rival']:.3f} ({row['train_min']:.0f} min)"
                                         for row in rows if row["rival"] is not None)
                             + (" — ahead at every one." if entry[f"against_{rival}"]["ahead_at_every_evaluation"]
                                else " — not ahead at every one."))
    if choice:
        lines += ["", f"Picked: `{choice['picked']}` (`{PRETRAINED[0]}` ahead at {choice[f'{PRETRAINED[0]}_ahead_at']}"
                  f" of {choice['evaluations_compared']} evaluations at equal minutes; best "
                  + ", ".join(f"{key} {value:.3f}" for key, value in choice["best"].items()) + ")."]
    beside = {key: result.get("provenance", {}).get("beside", "nothing") for key, result in results.items()}
    if any(value != "nothing" for value in beside.values()):
        lines += ["", "Beside: " + "; ".join(f"{key}: {value}" for key, value in beside.items())]
    return "\n".join(lines)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key, result in results.items():
        curve = result["curve"]
        ax.plot([row["train_min"] for row in curve], [row["miou"] for row in curve], marker="o", ms=3, label=key)
    ax.axhline(BAR, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("segmentation training time (min, 2 CPU cores)")
    ax.set_ylabel("scenes val mIoU")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle("SETR-MLA from a pretrained encoder, from scratch, and LR-ASPP")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def earlier(out: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """The runs and pretrainings an earlier invocation wrote to `out`, each with its provenance."""
    if not out.is_file():
        return {}, {}
    old = json.loads(out.read_text())
    where = {key: old[key] for key in ("command", "commit", "machine") if key in old}
    results = {("mae" if key == "pretrained" else key): {"provenance": {**where, "beside": old.get("beside")},
                                                          **value}
               for key, value in old.get("results", {}).items()}
    pretraining = old.get("pretraining") or {}
    if "how" in pretraining:  # one unnamed pretraining: the MAE of the first version
        pretraining = {"mae": pretraining}
    return results, pretraining


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--runs", choices=(*PRETRAINED, "scratch", "lraspp"), nargs="+",
                        default=[*PRETRAINED, "scratch", "lraspp"])
    parser.add_argument("--pretrain-epochs", type=int, default=10, help="MAE's epochs over the train scenes")
    parser.add_argument("--classify-epochs", type=int, default=5, help="the classifier's epochs over "
                        "Fashion-MNIST's training images")
    parser.add_argument("--fashion-mnist-dir", help="where Fashion-MNIST's files are, for the classification "
                        "pretraining (default: vitlab's own lookup)")
    parser.add_argument("--epochs", type=int, default=7, help="each SETR run's epochs (7: about 40 minutes on "
                        "2 cores of an AVX2 host)")
    parser.add_argument("--budget-min", type=float, default=BUDGET_MIN, help="the minutes the bar is set for")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch each")
    parser.add_argument("--keep-runs", type=Path, help="keep the pretraining and SETR runs under this folder")
    parser.add_argument("--out", default=str(RESULTS / "setr_pretraining.json"))
    from benchmarks.harness import add_beside_option, provenance, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    from benchmarks.detr_scenes import ensure_scenes
    from benchmarks.setr_scenes import run_lraspp, run_setr

    out = Path(args.out)
    data = ensure_scenes(Path(args.data), args.quick)
    results, pretraining = earlier(out)
    epochs = 1 if args.quick else args.epochs
    setr_options = {"eval_batch_size": 8, "crop_size": 64} if args.quick else {}

    def stamp(result: dict) -> dict:
        return {**result, "provenance": provenance(beside=args.beside)}

    with tempfile.TemporaryDirectory() as root:
        runs = args.keep_runs or Path(root)
        for key in PRETRAINED:
            if key not in args.runs:
                continue
            if key == "mae":
                quick = {"img_size": 64, "eval_batch_size": 8, "batch_size": 8} if args.quick else {}
                made = pretrain_mae(data, runs / "mae", 1 if args.quick else args.pretrain_epochs, quick)
            else:
                quick = {"allow_partial_data": True, "batch_size": 32} if args.quick else {}
                made = pretrain_classifier(runs / "classified", 1 if args.quick else args.classify_epochs,
                                           {**quick, "data_dir": args.fashion_mnist_dir})
            pretraining[key] = stamp(made)
            results[key] = stamp(run_setr(data, MODEL, epochs, {**setr_options, "weights": str(runs / key)},
                                          runs / f"setr_{key}"))
        if "scratch" in args.runs:
            results["scratch"] = stamp(run_setr(data, MODEL, epochs, setr_options, runs / "scratch"))
    if "lraspp" in args.runs:
        minutes = max((r["curve"][-1]["train_min"] for k, r in results.items() if k != "lraspp"),
                      default=args.budget_min)
        every = max(minutes / 8, 0.01)
        results["lraspp"] = stamp(run_lraspp(data, 0.05 if args.quick else minutes,
                                             0.05 if args.quick else every, 8, 0.01, args.quick))
    order = [key for key in (*PRETRAINED, "scratch", "lraspp") if key in results]
    results = {key: results[key] for key in order}
    bar, choice = bars(results, args.budget_min), pick(results)
    record = {**provenance(beside=args.beside), "data": str(data), "pretraining": pretraining, "results": results,
              "bar": bar, "pick": choice}
    table = table_of(record)
    print(table)
    write_json(out, {**record, "table": table}, beside=args.beside)
    write_table(out.with_suffix(".md"), table + "\n")
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
