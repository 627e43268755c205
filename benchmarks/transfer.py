"""Why released weights are the front door, measured here: a model fine-tuned from a release of its own against the
same model trained from scratch, for the same minutes on the same data, for three systems.

    python benchmarks/transfer.py                                  # detection: detr_small, 15 minutes each
    python benchmarks/transfer.py --system segmentation            # setr_mla_small, 15 minutes each
    python benchmarks/transfer.py --system classification          # vit_mini_convstem_28, 3 minutes each
    python benchmarks/transfer.py --system detection --quick       # a tiny set and one epoch each: the script works

1. Two data sets with no class in common.
   - detection and segmentation: two scenes sets (`vitlab make-scenes --classes`): A holds five Fashion-MNIST classes
     (T-shirt/top, Trouser, Pullover, Dress, Coat), B the other five (Sandal, Shirt, Sneaker, Bag, Ankle boot), each
     4,000 train, 500 val and 500 test scenes of 128 × 128 pixels (boxes for DETR, masks for SETR).
   - classification: two image folders (train/ val/ test/ of class sub-folders of PNG files) of Fashion-MNIST items:
     A the first five classes (2,000 train and 200 val items per class from Fashion-MNIST's train split, its 1,000
     test items per class), B the other five with a user's small data (500 train and 100 val items per class, the
     1,000 test items per class).
2. The release: the model trained on A for --source-epochs with the from-scratch recipe below; its best checkpoint
   (on A's val) is published on a local Hugging Face Hub server (tests/hub_server.py, 127.0.0.1) and fetched from it
   by name (`--weights hf-hub:vitlab-bench/...@<commit>`).
3. On B, two `vitlab train` runs, each in its own process, for the same number of epochs (= --minutes of training
   at the release's measured epoch time, scaled by B's size: same model, same image size, so an image costs the
   same): fine-tuned from the release, and from scratch. B has five classes as A had, so the class head's shape fits
   and it is kept (its rows now name other classes, which fine-tuning relearns). Both are evaluated on B's val set
   after every epoch; the best on val is scored once on B's test set.

The recipes: detection from scratch as benchmarks/detr_scenes.py (lr 2e-4 everywhere, batch 4, no dropout),
fine-tuned with the command's defaults (DETR's: lr 1e-4, backbone 1e-5); segmentation both with the command's
defaults (the paper's: SGD lr 0.01, heads 10×, poly); classification from scratch with the Fashion-MNIST recipe
(AdamW lr 2e-3, batch 128, 28 px), fine-tuned with the command's default for a release (lr 1e-4).

Time is training time (evaluations excluded), measured by the loop. Writes benchmarks/results/transfer_SYSTEM.
{json,md,png} with the command, the commit and the machine (CPU, ISA). Run one benchmark at a time: the machine has
2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages
from benchmarks.harness import add_beside_option, provenance, write_json, write_table

RESULTS = Path(__file__).parent / "results"
MINI = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fashion-mnist-mini"
CLASSES_A, CLASSES_B = (0, 1, 2, 3, 4), (5, 6, 7, 8, 9)
# per class: (train, val) items from Fashion-MNIST's train split; test: all of its test items of the class
FOLDER_SIZES = {"a": (2000, 200), "b": (500, 100)}


@dataclass(frozen=True)
class System:
    task: str
    model: str
    metric: str  # the metrics rows' key after val_ / test_
    label: str
    scratch: tuple[str, ...]
    fine_tune: tuple[str, ...]
    source_epochs: int  # the release's epochs on A
    minutes: float  # training minutes on B, each run
    eval_batch_size: int | None  # None: the task has no such option


SYSTEMS = {
    "detection": System("detection", "detr_small", "map_50", "AP50",
                        ("--batch-size", "4", "--lr", "2e-4", "--backbone-lr", "2e-4", "--dropout", "0"),
                        ("--batch-size", "4"), 5, 15.0, 8),  # 5 epochs: about 16 minutes on 2 cores
    "segmentation": System("segmentation", "setr_mla_small", "miou", "mIoU", (), (), 2, 15.0, 8),  # 5.7 min/epoch
    "classification": System("classification", "vit_mini_convstem_28", "acc", "accuracy",
                             ("--lr", "2e-3", "--batch-size", "128", "--img-size", "28", "--warmup-epochs", "1"),
                             ("--batch-size", "128", "--img-size", "28", "--warmup-epochs", "1"), 10, 3.0, None),
}


def make_scenes_sets(root: Path, quick: bool) -> dict[str, Path]:
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


def make_folder_sets(root: Path, quick: bool) -> dict[str, Path]:
    """Fashion-MNIST items as two image folders, train/val/test/<class name>/NNNNN.png; made once."""
    from PIL import Image

    from vitlab.data.fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist

    kwargs = {"data_dir": str(MINI), "strict_counts": False} if quick else {}
    train_images, train_labels = load_fashion_mnist("train", **kwargs)
    test_images, test_labels = load_fashion_mnist("test", **kwargs)
    sets = {}
    for name, classes in (("a", CLASSES_A), ("b", CLASSES_B)):
        folder = root / f"items-{name}"
        sets[name] = folder
        if (folder / "done").is_file():
            continue
        n_train, n_val = (8, 2) if quick else FOLDER_SIZES[name]
        for c in classes:
            train = (train_labels == c).nonzero().flatten()
            parts = {"train": (train_images, train[:n_train]), "val": (train_images, train[n_train:n_train + n_val]),
                     "test": (test_images, (test_labels == c).nonzero().flatten())}
            for split, (images, picked) in parts.items():
                out = folder / split / FASHION_MNIST_CLASSES[c].replace("/", "-")
                out.mkdir(parents=True, exist_ok=True)
                for i in picked.tolist():
                    Image.fromarray(images[i].numpy()).save(out / f"{i:05d}.png")
        (folder / "done").write_text("")
    return sets


def train(system: System, args: list[str], env: dict[str, str] | None = None) -> list[dict]:
    """`vitlab train` in its own process (the hub's settings are read at import); its metrics rows."""
    out = Path(args[args.index("--out") + 1])
    subprocess.run([sys.executable, "-m", "vitlab", "train", "--task", system.task, "--model", system.model,
                    "--overwrite", *args], check=True, env={**os.environ, **(env or {})})
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def curve(system: System, rows: list[dict]) -> dict:
    *evaluations, test = rows
    spent, points = 0.0, []
    for row in evaluations:
        spent += row["train_time_s"]
        points.append({"epoch": row["epoch"], "train_min": round(spent / 60, 3), "val": row[f"val_{system.metric}"]})
    return {"curve": points, "test": test[f"test_{system.metric}"], "selected_epoch": test["selected_epoch"],
            "epoch_s": spent / max(len(points), 1)}


def count_train(folder: Path, system: System) -> int:
    if system.task == "classification":
        return sum(1 for path in (folder / "train").rglob("*.png"))
    return sum(1 for _ in (folder / "images" / "train").glob("*.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=SYSTEMS, default="detection")
    parser.add_argument("--minutes", type=float, help="training minutes on B, each run (default: the system's, "
                        "15 for detection and segmentation, 3 for classification)")
    parser.add_argument("--source-epochs", type=int, help="training epochs of the release on A (default: the "
                        "system's: 5 detection, 2 segmentation, 10 classification)")
    parser.add_argument("--data", type=Path, help="where the data sets are made (kept and reused; default: a "
                        "temporary folder)")
    parser.add_argument("--quick", action="store_true", help="tiny sets, one epoch each: check the script works")
    add_beside_option(parser)
    args = parser.parse_args()
    system = SYSTEMS[args.system]
    minutes = args.minutes or system.minutes
    source_epochs = args.source_epochs or system.source_epochs
    repo = f"vitlab-bench/{system.model}-{args.system}-a"

    from tests.hub_server import LocalHub

    with tempfile.TemporaryDirectory() as tmp:
        root = args.data or Path(tmp)
        make = make_folder_sets if system.task == "classification" else make_scenes_sets
        sets = make(root / "quick" if args.quick and args.data else root, args.quick)
        runs = Path(tmp) / "runs"
        common = ["--threads", str(os.cpu_count() or 1)]
        if system.eval_batch_size:
            common += ["--eval-batch-size", str(system.eval_batch_size)]
        if args.quick:
            common += ["--epochs", "1", "--batch-size", "4"]

        # the release; its epochs also say what an image costs here, hence how many epochs on B fit in --minutes
        source = curve(system, train(system, ["--data", str(sets["a"]), "--out", str(runs / "source"),
                                              *system.scratch, *common,
                                              *([] if args.quick else ["--epochs", str(source_epochs)])]))
        size_a, size_b = count_train(sets["a"], system), count_train(sets["b"], system)
        epoch_s_b = source["epoch_s"] * size_b / size_a
        target_epochs = 1 if args.quick else max(1, round(minutes * 60 / epoch_s_b))
        print(f"release: {len(source['curve'])} epochs on A, {system.label} {source['test']:.3f} on A's test set; "
              f"{target_epochs} epochs on B each", flush=True)

        with LocalHub() as hub:
            weights = runs / "source" / "best.safetensors"
            sha = hub.publish(repo, {"model.safetensors": weights if weights.is_file() else
                                     runs / "source" / "last.safetensors"})
            env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(Path(tmp) / "hf"), "HF_HOME": str(Path(tmp) / "hf"),
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "HF_HUB_OFFLINE": "0"}
            epochs = [] if args.quick else ["--epochs", str(target_epochs)]
            tuned = curve(system, train(system, ["--data", str(sets["b"]), "--out", str(runs / "tuned"),
                                                 "--weights", f"hf-hub:{repo}@{sha}", *system.fine_tune, *common,
                                                 *epochs], env))
            fetched = [path for method, path in hub.requests if method == "GET" and path.endswith(".safetensors")]
        scratch = curve(system, train(system, ["--data", str(sets["b"]), "--out", str(runs / "scratch"),
                                               *system.scratch, *common, *epochs]))

    result = {
        **provenance(beside=args.beside),
        "system": args.system, "model": system.model, "metric": system.label,
        "data": {"a": {"classes": CLASSES_A, "train": size_a}, "b": {"classes": CLASSES_B, "train": size_b},
                 "kind": "Fashion-MNIST items in image folders" if system.task == "classification"
                 else "vitlab make-scenes defaults (4,000 / 500 / 500, 128 px, 1-6 items)"},
        "release": {"epochs": len(source["curve"]), "recipe": " ".join(system.scratch), "test_on_a": source["test"],
                    "curve_on_a": source["curve"], "hub_repo": repo, "fetched_from_hub": fetched},
        "epoch_s_a": source["epoch_s"], "minutes": minutes, "epochs_on_b": target_epochs,
        "fine_tuned": {"recipe": " ".join(system.fine_tune) + " (the command's defaults otherwise)", **tuned},
        "scratch": {"recipe": " ".join(system.scratch) + " (the command's defaults otherwise)", **scratch},
        "quick": args.quick,
    }
    table = report(result)
    print(table)
    if args.quick:  # a check that the script works, not a measurement
        return
    stem = RESULTS / f"transfer_{args.system}"
    write_json(stem.with_suffix(".json"), result, beside=args.beside, indent=1)
    write_table(stem.with_suffix(".md"), table + "\n")
    plot(result, stem.with_suffix(".png"))


def report(result: dict) -> str:
    m, label = result["machine"], result["metric"]
    tuned, scratch = result["fine_tuned"], result["scratch"]
    lines = [f"Transfer ({result['system']}, {result['model']}): fine-tuned from a release trained on five other "
             f"Fashion-MNIST classes, against from scratch, {result['epochs_on_b']} epochs each; {m['cpu']} "
             f"({m['cpu_capability']}), {m['threads']} threads; commit {result['commit']}",
             "", f"| epoch | train min fine-tuned | val {label} fine-tuned | train min scratch | val {label} scratch |",
             "|---:|---:|---:|---:|---:|"]
    for a, b in zip(tuned["curve"], scratch["curve"], strict=False):
        lines.append(f"| {a['epoch']} | {a['train_min']:.1f} | {a['val']:.3f} | {b['train_min']:.1f} | "
                     f"{b['val']:.3f} |")
    lines += ["", f"Test {label} (B's test set, best epoch on val): fine-tuned {tuned['test']:.3f} (epoch "
              f"{tuned['selected_epoch']}), scratch {scratch['test']:.3f} (epoch {scratch['selected_epoch']}). The "
              f"release: {result['release']['epochs']} epochs on A, {label} {result['release']['test_on_a']:.3f} on "
              f"A's test set."]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("fine_tuned", "fine-tuned from the release"), ("scratch", "from scratch")):
        points = result[key]["curve"]
        ax.plot([p["train_min"] for p in points], [p["val"] for p in points], marker="o", label=label)
    ax.set_xlabel("training minutes on B")
    ax.set_ylabel(f"val {result['metric']} on B")
    ax.set_title(f"{result['model']} on five new classes ({result['machine']['cpu_capability']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
