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
from ..interop.weights import load_model, load_weights
from ..models.registry import create_model
from .augment import compose, rand_augment, random_erasing
from .distributed import DistInfo, barrier, broadcast_object, init_distributed
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
    fp16: bool = False  # float16 autocast with a gradient scaler (CUDA only)
    accum_steps: int = 1  # batches per optimizer step (gradient accumulation)
    compile: bool = False  # torch.compile the forward pass
    seed: int = 0
    workers: int = 0
    threads: int | None = None
    device: str = "auto"  # "auto" (CUDA when there is one), "cpu", "cuda", "cuda:1", ...
    overwrite: bool = False  # start over in a run folder that already holds a run
    resume: str | None = None
    max_epochs_this_run: int | None = None
    model_overrides: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None  # start from these weights (fine-tuning): a run folder or a checkpoint file
    # DeiT's recipe (recipes.DEIT_OFF says what each does); None: the recipe's value, which is off
    randaugment: int | None = None
    randaugment_ops: int | None = None
    random_erasing: float | None = None
    mixup: float | None = None
    cutmix: float | None = None
    repeated_aug: int | None = None
    ema_decay: float | None = None
    layer_decay: float | None = None
    distill: str | None = None
    distill_alpha: float | None = None
    distill_tau: float | None = None
    teacher: str | None = None  # the run folder (or vitlab .safetensors) of the teacher for --distill


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
        ("randaugment", 0 <= recipe["randaugment"] <= 30, "a magnitude in 0 (off)..30"),
        ("randaugment-ops", recipe["randaugment_ops"] >= 1, "at least 1"),
        ("random-erasing", 0 <= recipe["random_erasing"] <= 1, "a probability in [0, 1]"),
        ("mixup", recipe["mixup"] >= 0, "0 (off) or more"),
        ("cutmix", recipe["cutmix"] >= 0, "0 (off) or more"),
        ("repeated-aug", recipe["repeated_aug"] >= 1, "1 (off) or more"),
        ("ema-decay", recipe["ema_decay"] == 0 or 0 < recipe["ema_decay"] < 1, "0 (off) or in (0, 1)"),
        ("layer-decay", recipe["layer_decay"] is None or 0 < recipe["layer_decay"] <= 1, "in (0, 1]"),
        ("distill", recipe["distill"] in ("none", "soft", "hard"), "none, soft or hard"),
        ("distill-alpha", 0 <= recipe["distill_alpha"] <= 1, "in [0, 1]"),
        ("distill-tau", recipe["distill_tau"] > 0, "positive"),
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
                        eval_batch_size: int = 256, dist: DistInfo | None = None):
    """Fashion-MNIST: in-memory batches with batched shift + flip; folders: a DataLoader over the datasets.
    In a distributed run each process gets its shard of both (the training shards padded to equal length)."""
    batch, repeats = recipe["batch_size"], recipe.get("repeated_aug", 1)
    dist = dist or DistInfo()
    shard = {"num_replicas": dist.world_size, "rank": dist.rank}
    if bundle.name == "fashion-mnist" and recipe["img_size"] == 28:
        pad, hflip = recipe["crop_padding"] or 0, recipe["hflip"]
        deit_ops = compose(
            rand_augment(recipe["randaugment_ops"], recipe["randaugment"]) if recipe.get("randaugment") else None,
            random_erasing(recipe["random_erasing"]) if recipe.get("random_erasing") else None,
        )

        def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
            if pad or hflip:
                x = random_shift_crop_flip(x, pad, hflip=hflip, generator=generator)
            return deit_ops(x) if deit_ops is not None else x

        common = {"mean": bundle.mean, "std": bundle.std, "channels": bundle.channels}
        train = TensorLoader(bundle.train.images, bundle.train.labels, batch, shuffle=True, drop_last=True,
                             augment=augment, seed=seed, repeats=repeats, **shard, **common)
        test = TensorLoader(bundle.test.images, bundle.test.labels, eval_batch_size, pad=False, **shard, **common)
        return train, test
    train = EpochDataLoader(bundle.train, batch, shuffle=True, drop_last=len(bundle.train) > batch * dist.world_size,
                            num_workers=workers, seed=seed, repeats=repeats, **shard)
    test = EpochDataLoader(bundle.test, eval_batch_size, num_workers=workers, pad=False, **shard)
    return train, test


