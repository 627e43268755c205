"""The options of image classification (ViT, DeiT, the ResNet teacher): data, model and DeiT's recipe."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...engine.options import OptionError, check, check_choices, option
from ..weights_options import WEIGHTS_BY_NAME, strict_option
from .recipes import recipe_for

RECIPE = "the data's recipe"


@dataclass(frozen=True)
class ClassificationConfig:
    data: str = option("fashion-mnist", "'fashion-mnist' or a folder of class sub-folders", group="data")
    data_dir: str | None = option(None, "where Fashion-MNIST's files are", metavar="DIR",
                                  default_text="$VITLAB_DATA, /usr/share/datasets, then download", group="data")
    model: str | None = option(None, "registered model name (`vitlab models` lists them)", default_text=RECIPE,
                               group="model")
    model_overrides: dict[str, Any] = option(help="model config fields to change", cli=False, default_factory=dict)
    weights: str | None = option(None, "start from these weights (a run folder or a checkpoint file of any "
                                 "supported format; a head of another class count is replaced)"
                                 + WEIGHTS_BY_NAME, metavar="PATH",
                                 default_text="random", group="model")
    strict: bool = strict_option()
    img_size: int | None = option(None, "image side the model sees", default_text=RECIPE, group="data")
    crop_padding: int | None = option(None, "random shift of up to this many pixels; folders without it use "
                                      "random-resized crops", default_text=RECIPE, group="data")
    hflip: bool = option(True, "random horizontal flips", flag="--no-hflip", group="data")
    test_time_flip: bool | None = option(None, "score each image by the mean of its own and its mirror image's "
                                         "logits (validation, test, and the run's eval, predict and serve); "
                                         "pays where training flipped the images", valued=True,
                                         default_text=RECIPE)
    val_fraction: float | None = option(None, "share of the training images held out to select the best checkpoint "
                                              "where the data has no val/",
                                        default_text="5,000 of Fashion-MNIST's 60,000; 0.1 of a folder", group="data")
    skip_bad_images: bool = option(False, "skip unreadable images (counted) instead of stopping", group="data")
    allow_partial_data: bool = option(False, "accept a Fashion-MNIST copy with fewer images than the official "
                                      "60,000/10,000", group="data")
    label_smoothing: float = option(0.1, "label smoothing ε of the cross-entropy")
    drop_path: float | None = option(None, "stochastic depth rate", default_text=RECIPE, group="model")
    # DeiT's recipe (Touvron et al. 2021); each piece is off unless given
    randaugment: int = option(0, "RandAugment of magnitude M (0..30; DeiT: 9); 0 = off", metavar="M", group="data")
    randaugment_ops: int = option(2, "RandAugment operations per image", metavar="N", group="data")
    random_erasing: float = option(0.0, "erase a random box of each image with probability P (DeiT: 0.25)",
                                   metavar="P", group="data")
    mixup: float = option(0.0, "Mixup with Beta(α, α) (DeiT: 0.8); with cutmix too, each batch uses one of the "
                          "two; 0 = off", metavar="ALPHA", group="data")
    cutmix: float = option(0.0, "CutMix with Beta(α, α) (DeiT: 1.0); 0 = off", metavar="ALPHA", group="data")
    repeated_aug: int = option(1, "show each image N times per epoch, differently augmented, in the same batch "
                               "(DeiT: 3); 1 = off", metavar="N", group="data")
    distill: str = option("none", "learn from the teacher too: soft (KL at temperature τ) or hard (the teacher's "
                          "argmax as a label)", choices=("none", "soft", "hard"))
    teacher: str | None = option(None, "run folder (or vitlab .safetensors) of the frozen teacher for distill",
                                 metavar="RUN_DIR")
    distill_alpha: float = option(0.5, "weight of the distillation term (the paper's soft setting: 0.1)",
                                  metavar="A")
    distill_tau: float = option(1.0, "temperature of soft distillation (the paper's soft setting: 3.0)",
                                metavar="T")

    def __post_init__(self) -> None:
        check_choices(self)
        check(self.img_size is None or self.img_size >= 1, "img_size", "at least 1", self.img_size)
        check(self.crop_padding is None or self.crop_padding >= 0, "crop_padding", "0 or more", self.crop_padding)
        check(self.val_fraction is None or 0 < self.val_fraction < 1, "val_fraction", "in (0, 1)",
              self.val_fraction)
        check(0 <= self.label_smoothing < 1, "label_smoothing", "in [0, 1)", self.label_smoothing)
        check(self.drop_path is None or 0 <= self.drop_path < 1, "drop_path", "in [0, 1)", self.drop_path)
        check(0 <= self.randaugment <= 30, "randaugment", "a magnitude in 0 (off)..30", self.randaugment)
        check(self.randaugment_ops >= 1, "randaugment_ops", "at least 1", self.randaugment_ops)
        check(0 <= self.random_erasing <= 1, "random_erasing", "a probability in [0, 1]", self.random_erasing)
        check(self.mixup >= 0, "mixup", "0 (off) or more", self.mixup)
        check(self.cutmix >= 0, "cutmix", "0 (off) or more", self.cutmix)
        check(self.repeated_aug >= 1, "repeated_aug", "1 (off) or more", self.repeated_aug)
        check(0 <= self.distill_alpha <= 1, "distill_alpha", "in [0, 1]", self.distill_alpha)
        check(self.distill_tau > 0, "distill_tau", "positive", self.distill_tau)
        if (self.distill != "none") != bool(self.teacher):
            raise OptionError("teacher", f"and distill go together: give distill soft|hard with a teacher run folder, "
                              f"or neither (got distill={self.distill!r}, teacher={self.teacher!r})")

    def resolved(self) -> ClassificationConfig:
        """The config with the data's recipe filled in where an option was left unset."""
        recipe = recipe_for(self.data)["task"]
        unset = {key: value for key, value in recipe.items() if getattr(self, key) is None}
        return dataclasses.replace(self, **unset)


@dataclass(frozen=True)
class ClassificationEvalOptions:
    """`vitlab eval` of a classification run."""

    data: str | None = option(None, "'fashion-mnist' or an image folder", metavar="DATA",
                              default_text="the run's own test data")
    data_dir: str | None = option(None, "where Fashion-MNIST's files are", metavar="DIR",
                                  default_text="the run's, then the usual places")
    batch_size: int = option(256, "evaluation batch size")
    test_time_flip: bool | None = option(None, "average each image's logits with its mirror image's",
                                         valued=True, default_text="as the run was trained")
    bf16: bool = option(False, "bf16 autocast; refused where the device has no native bf16 (there it is many times "
                        "slower)", default_text="off, fp32")
    compile: bool = option(False, "torch.compile the model first (pays on large test sets)")
    plot: bool = option(True, "write confusion.png", flag="--no-plot")


@dataclass(frozen=True)
class ClassificationPredictOptions:
    """`vitlab predict` of a classification run, and the server's form fields."""

    top_k: int = option(3, "how many classes to return per image")

    def __post_init__(self) -> None:
        check(self.top_k >= 1, "top_k", "at least 1", self.top_k)


@dataclass(frozen=True)
class ClassificationServeOptions(ClassificationPredictOptions):
    attention: bool = option(True, "also return the attention rollout and each head's map of the last layer, as PNG",
                             cli=False)
