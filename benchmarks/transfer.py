"""Why released weights are the front door, measured here: a detector fine-tuned from a release of its own against
the same detector trained from scratch, for the same minutes on the same data.

    python benchmarks/transfer.py                                # detection, 15 minutes each, the release made first
    python benchmarks/transfer.py --minutes 15 --source-epochs 5
    python benchmarks/transfer.py --quick                        # a tiny set and one epoch each: the script works

1. Two scenes sets (`vitlab make-scenes --classes`): A holds five Fashion-MNIST classes (T-shirt/top, Trouser,
   Pullover, Dress, Coat), B the other five (Sandal, Shirt, Sneaker, Bag, Ankle boot), each 4,000 train, 500 val
   and 500 test scenes of 128 × 128 pixels; no garment class is in both.
2. The release: detr_small trained on A for --source-epochs with the from-scratch recipe of
   benchmarks/detr_scenes.py (lr 2e-4 everywhere, batch 4, no dropout); its best checkpoint (on A's val) is
   published on a local Hugging Face Hub server (tests/hub_server.py, 127.0.0.1) and fetched from it by name.
3. On B, for the same number of epochs (= --minutes of training at the release's measured epoch time: the model and
   the data size are the same, so an epoch costs the same), two `vitlab train --task detection` runs, each in its
   own process:
   - fine-tuned: `--weights hf-hub:vitlab-bench/...@<commit>` with the command's defaults (DETR's fine-tuning
     recipe: lr 1e-4, backbone 1e-5); B has five classes as A had, so the class head's shape fits and it is kept
     (its rows now name other garments, which fine-tuning relearns);
   - from scratch: the from-scratch recipe above.
   Both are evaluated on B's val scenes after every epoch (COCO AP50, pycocotools); the best on val is scored once
   on B's test scenes.

Time is training time (evaluations excluded), measured by the loop. Writes benchmarks/results/transfer.{json,md,png}
with the command, the commit and the machine (CPU, ISA). Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages
from benchmarks.harness.host import provenance

RESULTS = Path(__file__).parent / "results"
MINI = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fashion-mnist-mini"
CLASSES_A, CLASSES_B = (0, 1, 2, 3, 4), (5, 6, 7, 8, 9)
SCRATCH = ["--batch-size", "4", "--lr", "2e-4", "--backbone-lr", "2e-4", "--dropout", "0"]  # detr_scenes.py's
FINE_TUNE = ["--batch-size", "4"]  # the command's defaults otherwise: DETR's fine-tuning recipe
REPO = "vitlab-bench/detr_small-scenes-a"


def make_sets(root: Path, quick: bool) -> dict[str, Path]:
    from vitlab.data.scenes import SceneOptions, make_scenes

    sets = {}
    for name, classes in (("a", CLASSES_A), ("b", CLASSES_B)):
        folder = root / f"scenes-{name}"
        if not (folder / "annotations" / "instances_test.json").is_file():
            sizes = {"train": 24, "val": 6, "test": 6, "size": 64, "scale": (16, 32), "objects": (1, 3)} if quick \
                else {}
            make_scenes(folder, SceneOptions(classes=classes, **sizes), str(MINI) if quick else None,
                        allow_partial_data=quick)
        sets[name] = folder
    return sets


def train(args: list[str], env: dict[str, str] | None = None) -> list[dict]:
    """`vitlab train` in its own process (the hub's settings are read at import); its metrics rows."""
    out = Path(args[args.index("--out") + 1])
    subprocess.run([sys.executable, "-m", "vitlab", "train", "--task", "detection", "--model", "detr_small",
                    "--overwrite", *args], check=True, env={**os.environ, **(env or {})})
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def curve(rows: list[dict]) -> dict:
    *evaluations, test = rows
    spent, points = 0.0, []
    for row in evaluations:
        spent += row["train_time_s"]
        points.append({"epoch": row["epoch"], "train_min": round(spent / 60, 2), "ap50": row["val_map_50"],
                       "ap": row["val_map"]})
    return {"curve": points, "test_ap50": test["test_map_50"], "test_ap": test["test_map"],
            "selected_epoch": test["selected_epoch"], "epoch_s": spent / max(len(points), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="training minutes on B, each run")
    parser.add_argument("--source-epochs", type=int, default=5, help="training epochs of the release on A (5: about "
                        "15 minutes on 2 cores)")
    parser.add_argument("--data", type=Path, help="where the scenes sets are made (kept; default: a temporary "
                        "folder)")
    parser.add_argument("--quick", action="store_true", help="tiny sets, one epoch each: check the script works")
    args = parser.parse_args()

    from tests.hub_server import LocalHub

    with tempfile.TemporaryDirectory() as tmp:
        root = args.data or Path(tmp)
        sets = make_sets(root, args.quick)
        runs = Path(tmp) / "runs"
        common = ["--eval-batch-size", "8", "--threads", str(os.cpu_count() or 1)]
        if args.quick:
            common += ["--epochs", "1", "--batch-size", "4"]

        # the release; its epochs also say what an epoch costs here, hence how many fit in --minutes on B
        source = curve(train(["--data", str(sets["a"]), "--out", str(runs / "source"), *SCRATCH, *common,
                              *([] if args.quick else ["--epochs", str(args.source_epochs)])]))
        epoch_s = source["epoch_s"]
        target_epochs = 1 if args.quick else max(1, round(args.minutes * 60 / epoch_s))
        print(f"release: {len(source['curve'])} epochs on A, AP50 {source['test_ap50']:.3f} on A's test scenes; "
              f"{target_epochs} epochs on B each", flush=True)

        with LocalHub() as hub:
            weights = runs / "source" / "best.safetensors"
            sha = hub.publish(REPO, {"model.safetensors": weights if weights.is_file() else
                                     runs / "source" / "last.safetensors"})
            env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(Path(tmp) / "hf"), "HF_HOME": str(Path(tmp) / "hf"),
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "HF_HUB_OFFLINE": "0"}
            epochs = [] if args.quick else ["--epochs", str(target_epochs)]
            tuned = curve(train(["--data", str(sets["b"]), "--out", str(runs / "tuned"),
                                 "--weights", f"hf-hub:{REPO}@{sha}", *FINE_TUNE, *common, *epochs], env))
            fetched = [path for method, path in hub.requests if method == "GET" and path.endswith(".safetensors")]
        scratch = curve(train(["--data", str(sets["b"]), "--out", str(runs / "scratch"), *SCRATCH, *common,
                               *epochs]))

    result = {
        **provenance(),
        "data": {"a": {"classes": CLASSES_A}, "b": {"classes": CLASSES_B},
                 "scenes": "vitlab make-scenes defaults (4,000 / 500 / 500, 128 px, 1-6 items)"
                 if not args.quick else "quick: 24 / 6 / 6 at 64 px"},
        "release": {"model": "detr_small", "epochs": len(source["curve"]), "recipe": " ".join(SCRATCH),
                    "test_ap50_on_a": source["test_ap50"], "curve_on_a": source["curve"], "hub_repo": REPO,
                    "fetched_from_hub": fetched},
        "epoch_s": epoch_s, "minutes": args.minutes, "epochs_on_b": target_epochs,
        "fine_tuned": {"recipe": " ".join(FINE_TUNE) + " (the command's defaults otherwise)", **tuned},
        "scratch": {"recipe": " ".join(SCRATCH), **scratch},
        "quick": args.quick,
    }
    table = report(result)
    print(table)
    if args.quick:  # a check that the script works, not a measurement
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "transfer.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "transfer.md").write_text(table + "\n")
    plot(result, RESULTS / "transfer.png")


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"Transfer on scenes (detr_small): fine-tuned from a release trained on five other garment classes, "
             f"against from scratch, {result['epochs_on_b']} epochs each ({result['epoch_s'] / 60:.1f} min per "
             f"epoch); {m['cpu']} ({m['cpu_capability']}), {m['threads']} threads; commit {result['commit']}",
             "", "| epoch | train min | AP50 fine-tuned | AP50 scratch |", "|---:|---:|---:|---:|"]
    for tuned, scratch in zip(result["fine_tuned"]["curve"], result["scratch"]["curve"], strict=False):
        lines.append(f"| {tuned['epoch']} | {tuned['train_min']:.1f} | {tuned['ap50']:.3f} | {scratch['ap50']:.3f} |")
    lines += ["", f"Test AP50 (B's test scenes, best epoch on val): fine-tuned {result['fine_tuned']['test_ap50']:.3f}"
              f" (epoch {result['fine_tuned']['selected_epoch']}), scratch {result['scratch']['test_ap50']:.3f} "
              f"(epoch {result['scratch']['selected_epoch']}). The release: {result['release']['epochs']} epochs on "
              f"A, AP50 {result['release']['test_ap50_on_a']:.3f} on A's test scenes."]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("fine_tuned", "fine-tuned from the release"), ("scratch", "from scratch")):
        points = result[key]["curve"]
        ax.plot([p["train_min"] for p in points], [p["ap50"] for p in points], marker="o", label=label)
    ax.set_xlabel("training minutes on B")
    ax.set_ylabel("val AP50 on B")
    ax.set_title(f"detr_small on five new garment classes ({result['machine']['cpu_capability']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