def train_run(options: TrainOptions | None = None, **kwargs: Any) -> dict[str, Any]:
    """Train (or resume) a run; returns the last epoch's metrics plus `run_dir`."""
    options = options or TrainOptions(**kwargs)
    if options.resume:
        return _resume(options)
    if options.threads:
        torch.set_num_threads(options.threads)
    recipe = resolve(options)
    dist = init_distributed(resolve_device(options.device))
    # every process must write to the folder rank 0 names (a default name holds a timestamp)
    run_dir = Path(broadcast_object(options.out or f"runs/{recipe['model']}-{time.strftime('%Y%m%d-%H%M%S')}", dist))
    if dist.is_main:
        prepare_run_dir(run_dir, options.overwrite)
    barrier(dist)
    data = options.data
    if Path(data).expanduser().is_dir():
        data = str(Path(data).expanduser().resolve())  # so resume/eval/predict work from any directory
    data_dir = str(Path(options.data_dir).resolve()) if options.data_dir else None
    options = replace(options, data=data, data_dir=data_dir)
    bundle = build_datasets(
        data, data_dir=data_dir, val_fraction=options.val_fraction, img_size=recipe["img_size"],
        skip_bad_images=options.skip_bad_images, seed=options.seed, crop_padding=recipe["crop_padding"],
        hflip=recipe["hflip"], strict_counts=not options.allow_partial_data, **_per_image_deit(recipe),
    )
    torch.manual_seed(options.seed)
    model = create_model(
        recipe["model"], num_classes=bundle.num_classes, in_chans=bundle.channels, img_size=bundle.img_size,
        drop_path_rate=recipe["drop_path"], **options.model_overrides,
    )
    if options.weights:
        weights = str(Path(options.weights).expanduser().resolve())
        load_weights(model, _weights_file(weights))
        options = replace(options, weights=weights)
    if options.teacher:
        options = replace(options, teacher=str(Path(options.teacher).expanduser().resolve()))
    if (recipe["distill"] != "none") != bool(options.teacher):
        raise ValueError(f"--distill {recipe['distill']} and --teacher go together: give --distill soft|hard with "
                         f"--teacher RUN_DIR, or neither")
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
            f"--data-dir, --device, --threads and --compile can)"
        )
    if options.epochs is not None:  # a resumed run may be extended; the cosine is stretched to the new end
        recipe["epochs"] = options.epochs
    if saved.get("threads") or options.threads:
        torch.set_num_threads(options.threads or saved["threads"])  # same threads, same float reductions
    bundle = build_datasets(
        saved["data"], data_dir=options.data_dir or saved["data_dir"], val_fraction=saved["val_fraction"],
        img_size=recipe["img_size"], channels=data["channels"], skip_bad_images=saved["skip_bad_images"],
        seed=saved["seed"], crop_padding=recipe["crop_padding"], hflip=recipe["hflip"], mean=data["mean"],
        std=data["std"], strict_counts=not saved.get("allow_partial_data", False), **_per_image_deit(recipe),
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
                              "compile": options.compile,
                              "device": options.device if options.device != "auto" else saved.get("device", "auto")})
    return _fit(model, bundle, recipe, resumed, run_dir, info, resume=True)


RESUME_OPTIONS = {"resume", "epochs", "max_epochs_this_run", "data_dir", "device", "threads", "compile"}


def _fit(model, bundle, recipe, options, run_dir, info, resume: bool) -> dict[str, Any]:
    dist = init_distributed(resolve_device(options.device))
    train_loader, test_loader = build_train_loaders(bundle, recipe, options.seed, options.workers, dist=dist)
    config = TrainConfig(
        epochs=recipe["epochs"], batch_size=recipe["batch_size"], lr=recipe["lr"],
        weight_decay=recipe["weight_decay"], warmup_epochs=recipe["warmup_epochs"],
        label_smoothing=recipe["label_smoothing"], clip_grad=recipe["clip_grad"], bf16=options.bf16,
        seed=options.seed, max_epochs_this_run=options.max_epochs_this_run, fp16=options.fp16,
        accum_steps=options.accum_steps, compile=options.compile,
        **{key: recipe[key] for key in TRAINER_KEYS if key in recipe},
    )
    teacher = load_teacher(options.teacher, bundle) if options.teacher else None
    metrics = fit(model, train_loader, test_loader, config, run_dir, resume=resume, run_info=info, teacher=teacher,
                  dist=dist)
    return {**metrics, "run_dir": str(run_dir)}


TRAINER_KEYS = ("distill", "distill_alpha", "distill_tau", "mixup", "cutmix", "ema_decay", "layer_decay")


def _per_image_deit(recipe: dict[str, Any]) -> dict[str, Any]:
    """RandAugment and random erasing for the per-image pipelines of image folders."""
    ops = recipe.get("randaugment_ops", 2)
    return {"randaugment": (ops, recipe["randaugment"]) if recipe.get("randaugment") else None,
            "random_erasing": recipe.get("random_erasing", 0.0)}


def _weights_file(path: str) -> str:
    """A run folder stands for its best weights (its last if it kept no best)."""
    folder = Path(path)
    if folder.is_dir() and (folder / "config.json").is_file():
        for name in ("best.safetensors", "last.safetensors"):
            if (folder / name).is_file():
                return str(folder / name)
        raise FileNotFoundError(f"{folder} is a run folder without weights yet: it has not finished an epoch")
    return path


def load_teacher(path: str, bundle: DatasetBundle) -> nn.Module:
    """The frozen teacher of a distillation run: a run folder (its best weights) or a vitlab .safetensors file.

    It must see the student's inputs as it saw its own: the same image size, channels, normalisation and classes.
    """
    from .distill import freeze

    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(f"--teacher {path} does not exist; give the run folder of a trained teacher "
                                f"(e.g. `vitlab train --model resnet18_28 --out runs/teacher`)")
    teacher = load_model(_weights_file(path))
    if folder.is_dir():
        seen = read_run_info(folder)["data"]
        mine = {"img_size": bundle.img_size, "channels": bundle.channels, "classes": bundle.classes,
                "mean": list(bundle.mean), "std": list(bundle.std)}
        differs = {key: (seen[key], value) for key, value in mine.items()
                   if not _close(seen.get(key), value)}
        if differs:
            detail = "; ".join(f"{key}: teacher {a}, student {b}" for key, (a, b) in differs.items())
            raise ValueError(f"the teacher in {path} was trained on other inputs than this run's ({detail}); "
                             f"train the teacher on the same data and image size")
    classes = getattr(teacher, "num_classes", None)
    if classes != bundle.num_classes:
        raise ValueError(f"the teacher predicts {classes} classes, the data has {bundle.num_classes}")
    return freeze(teacher)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-6
    return a == b


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
