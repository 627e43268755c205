"""SETR from an encoder pretrained on the scenes' own images (MAE), against SETR from scratch and against LR-ASPP,
at equal minutes of segmentation training, run back to back on one machine.

    python benchmarks/setr_pretraining.py                        # MAE 10 epochs, then the three, 45 minutes each
    python benchmarks/setr_pretraining.py --pretrain-epochs 20 --epochs 7
    python benchmarks/setr_pretraining.py --quick                # a smoke run on a tiny set

The paper starts SETR's ViT from ImageNet-21k weights; none can be downloaded here, so the encoder is pretrained on
the training scenes themselves (their images only, never a mask) by masked image modelling: `vitlab train --task
mim` with `mae_small`, the encoder of setr_*_small with MAE's decoder, 75 % of the patches hidden. The MIM run's
best weights (lowest reconstruction loss on the val scenes' images) start `setr_mla_small` with `--weights`; the
same SETR recipe (setr_scenes.py's: `vitlab train --task segmentation`'s defaults) trains from random weights as
the control, then LR-ASPP (torchvision, random weights, setr_scenes.py's loop) for the minutes the pretrained SETR
trained. Every curve is val mIoU against minutes of segmentation training; the pretraining's minutes are stated
beside, not hidden. The bars: the pretrained SETR ≥ 0.5 mIoU within 45 minutes of SETR training and ahead of
LR-ASPP at equal minutes.

Writes benchmarks/results/setr_pretraining.{json,md,png}. Run one benchmark at a time: the machine has 2 cores.
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


def pretrain(data: Path, run: Path, epochs: int, options: dict) -> dict:
    """A `vitlab train --task mim` run of mae_small on the data's images; its curve and minutes."""
    from vitlab.engine.run import read_metrics
    from vitlab.tasks import train

    train("mim", out=str(run), overwrite=True, data=str(data), model="mae_small", epochs=epochs, **options)
    *rows, test = read_metrics(run)
    spent, curve = 0.0, []
    for row in rows:
        spent += row["train_time_s"]
        curve.append({"train_min": spent / 60, "epoch": row["epoch"], "val_loss": row["val_loss"],
                      "loss": row["train_loss"]})
    return {"model": "mae_small", "options": {"epochs": epochs, **options}, "curve": curve,
            "train_min": spent / 60, "test_loss": test.get("test_loss"), "selected_epoch": test.get("selected_epoch"),
            "images_per_s": sum(r["train_images_per_s"] for r in rows) / len(rows)}


def bars(results: dict[str, dict], budget_min: float) -> dict:
    from benchmarks.denoising_detection import at_minute

    pretrained = results.get("pretrained")
    if not pretrained:
        return {}
    within = [row for row in pretrained["curve"] if row["train_min"] <= budget_min * 1.01]
    best = max((row["miou"] for row in within), default=None)
    out = {"miou_target": BAR, "budget_min": budget_min, "best_miou_within": best,
           "met": best is not None and best >= BAR}
    for rival in ("scratch", "lraspp"):
        if rival in results:
            rows = [{"train_min": row["train_min"], "miou": row["miou"],
                     "rival": at_minute(results[rival]["curve"], row["train_min"], "miou")}
                    for row in pretrained["curve"]]
            compared = [row for row in rows if row["rival"] is not None]
            out[f"against_{rival}"] = {"rows": rows, "ahead_at_every_evaluation":
                                       bool(compared) and all(row["miou"] > row["rival"] for row in compared)}
    return out


