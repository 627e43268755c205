"""From options to a trained run folder, and from a run folder back to a model and its data pipeline.

This is the glue the command line calls; a notebook can call it too:

    result = train_run(data="fashion-mnist", out="runs/fm")        # the default recipe
    model, info = load_run("runs/fm")
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.registry import DatasetBundle, build_datasets
from ..data.transforms import random_shift_crop_flip
from ..interop.weights import load_model
from ..models.registry import create_model
from .loaders import EpochDataLoader, TensorLoader
from .recipes import recipe_for
from .trainer import TrainConfig, fit


@dataclass
class TrainOptions:
    """Everything `vitlab train` accepts; None means "the recipe's value for this data"."""

    data: str = "fashion-mnist"
    out: str | None = None
    model: str | None = None
    data_dir: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    warmup_epochs: float | None = None
    label_smoothing: float | None = None
    clip_grad: float | None = None
    drop_path: float | None = None
    img_size: int | None = None
    crop_padding: int | None = None
    hflip: bool | None = None
    val_fraction: float = 0.1
    skip_bad_images: bool = False
    allow_partial_data: bool = False  # accept a Fashion-MNIST copy with fewer than the official image counts
    bf16: bool = False
    seed: int = 0
    workers: int = 0
    threads: int | None = None
    device: str = "auto"  # "auto" (CUDA when there is one), "cpu", "cuda", "cuda:1", ...
    overwrite: bool = False  # start over in a run folder that already holds a run
    resume: str | None = None
    max_epochs_this_run: int | None = None
    model_overrides: dict[str, Any] = field(default_factory=dict)


def resolve(options: TrainOptions) -> dict[str, Any]:
    """The recipe for the data with every option the user gave laid over it, checked."""
    recipe = recipe_for(options.data)
    for key in recipe:
        value = getattr(options, key, None)
        if value is not None:
            recipe[key] = value
    check_recipe(recipe)
    return recipe


def check_recipe(recipe: dict[str, Any]) -> None:
    """Bad values fail here, before any data is read, with the option's command-line name."""
    rules = [
        ("epochs", recipe["epochs"] >= 1, "at least 1"),
        ("batch-size", recipe["batch_size"] >= 1, "at least 1"),
        ("lr", recipe["lr"] > 0, "positive"),
        ("weight-decay", recipe["weight_decay"] >= 0, "0 or more"),
        ("warmup-epochs", recipe["warmup_epochs"] >= 0, "0 or more"),
        ("label-smoothing", 0 <= recipe["label_smoothing"] < 1, "in [0, 1)"),
        ("clip-grad", recipe["clip_grad"] >= 0, "0 (off) or more"),
        ("drop-path", 0 <= recipe["drop_path"] < 1, "in [0, 1)"),
        ("crop-padding", recipe["crop_padding"] is None or recipe["crop_padding"] >= 0, "0 or more"),
    ]
    for name, ok, expected in rules:
        if not ok:
            value = recipe[name.replace("-", "_")]
            raise ValueError(f"--{name} must be {expected}, got {value}")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device here; use --device cpu")
    return torch.device(device)


def build_train_loaders(bundle: DatasetBundle, recipe: dict[str, Any], seed: int, workers: int = 0,
                        eval_batch_size: int = 256):
    """Fashion-MNIST: in-memory batches with batched shift + flip; folders: a DataLoader over the datasets."""
    batch = recipe["batch_size"]
    if bundle.name == "fashion-mnist" and recipe["img_size"] == 28:
        pad, hflip = recipe["crop_padding"] or 0, recipe["hflip"]

        def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
            return random_shift_crop_flip(x, pad, hflip=hflip, generator=generator) if pad or hflip else x

        common = {"mean": bundle.mean, "std": bundle.std, "channels": bundle.channels}
        train = TensorLoader(bundle.train.images, bundle.train.labels, batch, shuffle=True, drop_last=True,
                             augment=augment, seed=seed, **common)
        test = TensorLoader(bundle.test.images, bundle.test.labels, eval_batch_size, **common)
        return train, test
    train = EpochDataLoader(bundle.train, batch, shuffle=True, drop_last=len(bundle.train) > batch,
                            num_workers=workers, seed=seed)
    test = EpochDataLoader(bundle.test, eval_batch_size, num_workers=workers)
    return train, test


