"""The options of masked-image-modelling pretraining (MAE): the images, the model, the masking and MAE's crops."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.options import check, option
from ..weights_options import WEIGHTS_BY_NAME, strict_option


@dataclass(frozen=True)
class MIMConfig:
    data: str | None = option(None, "a folder of images: a segmentation folder (its images, masks ignored, its "
                              "splits kept), train/ [val/] [test/] folders, or images anywhere under it",
                              metavar="DIR", default_text="none: required", group="data")
    model: str | None = option(None, "a masked autoencoder (vitlab models 'mae*')", default_text="mae_small",
                               group="model")
    weights: str | None = option(None, "start from these weights: an MAE run or file" + WEIGHTS_BY_NAME,
                                 metavar="PATH", default_text="random", group="model")
    strict: bool = strict_option()
    mask_ratio: float | None = option(None, "the share of each image's patches hidden from the encoder",
                                      default_text="the model's (0.75, the paper's)")
    img_size: int | None = option(None, "training crops of this many pixels square", default_text="the model's",
                                  group="data")
    scale_min: float = option(0.2, "random crops of [min, 1] of the image's area (MAE's 0.2)", group="data")
    hflip: bool = option(True, "random horizontal flips in training", flag="--no-hflip", group="data")
    eval_batch_size: int = option(64, "images per batch in evaluation")
    eval_seed: int = option(0, "seed of the masks the validation and test losses are measured with (the same "
                            "masks at every evaluation)")
    val_fraction: float = option(0.1, "share of the training images held out to select the best checkpoint where "
                                      "the folder has no val split", group="data")

    def __post_init__(self) -> None:
        check(self.mask_ratio is None or 0 < self.mask_ratio < 1, "mask_ratio", "in (0, 1)", self.mask_ratio)
        check(self.img_size is None or self.img_size >= 16, "img_size", ">= 16 pixels", self.img_size)
        check(0 < self.scale_min <= 1, "scale_min", "in (0, 1]", self.scale_min)
        check(self.eval_batch_size > 0, "eval_batch_size", "positive", self.eval_batch_size)
        check(0 < self.val_fraction < 1, "val_fraction", "in (0, 1)", self.val_fraction)


@dataclass(frozen=True)
class MIMEvalOptions:
    """`vitlab eval` of a pretraining run."""

    data: str | None = option(None, "a folder of images to measure the reconstruction loss on", metavar="DATA",
                              default_text="the run's own test split (val where it has none)")
    batch_size: int | None = option(None, "evaluation batch size", default_text="the run's")


@dataclass(frozen=True)
class MIMPredictOptions:
    """`vitlab predict` of a pretraining run."""

    out: str | None = option(None, "write NAME_mim.png here for each image: the image, what the encoder saw (hidden "
                             "patches grey) and the reconstruction", metavar="DIR", default_text="write nothing")