def markdown(results: dict[str, dict], mim: dict | None, bar: dict, head: str) -> str:
    lines = [head, ""]
    if mim:
        lines += [f"Pretraining (MAE, mae_small on the train scenes' images, masks unused): {mim['options']['epochs']} "
                  f"epochs, {mim['train_min']:.1f} min, {mim['images_per_s']:.1f} images/s; val reconstruction loss "
                  + ", ".join(f"{row['val_loss']:.3f}" for row in mim["curve"])
                  + f"; the best (epoch {mim['selected_epoch']}) starts SETR.", ""]
    lines += ["| run | SETR training min | images/s | val mIoU after each evaluation | best val mIoU | test mIoU "
              "(selected on val) |", "| --- | --- | --- | --- | --- | --- |"]
    names = {"pretrained": f"{MODEL}, encoder from MAE", "scratch": f"{MODEL}, from scratch",
             "lraspp": "LR-ASPP (MobileNetV3), from scratch"}
    for key, result in results.items():
        curve = result["curve"]
        test = result.get("test", {}).get("miou")
        lines.append(f"| {names[key]} | {curve[-1]['train_min']:.1f} | {result['images_per_s']:.1f} | "
                     + ", ".join(f"{row['miou']:.3f}" for row in curve)
                     + f" | {max(row['miou'] for row in curve):.3f} | {'—' if test is None else f'{test:.3f}'} |")
    if bar:
        lines += ["", f"Bar: ≥ {bar['miou_target']} val mIoU within {bar['budget_min']:.0f} min of SETR training: "
                  + ("met" if bar["met"] else "missed") + f" (best {bar['best_miou_within']:.3f})."]
        for rival in ("scratch", "lraspp"):
            if f"against_{rival}" in bar:
                rows = bar[f"against_{rival}"]["rows"]
                lines.append(f"Against {names[rival]} at equal minutes: "
                             + ", ".join(f"{row['miou']:.3f} vs {row['rival']:.3f} ({row['train_min']:.0f} min)"
                                         for row in rows if row["rival"] is not None)
                             + (" — ahead at every one." if bar[f"against_{rival}"]["ahead_at_every_evaluation"]
                                else " — not ahead at every one."))
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
    fig.suptitle("SETR-MLA from an MAE-pretrained encoder, from scratch, and LR-ASPP")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--runs", choices=("pretrained", "scratch", "lraspp"), nargs="+",
                        default=["pretrained", "scratch", "lraspp"])
    parser.add_argument("--pretrain-epochs", type=int, default=10, help="MAE's epochs over the train scenes")
    parser.add_argument("--epochs", type=int, default=7, help="each SETR run's epochs (7: about 40 minutes on "
                        "2 cores of an AVX2 host)")
    parser.add_argument("--budget-min", type=float, default=BUDGET_MIN, help="the minutes the bar is set for")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch each")
    parser.add_argument("--keep-runs", type=Path, help="keep the MIM and SETR runs under this folder")
    parser.add_argument("--beside", default="nothing", help="what else ran on the machine meanwhile, recorded")
    parser.add_argument("--out", default=str(RESULTS / "setr_pretraining.json"))
    args = parser.parse_args(argv)
    from benchmarks.detr_scenes import ensure_scenes
    from benchmarks.harness.host import provenance
    from benchmarks.setr_scenes import run_lraspp, run_setr

    data = ensure_scenes(Path(args.data), args.quick)
    results: dict[str, dict] = {}
    mim = None
    setr_options = {"eval_batch_size": 8, "crop_size": 64} if args.quick else {}
    with tempfile.TemporaryDirectory() as root:
        runs = args.keep_runs or Path(root)
        if "pretrained" in args.runs:
            mim_options = {"img_size": 64, "eval_batch_size": 8, "batch_size": 8} if args.quick else {}
            mim = pretrain(data, runs / "mim", 1 if args.quick else args.pretrain_epochs, mim_options)
            results["pretrained"] = run_setr(data, MODEL, 1 if args.quick else args.epochs,
                                             {**setr_options, "weights": str(runs / "mim")}, runs / "pretrained")
        if "scratch" in args.runs:
            results["scratch"] = run_setr(data, MODEL, 1 if args.quick else args.epochs, setr_options,
                                          runs / "scratch")
    if "lraspp" in args.runs:
        minutes = max((r["curve"][-1]["train_min"] for r in results.values()), default=args.budget_min)
        every = max(minutes / 8, 0.01)
        results["lraspp"] = run_lraspp(data, 0.05 if args.quick else minutes, 0.05 if args.quick else every, 8,
                                       0.01, args.quick)
    bar = bars(results, args.budget_min)
    where = provenance()
    head = (f"SETR pretraining on the scenes, run back to back: {where['machine']['cpu']} "
            f"({where['machine']['cpu_capability']}), {where['machine']['threads']} threads, commit {where['commit']}")
    table = markdown(results, mim, bar, head)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**where, "data": str(data), "pretraining": mim, "results": results, "bar": bar,
                               "beside": args.beside, "table": table}, indent=2) + "\n")
    tmp.replace(out)
    out.with_suffix(".md").write_text(table + "\n")
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