def train_run(options: TrainOptions | None = None, **kwargs: Any) -> dict[str, Any]:
    """Train (or resume) a run; returns the last epoch's metrics plus `run_dir`."""
    options = options or TrainOptions(**kwargs)
    if options.resume:
        return _resume(options)
    if options.threads:
        torch.set_num_threads(options.threads)
    recipe = resolve(options)
    run_dir = Path(options.out or f"runs/{recipe['model']}-{time.strftime('%Y%m%d-%H%M%S')}")
    prepare_run_dir(run_dir, options.overwrite)
    data = options.data
    if Path(data).expanduser().is_dir():
        data = str(Path(data).expanduser().resolve())  # so resume/eval/predict work from any directory
    data_dir = str(Path(options.data_dir).resolve()) if options.data_dir else None
    options = replace(options, data=data, data_dir=data_dir)
    bundle = build_datasets(
        data, data_dir=data_dir, val_fraction=options.val_fraction, img_size=recipe["img_size"],
        skip_bad_images=options.skip_bad_images, seed=options.seed, crop_padding=recipe["crop_padding"],
        hflip=recipe["hflip"], strict_counts=not options.allow_partial_data,
    )
    torch.manual_seed(options.seed)
    model = create_model(
        recipe["model"], num_classes=bundle.num_classes, in_chans=bundle.channels, img_size=bundle.img_size,
        drop_path_rate=recipe["drop_path"], **options.model_overrides,
    )
    info = {
        "data": {"name": data, "data_dir": data_dir, "classes": bundle.classes, "num_train": len(bundle.train),
                 "num_test": len(bundle.test), "channels": bundle.channels, "img_size": bundle.img_size,
                 "mean": list(bundle.mean), "std": list(bundle.std), "val_fraction": options.val_fraction,
                 "skipped_images": _skipped(bundle)},
        "recipe": recipe,
        "options": {k: v for k, v in asdict(options).items() if k != "model_overrides"},
        "model_overrides": options.model_overrides,
    }
    return _fit(model, bundle, recipe, options, run_dir, info, resume=False)


RUN_FILES = ("state.pt", "last.safetensors", "best.safetensors", "metrics.jsonl", "curves.png", "confusion.png")


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    """A new run never mixes with an old one: refuse a folder holding a run unless told to start over."""
    if (run_dir / "state.pt").exists() and not overwrite:
        raise ValueError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir}, start it over with --overwrite, "
            f"or give another --out"
        )
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _resume(options: TrainOptions) -> dict[str, Any]:
    run_dir = Path(options.resume)
    info = read_run_info(run_dir)
    saved, recipe, data = info["options"], info["recipe"], info["data"]
    ignored = [name for name, value in asdict(options).items()
               if name not in RESUME_OPTIONS and value != getattr(TrainOptions(), name)]
    if ignored:
        raise ValueError(
            f"--resume continues a run with its own settings; these options cannot change: "
            f"{', '.join('--' + n.replace('_', '-') for n in ignored)} (only --epochs, --max-epochs-this-run, "
            f"--data-dir, --device and --threads can)"
        )
    if options.epochs is not None:  # a resumed run may be extended; the cosine is stretched to the new end
        recipe["epochs"] = options.epochs
    if saved.get("threads") or options.threads:
        torch.set_num_threads(options.threads or saved["threads"])  # same threads, same float reductions
    bundle = build_datasets(
        saved["data"], data_dir=options.data_dir or saved["data_dir"], val_fraction=saved["val_fraction"],
        img_size=recipe["img_size"], channels=data["channels"], skip_bad_images=saved["skip_bad_images"],
        seed=saved["seed"], crop_padding=recipe["crop_padding"], hflip=recipe["hflip"], mean=data["mean"],
        std=data["std"], strict_counts=not saved.get("allow_partial_data", False),
    )
    if bundle.classes != data["classes"] or len(bundle.train) != data.get("num_train", len(bundle.train)):
        raise ValueError(
            f"the data of {run_dir} changed since the run started (classes {data['classes']}, "
            f"{data.get('num_train')} training images; now {bundle.classes}, {len(bundle.train)}); "
            f"resume on the same data or start a new run"
        )
    model = create_model(
        recipe["model"], num_classes=bundle.num_classes, in_chans=bundle.channels, img_size=bundle.img_size,
        drop_path_rate=recipe["drop_path"], **info.get("model_overrides", {}),
    )
    resumed = TrainOptions(**{**saved, "resume": None, "max_epochs_this_run": options.max_epochs_this_run,
                              "device": options.device if options.device != "auto" else saved.get("device", "auto")})
    return _fit(model, bundle, recipe, resumed, run_dir, info, resume=True)


