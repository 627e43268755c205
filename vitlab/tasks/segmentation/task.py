"""Semantic segmentation with SETR on the loop: any folder of images with class-index masks (the scenes, Pascal
VOC's layout, images/ + masks/), pixel-wise cross-entropy with the auxiliary heads' losses, and mIoU on the val
split by sliding-window inference.

A batch is (images (B, 3, H, W) ImageNet-normalised, masks (B, H, W) int64 with 255 where nothing is scored).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...data.coco import IMAGENET_MEAN, IMAGENET_STD
from ...data.preprocessing import Preprocessing
from ...data.segmentation import (
    IGNORE_INDEX,
    SegmentationDataset,
    count_classes,
    find_segmentation_split,
    has_segmentation_split,
    pad_collate_masks,
    segmentation_transforms,
)
from ...data.split import split_indices
from ...engine.distributed import DistInfo, all_reduce_sum
from ...engine.loaders import EpochDataLoader
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.registry import build_model, get_config
from ..base import Task, register_task, release_overrides, with_absolute_paths
from .config import SegmentationConfig, SegmentationEvalOptions, SegmentationPredictOptions, SegmentationServeOptions
from .metrics import confusion_matrix, scores
from .sliding import sliding_window_logits


def pixel_cross_entropy(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored pixels (0 when a batch has none, instead of NaN)."""
    total = F.cross_entropy(logits, masks, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (masks != IGNORE_INDEX).sum().clamp(min=1)


@register_task
class SegmentationTask(Task):
    name: ClassVar[str] = "segmentation"
    order: ClassVar[int] = 40
    EvalOptions: ClassVar[type] = SegmentationEvalOptions
    PredictOptions: ClassVar[type] = SegmentationPredictOptions
    ServeOptions: ClassVar[type] = SegmentationServeOptions
    page: ClassVar[str] = "mask"
    model_noun: ClassVar[str] = "a segmentation model"
    default_model: ClassVar[str] = "setr_pup_small"
    Config: ClassVar[type] = SegmentationConfig
    best: ClassVar[tuple[str, str]] = ("val_miou", "max")
    int8_guard: ClassVar[dict[str, float]] = {"miou": 0.01}
    sample_name: ClassVar[str] = "images"
    resumable: ClassVar[tuple[str, ...]] = ("data",)
    inference_module: ClassVar[str] = "vitlab.tasks.segmentation.inference"

    def __init__(self, config: SegmentationConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "data", "weights")
        super().__init__(config, loop, dist)

    @classmethod
    def loop_defaults(cls, config: SegmentationConfig) -> dict[str, Any]:
        # the paper's: SGD with momentum 0.9, lr 0.01 (the heads at 10×), no weight decay, poly with power 0.9 down
        # to 1e-4, no warm-up, no clipping
        return {"epochs": 40, "batch_size": 8, "lr": 0.01, "weight_decay": 0.0, "optimizer": "sgd",
                "momentum": 0.9, "schedule": "poly", "poly_power": 0.9, "min_lr_ratio": 0.01,
                "warmup_epochs": 0.0, "clip_grad": 0.0}

    # -- data ----------------------------------------------------------------------------------------------------
    def crop_size(self) -> int:
        return self.config.crop_size or int(get_config(self.config.model, **release_overrides(self.config)).img_size)

    def datasets(self, train_transforms: bool = True
                 ) -> tuple[SegmentationDataset, SegmentationDataset, SegmentationDataset | None]:
        """(train, val, test): the folder's train split, its val split (else a seeded --val-fraction of the training
        pairs) and its test split (None where it has none)."""
        c = self.config
        if not c.data:
            raise OptionError("data", "is needed: give a segmentation folder (`vitlab make-scenes --out DIR` makes "
                              "one from Fashion-MNIST)")
        train_pairs, names = find_segmentation_split(c.data, "train")
        if has_segmentation_split(c.data, "val"):
            val_pairs, _ = find_segmentation_split(c.data, "val")
            self.split = {"val_from": "val"}
        else:
            kept, held = split_indices([0] * len(train_pairs), c.val_fraction, self.loop.seed)
            train_pairs, val_pairs = [train_pairs[i] for i in kept], [train_pairs[i] for i in held]
            self.split = {"val_from": "train", "val_fraction": c.val_fraction, "seed": self.loop.seed}
        test_pairs = find_segmentation_split(c.data, "test")[0] if has_segmentation_split(c.data, "test") else None
        num_classes = c.num_classes or (len(names) if names else count_classes(train_pairs + val_pairs))
        if names and len(names) != num_classes:
            raise OptionError("num_classes", f"is {num_classes}, but {c.data} names {len(names)} classes ({names})")
        self.class_names = names or [f"class_{i}" for i in range(num_classes)]
        norm = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
        crop = self.crop_size()
        skip = {"skip_bad_images": c.skip_bad_images, "skip_bad_annotations": c.skip_bad_annotations}
        train = SegmentationDataset(train_pairs, num_classes, transforms=segmentation_transforms(
            train_transforms, crop, (c.scale_min, c.scale_max), c.hflip, **norm), **skip)
        plain = segmentation_transforms(False, crop, **norm)
        val = SegmentationDataset(val_pairs, num_classes, transforms=plain, **skip)
        test = None if test_pairs is None else SegmentationDataset(test_pairs, num_classes, transforms=plain, **skip)
        self.split.update({"train": len(train), "val": len(val), "test": 0 if test is None else len(test)})
        return train, val, test

    @classmethod
    def check_data(cls, data: str, num_classes: int | None = None, **options: Any) -> list[Any]:
        from ...data.check_splits import check_mask_folder

        return check_mask_folder(data, num_classes)

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        self.train_set, self.val_set, self.test_set = self.datasets()
        loop, dist = self.loop, self.dist
        shard = {"num_replicas": dist.world_size, "rank": dist.rank}
        train = EpochDataLoader(self.train_set, loop.batch_size, shuffle=True,
                                drop_last=len(self.train_set) > loop.batch_size * dist.world_size,
                                num_workers=loop.workers, seed=loop.seed, collate_fn=pad_collate_masks, **shard)

        def held_out(part):
            return EpochDataLoader(part, self.config.eval_batch_size, num_workers=loop.workers, pad=False,
                                   collate_fn=pad_collate_masks, **shard)

        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=held_out(self.val_set),
                        test=None if self.test_set is None else held_out(self.test_set))

    def run_info(self) -> dict[str, Any]:
        return {"data": {"path": self.config.data, "classes": self.class_names, "num_train": len(self.train_set),
                         "num_val": len(self.val_set), "num_test": 0 if self.test_set is None else len(self.test_set),
                         "split": self.split, "crop_size": self.crop_size(), "mean": list(IMAGENET_MEAN),
                         "std": list(IMAGENET_STD),
                         # evaluation reads each image at its own size (sliding windows cover it), normalised
                         "preprocessing": Preprocessing(mean=IMAGENET_MEAN, std=IMAGENET_STD).to_dict()}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if self.class_names != data["classes"] or len(self.train_set) != data["num_train"]:
            raise ValueError(f"the data of this run changed since it started ({data['classes']}, {data['num_train']} "
                             f"training images; now {self.class_names}, {len(self.train_set)}); resume on the same "
                             f"data or start a new run")

    # -- model and loss ------------------------------------------------------------------------------------------
    def build_model(self, num_classes: int | None = None) -> nn.Module:
        c = self.config
        self.model_config()
        classes = num_classes or len(self.class_names)
        names = self.class_names if num_classes is None else None  # a count given alone: no data
        config = get_config(c.model, **release_overrides(self.config)).for_data(classes=classes, labels=names,
                                                                                image_size=self.crop_size())
        model = build_model(config, c.model)
        if c.weights:
            load_start(model, c.weights, strict=c.strict)
        return model

    def lr_scales(self) -> dict[str, float]:
        """The decoder and the auxiliary heads train at head_lr_mult × the lr (the official recipe's 10×)."""
        return {"decode_head.": self.config.head_lr_mult, "auxiliary_head.": self.config.head_lr_mult}

    def loss(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        images, masks = batch
        out = model(images)
        main = pixel_cross_entropy(out.logits, masks)
        losses = {"loss_main": main}
        total = main
        if out.aux_logits and self.config.aux_weight > 0:
            aux = sum(pixel_cross_entropy(logits, masks) for logits in out.aux_logits)
            total = total + self.config.aux_weight * aux
            losses["loss_aux"] = aux
        return {"loss": total, **{k: v.detach() for k, v in losses.items()}}

    def num_samples(self, batch) -> int:
        return len(batch[0])

    # -- evaluation ----------------------------------------------------------------------------------------------
    def window(self) -> tuple[int, int]:
        crop = self.crop_size()
        return crop, self.config.stride or max(1, crop * 2 // 3)

    @torch.no_grad()
    def confusion(self, model: nn.Module, loader, num_classes: int) -> torch.Tensor:
        """The (K, K) confusion matrix of every pixel of the loader's images, summed over processes."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        crop, stride = self.window()
        matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)
        for images, masks in loader:
            logits = sliding_window_logits(model, images.to(device), crop, stride, self.config.eval_batch_size,
                                           self.config.blend)
            matrix += confusion_matrix(logits.argmax(1).cpu(), masks, num_classes)
        model.train(was_training)
        summed = all_reduce_sum([float(v) for v in matrix.flatten().tolist()], self.dist)
        return torch.tensor(summed, dtype=torch.float64).round().long().view(num_classes, num_classes)

    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """mIoU and pixel accuracy over the whole of `data`, validation or test (one confusion matrix, sliding
        windows)."""
        result = scores(self.confusion(model, data, data.dataset.num_classes))
        return {"miou": result["miou"], "pixel_acc": result["pixel_acc"]}


def load_start(model: nn.Module, path: str, strict: bool = True) -> None:
    """Weights to start from: a SETR (a run, or a file in vitlab's names) loads whole; any ViT checkpoint vitlab
    reads starts the encoder (its head and final norm left out, positions resampled to the crop)."""
    from ...checkpoint import set_norm_eps
    from ...engine.run import weights_file
    from ...interop import load_weights
    from ...interop.formats import read_checkpoint

    state, info = read_checkpoint(weights_file(path))
    if any(key.startswith(("decode_head.", "backbone.")) for key in state):
        load_weights(model, state, strict=strict)
        return
    if info.norm_eps is not None:
        set_norm_eps(model.backbone, info.norm_eps)
    load_weights(model.backbone, model.encoder_state(state), strict=strict)
