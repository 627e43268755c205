"""The options of semantic segmentation with SETR: the data, the model, the crops, the auxiliary losses and the
heads' learning rate. The defaults are the paper's (mmseg's recipe it trains with): random resizing by 0.5–2×,
crops of the model's size, flips, auxiliary weight 0.4, the heads at 10× the lr, sliding-window evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.options import check, check_choices, option
from ...layers.tiling import BLENDS
from ..weights_options import WEIGHTS_BY_NAME, strict_option


@dataclass(frozen=True)
class SegmentationConfig:
    data: str | None = option(None, "a segmentation folder: images/{train,val}/ + masks/{train,val}/ (vitlab "
                              "make-scenes), Pascal VOC's layout, or images/ + masks/", metavar="DIR",
                              default_text="none: required", group="data")
    model: str | None = option(None, "a SETR model (vitlab models 'setr*')",
                               default_text="setr_pup_small; with --weights TAG: the release's", group="model")
    weights: str | None = option(None, "start from these weights: a SETR run or file, or any ViT checkpoint vitlab "
                                 "reads (timm, Hugging Face, .npz, a vitlab run) for the encoder"
                                 + WEIGHTS_BY_NAME, metavar="PATH",
                                 default_text="random", group="model")
    strict: bool = strict_option()
    num_classes: int | None = option(None, "classes, background included", default_text="the data's (its class "
                                     "names, or the largest mask value + 1)", group="data")
    crop_size: int | None = option(None, "training crops of this many pixels square", default_text="the model's "
                                   "img_size", group="data")
    scale_min: float = option(0.5, "random resizing of the shorter side to crop × [min, max]", group="data")
    scale_max: float = option(2.0, "random resizing of the shorter side to crop × [min, max]", group="data")
    hflip: bool = option(True, "random horizontal flips in training", flag="--no-hflip", group="data")
    aux_weight: float = option(0.4, "weight of each auxiliary head's loss (0: train without them)")
    head_lr_mult: float = option(10.0, "the decoder's and auxiliary heads' share of --lr (the paper's 10×)")
    stride: int | None = option(None, "sliding-window evaluation: window step in pixels", default_text="2/3 of the "
                                "crop (the paper's 512 for 768)")
    blend: str = option("mean", "sliding-window evaluation: how overlapping windows' logits combine: mean (SETR's "
                        "rule), window (a linear ramp across the shared band) or centre (each pixel from the window "
                        "it lies deepest in)", choices=BLENDS)
    eval_batch_size: int = option(8, "windows per batch in evaluation")
    val_fraction: float = option(0.1, "share of the training images held out to select the best checkpoint where "
                                      "the folder has no val split", group="data")
    skip_bad_images: bool = option(False, "skip unreadable images and their masks (counted) instead of stopping",
                                   group="data")
    skip_bad_annotations: bool = option(False, "skip bad masks (missing, of another size, values beyond the "
                                        "classes) and their images (counted) instead of stopping", group="data")

    def __post_init__(self) -> None:
        check(self.num_classes is None or self.num_classes >= 2, "num_classes", "at least 2", self.num_classes)
        check(self.crop_size is None or self.crop_size >= 16, "crop_size", ">= 16 pixels", self.crop_size)
        check(0 < self.scale_min <= self.scale_max, "scale_min", f"positive and at most scale_max ({self.scale_max})",
              self.scale_min)
        check(self.aux_weight >= 0, "aux_weight", ">= 0", self.aux_weight)
        check(self.head_lr_mult > 0, "head_lr_mult", "positive", self.head_lr_mult)
        check(self.stride is None or self.stride > 0, "stride", "positive", self.stride)
        check(self.eval_batch_size > 0, "eval_batch_size", "positive", self.eval_batch_size)
        check(0 < self.val_fraction < 1, "val_fraction", "in (0, 1)", self.val_fraction)
        check_choices(self)


@dataclass(frozen=True)
class SegmentationEvalOptions:
    """`vitlab eval` of a segmentation run."""

    data: str | None = option(None, "a folder of images and masks with the run's classes", metavar="DATA",
                              default_text="the run's own val split")
    batch_size: int | None = option(None, "evaluation batch size", default_text="the run's")


@dataclass(frozen=True)
class SegmentationPredictOptions:
    """`vitlab predict` of a segmentation run."""

    out: str | None = option(None, "write each image's class mask (NAME_mask.png, a palette PNG of class indices) "
                             "and an overlay (NAME_overlay.png) here", metavar="DIR", default_text="write nothing")


@dataclass(frozen=True)
class SegmentationServeOptions:
    """The server takes no options: it answers with the mask and the overlay."""
