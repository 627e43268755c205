"""Object detection with a set-prediction detector (DETR, Deformable DETR, or any family that mixes in
`SetPrediction`) on the loop: any COCO-format folder (a user's COCO, an annotation tool's export,
`vitlab make-scenes`), the Hungarian set loss, and COCO's AP on the val split.

A batch is (images (B, 3, H, W) ImageNet-normalised and zero-padded, padding_mask (B, H, W) True at padding,
targets: per image "boxes" (M, 4) XYXY pixels, "labels" (M,), "size" (H_i, W_i), "orig_size", "image_id").
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from torchvision.ops import box_convert

from ...data.coco import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CocoDetection,
    detection_transforms,
    find_split,
    has_split,
    image_preprocessing,
    pad_collate,
)
from ...data.split import split_indices
from ...engine.distributed import DistInfo, all_reduce_sum, gather_objects
from ...engine.loaders import EpochDataLoader
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.backbones import classifier_to_backbone_state
from ...models.denoising import noised_queries
from ...models.detr_postprocess import postprocess
from ...models.family import family_config
from ...models.registry import apply_overrides, build_model, get_config
from ...models.set_prediction import SetPrediction
from ..base import Task, register_task, release_overrides, with_absolute_paths
from .coco_eval import coco_metrics
from .config import DetectionConfig, DetectionEvalOptions, DetectionPredictOptions, DetectionServeOptions


def postprocessed(model: nn.Module, outputs, image_sizes: torch.Tensor, threshold: float = 0.0
                  ) -> list[dict[str, torch.Tensor]]:
    """Detections in pixels by the model family's own rule (its config's `postprocess`: SetPrediction); a stand-in
    module that is no vitlab model is read by the plain rule, a softmax with a "no object" class."""
    config = family_config(model)
    if isinstance(config, SetPrediction):
        return config.postprocess(outputs, image_sizes, threshold)
    return postprocess(outputs, image_sizes, threshold)


def normalized_targets(targets: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
    """Pixel XYXY boxes -> (cx, cy, w, h) divided by each image's own width and height, what DETR predicts."""
    out = []
    for t in targets:
        height, width = t["size"].tolist()
        scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=t["boxes"].device)
        boxes = box_convert(t["boxes"].as_subclass(torch.Tensor).float(), "xyxy", "cxcywh") / scale
        out.append({"labels": t["labels"], "boxes": boxes})
    return out


