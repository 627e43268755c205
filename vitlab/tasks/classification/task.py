"""Image classification on the loop: ViT, DeiT (distillation, Mixup/CutMix, EMA, layer decay) and the ResNet
teacher, on Fashion-MNIST or a folder of class sub-folders.

loss = DeiT's objective (distill.py): label-smoothed cross-entropy, plus the teacher's term when
distilling; the best checkpoint has the highest validation accuracy (a held-out part of the training images where
the data has no val/), and the test images are scored once, on it, at the end.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ...data.registry import DatasetBundle, build_datasets
from ...data.transforms import build_eval_transform, random_shift_crop_flip
from ...engine.augment import compose, mixup_cutmix, rand_augment, random_erasing
from ...engine.distributed import DistInfo, all_reduce_sum
from ...engine.loaders import EpochDataLoader, TensorLoader
from ...engine.loop import TaskData
from ...engine.run import weights_file
from ...interop.hub import names_remote_weights
from ...models.deit import DistilledOutput
from ...models.registry import apply_overrides, build_model, get_config
from ..base import Task, register_task, release_overrides
from ..weights_options import released
from .config import (
    ClassificationConfig,
    ClassificationEvalOptions,
    ClassificationPredictOptions,
    ClassificationServeOptions,
)
from .distill import DistillationLoss
from .evaluate import evaluate, mirror_mean, with_test_time_flip
from .recipes import recipe_for


def _absolute(path: str | None) -> str | None:
    """A path made absolute; released weights by name (a tag, hf-hub:org/name) stay names."""
    return str(Path(path).expanduser().resolve()) if path and not names_remote_weights(path) else path


@register_task
class ClassificationTask(Task):
    name: ClassVar[str] = "classification"
    order: ClassVar[int] = 10
    commands: ClassVar[tuple[str, ...]] = ("attention", "inspect")
    inference_module: ClassVar[str] = "vitlab.tasks.classification.inference"
    EvalOptions: ClassVar[type] = ClassificationEvalOptions
    PredictOptions: ClassVar[type] = ClassificationPredictOptions
    ServeOptions: ClassVar[type] = ClassificationServeOptions
    page: ClassVar[str] = "classes"
    Config: ClassVar[type] = ClassificationConfig
    best: ClassVar[tuple[str, str]] = ("val_acc", "max")
    sample_name: ClassVar[str] = "images"
    extra_files: ClassVar[tuple[str, ...]] = ("confusion.png", "confusion-other-data.png")  # vitlab eval's
    resumable: ClassVar[tuple[str, ...]] = ("data_dir",)
    int8_guard: ClassVar[dict[str, float]] = {"accuracy": 0.01}
    int8_agreement_of: ClassVar[str] = "images (top-1)"

    def __init__(self, config: ClassificationConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = self._with_model(config)  # a release's model where --model is not given, before the recipe's
        release = released(config.weights)
        if release and release.model == config.model and config.img_size is None:  # fine-tune at its resolution
            size = get_config(release.model, **release.overrides).img_size
            config = dataclasses.replace(config, img_size=size if isinstance(size, int) else size[0])
        config = config.resolved()
        data = config.data
        if Path(data).expanduser().is_dir():
            data = _absolute(data)  # so resume, eval and predict work from any directory
        config = dataclasses.replace(config, data=data, data_dir=_absolute(config.data_dir),
                                     weights=_absolute(config.weights),
                                     teacher=_absolute(config.teacher))
        super().__init__(config, loop, dist)
        self.bundle: DatasetBundle | None = None

    def int8_agreement(self, reference: Any, quantized: Any) -> tuple[float, int]:
        """Images whose top-1 class int8 keeps: logits (B, K) of each. With test-time flip each call holds the
        images and then their mirrors (MirrorAveraged), and the answer compared is the mean of the two."""
        if self.config.test_time_flip:
            reference, quantized = mirror_mean(torch.as_tensor(reference)), mirror_mean(torch.as_tensor(quantized))
        return float((reference.argmax(-1) == quantized.argmax(-1)).sum()), len(reference)

    @classmethod
    def loop_defaults(cls, config: ClassificationConfig) -> dict[str, Any]:
        # fine-tuning a release (a tag or an hf-hub: repo): the data's recipe at a tenth or less of its learning rate
        # (AdamW at 1e-4, as is usual for fine-tuning a ViT with it), so the first steps do not wash out what the
        # release learnt
        from ...interop.hub import names_remote_weights

        return {**recipe_for(config.data)["loop"], **({"lr": 1e-4} if names_remote_weights(config.weights) else {})}

    @classmethod
    def recipes(cls) -> dict[str, dict[str, Any]]:
        from .recipes import RECIPES

        return {name: recipe["loop"] for name, recipe in RECIPES.items()}

    # -- data ----------------------------------------------------------------------------------------------------
    def datasets(self, augment: bool = True, saved: dict[str, Any] | None = None, data: str | None = None,
                 data_dir: str | None = None) -> DatasetBundle:
        """The train, validation and test sets; `saved`: a run's recorded data, whose preprocessing is reused."""
        c = self.config
        kept = {"channels": saved["channels"], "mean": saved["mean"], "std": saved["std"]} if saved else {}
        return build_datasets(
            data or c.data, data_dir=data_dir or c.data_dir, val_fraction=c.val_fraction, img_size=c.img_size,
            skip_bad_images=c.skip_bad_images, seed=self.loop.seed, crop_padding=c.crop_padding, hflip=c.hflip,
            strict_counts=not c.allow_partial_data, augment=augment,
            randaugment=(c.randaugment_ops, c.randaugment) if c.randaugment else None,
            random_erasing=c.random_erasing, **kept,
        )

    @classmethod
    def check_data(cls, data: str, **options: Any) -> list[Any]:
        from ...data.check_splits import check_image_folder

        return check_image_folder(data)

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        self.bundle = self.datasets(saved=saved)
        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(*self.loaders(self.bundle))

    def loaders(self, bundle: DatasetBundle, eval_batch_size: int = 256):
        """(train, val, test) loaders; Fashion-MNIST: in-memory batches with batched shift + flip; folders: a
        DataLoader over the datasets. In a distributed run each process gets its shard of each (the training shards
        padded to equal length). test is None where the data has none."""
        c, loop, dist = self.config, self.loop, self.dist
        shard = {"num_replicas": dist.world_size, "rank": dist.rank}
        batch, repeats, seed = loop.batch_size, c.repeated_aug, loop.seed
        if bundle.name == "fashion-mnist" and c.img_size == 28:
            pad, hflip = c.crop_padding or 0, c.hflip
            deit_ops = compose(
                rand_augment(c.randaugment_ops, c.randaugment) if c.randaugment else None,
                random_erasing(c.random_erasing) if c.random_erasing else None,
            )

            def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
                if pad or hflip:
                    x = random_shift_crop_flip(x, pad, hflip=hflip, generator=generator)
                return deit_ops(x) if deit_ops is not None else x

            common = {"mean": bundle.mean, "std": bundle.std, "channels": bundle.channels}
            train = TensorLoader(bundle.train.images, bundle.train.labels, batch, shuffle=True, drop_last=True,
                                 augment=augment, seed=seed, repeats=repeats, **shard, **common)

            def held_out(part):
                return TensorLoader(part.images, part.labels, eval_batch_size, pad=False, **shard, **common)

            return train, held_out(bundle.val), None if bundle.test is None else held_out(bundle.test)
        train = EpochDataLoader(bundle.train, batch, shuffle=True,
                                drop_last=len(bundle.train) > batch * dist.world_size, num_workers=loop.workers,
                                seed=seed, repeats=repeats, **shard)

        def held_out(part):
            return EpochDataLoader(part, eval_batch_size, num_workers=loop.workers, pad=False, **shard)

        return train, held_out(bundle.val), None if bundle.test is None else held_out(bundle.test)

    def run_info(self) -> dict[str, Any]:
        b, c = self.bundle, self.config
        dataset = getattr(b.train, "dataset", b.train)
        return {"data": {"name": c.data, "data_dir": c.data_dir, "classes": b.classes, "num_train": len(b.train),
                         "num_val": len(b.val), "num_test": 0 if b.test is None else len(b.test), "split": b.split,
                         "channels": b.channels, "img_size": b.img_size,
                         "mean": list(b.mean), "std": list(b.std), "val_fraction": c.val_fraction,
                         "skipped_images": int(getattr(dataset, "num_skipped", 0)),
                         # what its predictions, the server and the pipeline put an image through
                         "preprocessing": build_eval_transform(b.img_size, b.mean, b.std, b.channels).to_dict()}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        b = self.bundle
        if b.classes != data["classes"] or len(b.train) != data.get("num_train", len(b.train)):
            raise ValueError(
                f"the data of this run changed since it started (classes {data['classes']}, "
                f"{data.get('num_train')} training images; now {b.classes}, {len(b.train)}); resume on the same "
                f"data or start a new run")

    # -- model and loss ------------------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        from ...interop import load_weights

        c, b = self.config, self.bundle
        config = get_config(c.model, **release_overrides(self.config)).for_data(
            classes=b.num_classes, labels=b.classes, channels=b.channels, image_size=b.img_size, drop_path=c.drop_path)
        model = build_model(apply_overrides(config, **c.model_overrides), c.model)
        if c.weights:
            load_weights(model, weights_file(c.weights), strict=c.strict)
        teacher = load_teacher(c.teacher, b).to(self.dist.device) if c.teacher else None
        self.criterion = DistillationLoss(teacher, c.distill, c.distill_alpha, c.distill_tau, c.label_smoothing)
        self.mix = mixup_cutmix(c.mixup, c.cutmix, b.num_classes)
        return model

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
        """images (B, C, H, W), labels (B,) -> the loss, and the training accuracy (against the mixed label's
        argmax under Mixup/CutMix)."""
        images, labels = batch
        targets = labels
        if self.mix is not None:
            images, targets = self.mix(images, labels)  # targets: (B, K) probabilities
        outputs = model(images)  # logits (B, K), or a DistilledOutput from a distilled DeiT in training
        loss = self.criterion(images, outputs, targets)
        with torch.no_grad():
            logits = mean_logits(outputs)  # as at evaluation
            truth = targets.argmax(-1) if targets.ndim == 2 else targets
            acc = (logits.argmax(-1) == truth).float().mean()
        return {"loss": loss, "acc": acc}

    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """Loss and accuracy over the whole of `data` (validation or test), each process evaluating its shard."""
        num_classes = self.bundle.num_classes
        model = with_test_time_flip(model, bool(self.config.test_time_flip))
        result = evaluate(model, data, device=self.dist.device, bf16=self.loop.bf16,
                          num_classes=num_classes) if len(data) else None
        n = result["num_images"] if result else 0
        loss_sum = result["loss"] * n if result else 0.0
        right = sum(row[i] for i, row in enumerate(result["confusion"])) if result else 0
        loss_sum, right, n = all_reduce_sum([loss_sum, right, n], self.dist)
        return {"loss": loss_sum / max(n, 1), "acc": right / max(n, 1)}

    # -- a finished run: `vitlab eval` and `vitlab predict` ----------------------------------------------------


def mean_logits(outputs: torch.Tensor | DistilledOutput) -> torch.Tensor:
    """A distilled DeiT's two heads averaged (what it predicts with in evaluation); plain logits as they are."""
    return outputs.averaged() if isinstance(outputs, DistilledOutput) else outputs


def load_teacher(path: str, bundle: DatasetBundle) -> nn.Module:
    """The frozen teacher of a distillation run: a run folder (its best weights) or a vitlab .safetensors file.

    It must see the student's inputs as it saw its own: the same image size, channels, normalisation and classes.
    """
    from ...checkpoint import load_model
    from ...engine.run import RunDir
    from .distill import freeze

    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(f"teacher {path} does not exist; give the run folder of a trained teacher "
                                f"(e.g. `vitlab train --model resnet18_28 --out runs/teacher`)")
    teacher = load_model(weights_file(path))
    mine = {"img_size": bundle.img_size, "channels": bundle.channels, "classes": bundle.classes,
            "mean": list(bundle.mean), "std": list(bundle.std)}
    seen = RunDir(folder).read_config()["data"] if folder.is_dir() else _recorded_inputs(teacher, path)
    if seen:
        differs = {key: (seen[key], value) for key, value in mine.items()
                   if key in seen and not _close(seen.get(key), value)}
        if differs:
            detail = "; ".join(f"{key}: teacher {a}, student {b}" for key, (a, b) in differs.items())
            raise ValueError(f"the teacher in {path} was trained on other inputs than this run's ({detail}); "
                             f"train the teacher on the same data and image size")
    classes = getattr(teacher, "num_classes", None)
    if classes != bundle.num_classes:
        raise ValueError(f"the teacher predicts {classes} classes, the data has {bundle.num_classes}")
    return freeze(teacher)


def _recorded_inputs(teacher: nn.Module, path: str) -> dict[str, Any]:
    """What a teacher's weights file records of the inputs it was trained on, in a run's config.json terms: its
    classes (the model's labels) and its preprocessing's image size, channels, mean and std; {} where it records
    neither."""
    from ...interop.preprocessing import preprocessing_for
    from ...models.family import family_config

    seen: dict[str, Any] = {}
    labels = getattr(family_config(teacher), "labels", None)
    if labels:
        seen["classes"] = list(labels)
    rule = preprocessing_for(path)
    if rule is not None:
        seen |= {"channels": rule.channels, "mean": list(rule.mean), "std": list(rule.std)}
        if rule.input_size is not None and rule.input_size[0] == rule.input_size[1]:
            seen["img_size"] = rule.input_size[0]
    return seen


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-6
    return a == b
