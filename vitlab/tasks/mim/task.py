"""Masked image modelling on the loop: a masked autoencoder (models/mae.py) pretrains a ViT encoder on images
without labels, to start a SETR (or a ViT) with `--weights RUN` afterwards. SETR's paper starts from an encoder
pretrained on ImageNet; this pretrains one on the very images the segmentation will train on.

A batch is images (B, C, H, W), ImageNet-normalised as segmentation's are (the encoder sees later what it saw
here). The loss is MAE's reconstruction loss on the hidden patches, masks drawn from the loop's generator (so a
resumed run draws what it would have). Validation measures the same loss with masks fixed by --eval-seed, the same
at every evaluation; the lowest selects best.safetensors.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from ...data.coco import IMAGENET_MEAN, IMAGENET_STD
from ...data.split import split_indices
from ...data.unlabelled import UnlabelledImages, pretraining_transforms, unlabelled_split
from ...engine.distributed import DistInfo, all_reduce_sum
from ...engine.loaders import EpochDataLoader
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.registry import apply_overrides, build_model, get_config
from ..base import Task, register_task, release_overrides, with_absolute_paths
from .config import MIMConfig, MIMEvalOptions, MIMPredictOptions


@register_task
class MIMTask(Task):
    name: ClassVar[str] = "mim"
    order: ClassVar[int] = 80
    Config: ClassVar[type] = MIMConfig
    EvalOptions: ClassVar[type] = MIMEvalOptions
    PredictOptions: ClassVar[type] = MIMPredictOptions
    inference_module: ClassVar[str] = "vitlab.tasks.mim.inference"
    best: ClassVar[tuple[str, str]] = ("val_loss", "min")
    sample_name: ClassVar[str] = "images"
    resumable: ClassVar[tuple[str, ...]] = ("data",)
    model_noun: ClassVar[str] = "a masked autoencoder"
    default_model: ClassVar[str] = "mae_small"

    def __init__(self, config: MIMConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "data", "weights")
        super().__init__(config, loop, dist)

    @classmethod
    def loop_defaults(cls, config: MIMConfig) -> dict[str, Any]:
        # MAE's optimizer (AdamW, β2 0.95, weight decay 0.05, warm-up then cosine, no clipping); its lr, 1.5e-4 per
        # 256 images for 800 epochs on ImageNet, is raised for runs of minutes on a few thousand images
        return {"epochs": 20, "batch_size": 64, "lr": 1e-3, "weight_decay": 0.05, "betas": (0.9, 0.95),
                "warmup_epochs": 1.0, "clip_grad": 0.0}

    # -- data ----------------------------------------------------------------------------------------------------
    def img_size(self) -> int:
        size = self.config.img_size or get_config(self.config.model).img_size
        return size if isinstance(size, int) else size[0]

    def datasets(self) -> tuple[UnlabelledImages, UnlabelledImages, UnlabelledImages | None]:
        c = self.config
        if not c.data:
            raise OptionError("data", "is needed: give a folder of images (a segmentation folder such as `vitlab "
                              "make-scenes --out DIR` makes, or any folder of images)")
        train_files = unlabelled_split(c.data, "train")
        val_files = unlabelled_split(c.data, "val")
        if val_files:
            self.split = {"val_from": "val"}
        else:
            kept, held = split_indices([0] * len(train_files), c.val_fraction, self.loop.seed)
            train_files, val_files = [train_files[i] for i in kept], [train_files[i] for i in held]
            self.split = {"val_from": "train", "val_fraction": c.val_fraction, "seed": self.loop.seed}
        test_files = unlabelled_split(c.data, "test") or None
        norm = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
        size = self.img_size()
        channels = get_config(c.model).in_chans
        train = UnlabelledImages(train_files, channels, pretraining_transforms(True, size, (c.scale_min, 1.0), c.hflip,
                                                                               **norm))
        plain = pretraining_transforms(False, size, **norm)
        val = UnlabelledImages(val_files, channels, plain)
        test = None if test_files is None else UnlabelledImages(test_files, channels, plain)
        self.split.update({"train": len(train), "val": len(val), "test": 0 if test is None else len(test)})
        return train, val, test

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        self.train_set, self.val_set, self.test_set = self.datasets()
        loop, dist = self.loop, self.dist
        shard = {"num_replicas": dist.world_size, "rank": dist.rank}
        train = EpochDataLoader(self.train_set, loop.batch_size, shuffle=True,
                                drop_last=len(self.train_set) > loop.batch_size * dist.world_size,
                                num_workers=loop.workers, seed=loop.seed, **shard)

        def held_out(part):
            return EpochDataLoader(part, self.config.eval_batch_size, num_workers=loop.workers, pad=False, **shard)

        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=held_out(self.val_set),
                        test=None if self.test_set is None else held_out(self.test_set))

    def run_info(self) -> dict[str, Any]:
        return {"data": {"path": self.config.data, "num_train": len(self.train_set), "num_val": len(self.val_set),
                         "num_test": 0 if self.test_set is None else len(self.test_set), "split": self.split,
                         "img_size": self.img_size(), "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if len(self.train_set) != data["num_train"]:
            raise ValueError(f"the data of this run changed since it started ({data['num_train']} training "
                             f"images, now {len(self.train_set)}); resume on the same data or start a new run")

    # -- model and loss ------------------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        from ...interop import load_weights

        c = self.config
        self.model_config()
        config = get_config(c.model, **release_overrides(self.config)).for_data(image_size=self.img_size())
        model = build_model(config if c.mask_ratio is None else apply_overrides(config, mask_ratio=c.mask_ratio),
                            c.model)
        if c.weights:
            from ...engine.run import weights_file

            load_weights(model, weights_file(c.weights), strict=c.strict)
        return model

    def loss(self, model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": model(batch).loss}

    def num_samples(self, batch: torch.Tensor) -> int:
        return len(batch)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """The reconstruction loss over the hidden patches of every image, each batch's masks drawn from
        --eval-seed and the batch's index (the same at every evaluation)."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        total, hidden = 0.0, 0.0
        for index, images in enumerate(data):
            generator = torch.Generator(device).manual_seed(self.config.eval_seed * 1_000_003 + index)
            out = model(images.to(device), generator=generator)
            count = float(out.mask.sum())
            total += float(out.loss) * count
            hidden += count
        model.train(was_training)
        total, hidden = all_reduce_sum([total, hidden], self.dist)
        return {"loss": total / max(hidden, 1.0)}