@register_task
class DetectionTask(Task):
    name: ClassVar[str] = "detection"
    order: ClassVar[int] = 30
    EvalOptions: ClassVar[type] = DetectionEvalOptions
    PredictOptions: ClassVar[type] = DetectionPredictOptions
    ServeOptions: ClassVar[type] = DetectionServeOptions
    page: ClassVar[str] = "boxes"
    model_noun: ClassVar[str] = "a detector"
    default_model: ClassVar[str] = "detr_small"
    Config: ClassVar[type] = DetectionConfig
    best: ClassVar[tuple[str, str]] = ("val_map", "max")
    int8_guard: ClassVar[dict[str, float]] = {"map_50": 0.01}
    # vitlab eval's detections, per split, on the run's data or another (inference.evaluate_run)
    extra_files: ClassVar[tuple[str, ...]] = tuple(f"coco-results-{split}{data}.json" for split in ("test", "val")
                                                   for data in ("", "-other-data"))
    sample_name: ClassVar[str] = "images"
    resumable: ClassVar[tuple[str, ...]] = ("data",)
    inference_module: ClassVar[str] = "vitlab.tasks.detection.inference"

    def __init__(self, config: DetectionConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "data", "weights", "backbone_weights")
        super().__init__(config, loop, dist)

    @classmethod
    def loop_defaults(cls, config: DetectionConfig) -> dict[str, Any]:
        # the paper's optimizer (AdamW 1e-4, weight decay 1e-4, clipping at 0.1); cosine instead of its step decay
        return {"epochs": 50, "batch_size": 8, "lr": 1e-4, "weight_decay": 1e-4, "clip_grad": 0.1,
                "warmup_epochs": 0.0, "schedule": "cosine", "min_lr_ratio": 0.01}

    # -- data ----------------------------------------------------------------------------------------------------
    def datasets(self, train_transforms: bool = True) -> tuple[CocoDetection, CocoDetection, CocoDetection | None]:
        """(train, val, test): the folder's train/, its val/ (else a seeded --val-fraction of the training images)
        and its test/ (None where it has none)."""
        c = self.config
        if not c.data:
            raise OptionError("data", "is needed: give a COCO-format folder (`vitlab make-scenes --out DIR` makes "
                              "one from Fashion-MNIST)")
        norm = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
        skip = {"skip_bad_images": c.skip_bad_images, "skip_bad_annotations": c.skip_bad_annotations}
        plain = detection_transforms(False, c.max_size, **norm)
        train = CocoDetection(*find_split(c.data, "train"), channels=3,
                              transforms=detection_transforms(train_transforms, c.max_size, c.hflip, **norm), **skip)
        if has_split(c.data, "val"):
            val = CocoDetection(*find_split(c.data, "val"), channels=3, transforms=plain, **skip)
            self.split = {"val_from": "val"}
        else:
            kept, held = split_indices([0] * len(train), c.val_fraction, self.loop.seed)
            train, val = train.subset(kept), train.subset(held, transforms=plain)
            self.split = {"val_from": "train", "val_fraction": c.val_fraction, "seed": self.loop.seed}
        test = CocoDetection(*find_split(c.data, "test"), channels=3, transforms=plain, **skip) \
            if has_split(c.data, "test") else None
        for name, part in (("val", val), ("test", test)):
            if part is not None and part.category_names != train.category_names:
                raise ValueError(f"the train and {name} annotations of {c.data} name different categories "
                                 f"({train.category_names} vs {part.category_names}); they must share one list")
        self.split.update({"train": len(train), "val": len(val), "test": 0 if test is None else len(test)})
        return train, val, test

    @classmethod
    def check_data(cls, data: str, **options: Any) -> list[Any]:
        from ...data.check_splits import check_coco_folder

        return check_coco_folder(data)

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        self.train_set, self.val_set, self.test_set = self.datasets()
        loop, dist = self.loop, self.dist
        shard = {"num_replicas": dist.world_size, "rank": dist.rank}
        train = EpochDataLoader(self.train_set, loop.batch_size, shuffle=True,
                                drop_last=len(self.train_set) > loop.batch_size * dist.world_size,
                                num_workers=loop.workers, seed=loop.seed, collate_fn=pad_collate, **shard)

        def held_out(part):
            return EpochDataLoader(part, self.config.eval_batch_size, num_workers=loop.workers, pad=False,
                                   collate_fn=pad_collate, **shard)

        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=held_out(self.val_set),
                        test=None if self.test_set is None else held_out(self.test_set))

    def run_info(self) -> dict[str, Any]:
        train = self.train_set
        return {"data": {"path": self.config.data, "classes": train.category_names,
                         "category_ids": train.label_to_category, "num_train": len(train),
                         "num_val": len(self.val_set), "num_test": 0 if self.test_set is None else len(self.test_set),
                         "split": self.split, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                         "preprocessing": image_preprocessing(self.config.max_size, IMAGENET_MEAN,
                                                              IMAGENET_STD).to_dict()}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if self.train_set.category_names != data["classes"] or len(self.train_set) != data["num_train"]:
            raise ValueError(f"the data of this run changed since it started ({data['classes']}, {data['num_train']} "
                             f"training images; now {self.train_set.category_names}, {len(self.train_set)}); resume "
                             f"on the same data or start a new run")

    # -- model and loss ------------------------------------------------------------------------------------------
    def build_model(self, num_classes: int | None = None) -> nn.Module:
        c = self.config
        self.model_config()
        overrides = {key: getattr(c, key) for key in ("num_queries", "dropout") if getattr(c, key) is not None}
        if c.dn_groups:
            overrides["denoising"] = True  # the denoising queries' embeddings
        classes = num_classes or self.train_set.num_classes
        names = self.train_set.category_names if num_classes is None else None  # a count given alone: no data
        config = get_config(c.model, **release_overrides(self.config)).for_data(classes=classes, labels=names)
        model = build_model(apply_overrides(config, aux_loss=c.aux_loss, **overrides), c.model)
        if c.weights or c.backbone_weights:
            from ...checkpoint import read_state_dict
            from ...engine.run import weights_file
            from ...interop import load_weights

            if c.weights:
                load_weights(model, weights_file(c.weights), strict=c.strict)
            else:
                classifier = read_state_dict(weights_file(c.backbone_weights))[0]
                load_weights(model.backbone, classifier_to_backbone_state(classifier, model.backbone))
        # the family's matcher and set loss (softmax and no-object, or sigmoid focal), the task's weights
        self.criterion = model.config.build_criterion(c.cost_class, c.cost_bbox, c.cost_giou, c.eos_coef,
                                                      c.class_weight, c.bbox_weight, c.giou_weight,
                                                      mean_over_processes=self.mean_over_processes)
        return model

    def mean_over_processes(self, value: float) -> float:
        total, = all_reduce_sum([value], self.dist)
        return total / self.dist.world_size

    def lr_scales(self) -> dict[str, float]:
        """The backbone trains at backbone_lr: its parameters' share of the loop's lr. Deformable DETR's sampling
        offsets and reference points train at lr_linear_proj_mult of it, as in the official recipe (their outputs
        are positions, a slower start keeps the sampled points near their initial rings)."""
        mult = self.config.lr_linear_proj_mult
        return {"backbone.": self.config.backbone_lr / self.loop.lr, "*.sampling_offsets.*": mult,
                "*reference_points.*": mult}

    def loss(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        images, padding_mask, targets = batch
        targets = normalized_targets(targets)
        c, denoising = self.config, None
        if c.dn_groups:  # noised from the loop's generator, so a resumed run draws what it would have
            denoising = noised_queries(targets, c.dn_groups, c.dn_box_noise, c.dn_label_noise,
                                       self.criterion.num_classes)
        outputs = model(images, padding_mask) if denoising is None else model(images, padding_mask, denoising=denoising)
        losses = self.criterion(outputs, targets, denoising)
        # the total, the final layer's terms and the logged errors; the auxiliary and proposal terms are in the
        # total only
        return {key: value for key, value in losses.items() if not key[-1].isdigit() and not key.endswith("_enc")}

    def num_samples(self, batch) -> int:
        return len(batch[0])

    # -- evaluation ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def detect(self, model: nn.Module, loader, label_to_category: list[int | None] | None = None
               ) -> list[dict[str, Any]]:
        """COCO-format detections of every image this process evaluates, boxes in original-image pixels; each of
        the model's classes is the category `label_to_category` says (default: the data's own; None: not reported)."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        label_to_category = label_to_category or loader.dataset.label_to_category
        detections: list[dict[str, Any]] = []
        for images, padding_mask, targets in loader:
            outputs = model(images.to(device), padding_mask.to(device))
            sizes = torch.stack([t["orig_size"] for t in targets])
            for target, found in zip(targets, postprocessed(model, outputs, sizes)):
                xywh = box_convert(found["boxes"], "xyxy", "xywh").cpu().tolist()
                for box, score, label in zip(xywh, found["scores"].tolist(), found["labels"].tolist()):
                    if label_to_category[label] is not None:
                        detections.append({"image_id": target["image_id"], "category_id": label_to_category[label],
                                           "bbox": [round(v, 2) for v in box], "score": round(score, 5)})
        model.train(was_training)
        return detections

    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """COCO box AP over the whole of `data` (validation or test): each process detects on its shard, every
        process scores all."""
        detections = [d for part in gather_objects(self.detect(model, data), self.dist) for d in part]
        ground_truth = data.dataset.coco  # as checked: the entries skipped in training are not scored either
        metrics = coco_metrics(ground_truth, detections, image_ids=[image["id"] for image in data.dataset.images])
        return {**metrics, "num_detections": len(detections)}