RESUME_OPTIONS = {"resume", "epochs", "max_epochs_this_run", "data_dir", "device", "threads"}


def _fit(model, bundle, recipe, options, run_dir, info, resume: bool) -> dict[str, Any]:
    train_loader, test_loader = build_train_loaders(bundle, recipe, options.seed, options.workers)
    config = TrainConfig(
        epochs=recipe["epochs"], batch_size=recipe["batch_size"], lr=recipe["lr"],
        weight_decay=recipe["weight_decay"], warmup_epochs=recipe["warmup_epochs"],
        label_smoothing=recipe["label_smoothing"], clip_grad=recipe["clip_grad"], bf16=options.bf16,
        seed=options.seed, max_epochs_this_run=options.max_epochs_this_run,
    )
    device = resolve_device(options.device)
    metrics = fit(model, train_loader, test_loader, config, run_dir, resume=resume, run_info=info, device=device)
    return {**metrics, "run_dir": str(run_dir)}


def _skipped(bundle: DatasetBundle) -> int:
    dataset = getattr(bundle.train, "dataset", bundle.train)
    return int(getattr(dataset, "num_skipped", 0))


def read_run_info(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a vitlab run folder (no config.json); give the folder that `vitlab train --out` wrote"
        )
    return json.loads(path.read_text())


def load_run(run_dir: str | Path, which: str = "last") -> tuple[nn.Module, dict[str, Any]]:
    """The trained model of a run folder (`last` or `best` weights) and the run's config.json."""
    info = read_run_info(run_dir)
    path = Path(run_dir) / f"{which}.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the run has not finished an epoch yet")
    return load_model(path).eval(), info


def eval_loader_for_run(info: dict[str, Any], data: str | None = None, data_dir: str | None = None,
                        batch_size: int = 256):
    """The held-out loader of a run's data (or of other data, seen through the run's own preprocessing)."""
    saved = info["data"]
    bundle = build_datasets(
        data or saved["name"], data_dir=data_dir or saved.get("data_dir"), val_fraction=saved["val_fraction"],
        img_size=saved["img_size"], channels=saved["channels"], seed=info["options"]["seed"],
        mean=saved["mean"], std=saved["std"], augment=False, skip_bad_images=info["options"]["skip_bad_images"],
        strict_counts=not info["options"].get("allow_partial_data", False),
    )
    if bundle.classes != saved["classes"]:
        raise ValueError(
            f"the data's classes {bundle.classes} differ from the classes the run was trained on {saved['classes']}; "
            f"evaluate on data with the same class folders"
        )
    _, test = build_train_loaders(bundle, info["recipe"], seed=0, eval_batch_size=batch_size)
    return test, bundle.classes


@torch.inference_mode()
def predict_files(model: nn.Module, info: dict[str, Any], paths: list[str], top_k: int = 3) -> list[dict[str, Any]]:
    """Top-k classes of each image file, preprocessed as the run's evaluation data was."""
    from ..data.folder import load_image
    from ..data.transforms import build_eval_transform

    saved = info["data"]
    transform = build_eval_transform(saved["img_size"], saved["mean"], saved["std"], saved["channels"])
    images = torch.stack([transform(load_image(path, saved["channels"])) for path in paths])  # (B, C, H, W)
    probs = model(images).softmax(-1)
    k = min(top_k, probs.shape[-1])
    values, indices = probs.topk(k, dim=-1)
    return [
        {"image": str(path),
         "top_k": [{"class": saved["classes"][i], "index": int(i), "probability": float(p)}
                   for p, i in zip(row_p.tolist(), row_i.tolist())]}
        for path, row_p, row_i in zip(paths, values, indices)
    ]
