"""The options of image restoration (IPT, and the EDSR baseline): the photographs, the degradations (one head and
tail each), the patches, the optional contrastive term and the evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from ...data.degradations import DEGRADATIONS, check_degradation
from ...engine.options import check, check_choices, option
from ...layers.tiling import BLEND, BLENDS
from ...models.ipt import PAPER_DEGRADATIONS
from ..weights_options import WEIGHTS_BY_NAME, strict_option

# the paper's six tasks, in the order of its released checkpoints' heads and tails
PAPER_TASKS = ",".join(PAPER_DEGRADATIONS)


def parse_degradations(text: str) -> tuple[str, ...]:
    """'sr2,denoise30' -> ('sr2', 'denoise30'), each checked, no repeats."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError(f"--degradations needs at least one of {', '.join(DEGRADATIONS)}, comma-separated")
    for name in names:
        check_degradation(name)
    if len(set(names)) != len(names):
        raise ValueError(f"--degradations names a task twice: {text!r}")
    return names


@dataclass(frozen=True)
class RestorationConfig:
    data: str | None = option(None, "photographs to train on: `vitlab fetch-photos`' folder (its train photographs), "
                              "a folder with train/ and test/ (or val/) image folders, or one folder of HR images "
                              "(DIV2K, ...)", metavar="DIR", default_text="none: required", group="data")
    model: str | None = option(None, "ipt_small, ipt_base, or the CNN baseline edsr_baseline",
                               default_text="ipt_small; with --weights TAG: the release's", group="model")
    degradations: str = option(PAPER_TASKS, "the tasks, comma-separated, one head and tail each: sr2 sr3 sr4 "
                               "(bicubic ×2/×3/×4), denoise30 denoise50 (Gaussian σ on 0–255), derain (synthetic "
                               "streaks)", metavar="LIST", group="data")
    weights: str | None = option(None, "start from these weights: a restoration run, a file in vitlab's names, or an "
                                 "official IPT checkpoint (IPT_pretrain.pt, IPT_sr2.pt, ...); heads, tails and task "
                                 "embeddings are matched by task name"
                                 + WEIGHTS_BY_NAME, metavar="PATH", default_text="random", group="model")
    strict: bool = strict_option()
    global_residual: bool | None = option(None, "the network predicts the difference from the bicubic upsampling "
                                          "(super-resolution) or from the input (denoising, deraining), its tails "
                                          "starting at zero, so that an untrained model already gives the baseline",
                                          valued=True, default_text="the model's: true for ipt_small and "
                                          "edsr_baseline, false for ipt_base and its releases", group="model")
    patches_per_task: int = option(1600, "training patches of each task per epoch (random crops, drawn afresh)",
                                   group="data")
    halve: bool = option(True, "halve the photographs first (PIL bicubic): the wallpapers' JPEG and demosaicing "
                         "artefacts wash out", flag="--no-halve")
    contrastive_weight: float = option(0.0, "weight of IPT's contrastive term on the decoder's features (patches "
                                       "of one photograph are positives; the paper's 0.1); 0: L1 only")
    temperature: float = option(0.07, "the contrastive term's temperature")
    eval_data: str | None = option(None, "HR images to evaluate on", metavar="DIR", default_text="the data's test "
                                   "photographs (test/ or val/)", group="data")
    val_fraction: float = option(0.1, "share of the training photographs held out (whole) to select the best "
                                      "checkpoint where the data has no val/", group="data")
    eval_crop: int = option(256, "evaluate on each test image's centre, this many pixels square (0: whole images)",
                            group="data")
    eval_seed: int = option(0, "seed of the test degradations (the same seed gives the same noisy and rainy inputs)",
                            group="data")
    overlap: int = option(12, "tiled inference: pixels that neighbouring tiles share")
    blend: str = option(BLEND, "tiled inference: how overlapping tiles combine: window (a linear ramp across the "
                        "shared band), centre (each pixel from the tile it lies deepest in, the official rule) or "
                        "mean", choices=BLENDS)
    eval_batch_size: int = option(64, "tiled inference: tiles per forward pass")
    skip_bad_images: bool = option(False, "skip unreadable images (counted) instead of stopping", group="data")

    def __post_init__(self) -> None:
        check_choices(self)
        parse_degradations(self.degradations)
        check(self.patches_per_task > 0, "patches_per_task", "positive", self.patches_per_task)
        check(self.contrastive_weight >= 0, "contrastive_weight", ">= 0", self.contrastive_weight)
        check(self.temperature > 0, "temperature", "positive", self.temperature)
        check(self.eval_crop >= 0, "eval_crop", ">= 0 (0: whole images)", self.eval_crop)
        check(0 < self.val_fraction < 1, "val_fraction", "in (0, 1)", self.val_fraction)
        check(self.overlap >= 0, "overlap", ">= 0", self.overlap)
        check(self.eval_batch_size > 0, "eval_batch_size", "positive", self.eval_batch_size)

    @property
    def tasks(self) -> tuple[str, ...]:
        return parse_degradations(self.degradations)


@dataclass(frozen=True)
class RestorationEvalOptions:
    """`vitlab eval` of a restoration run."""

    data: str | None = option(None, "an HR folder (DIV2K, Set5, Set14, BSD68, Urban100), a photograph folder with "
                              "test/ or val/, or 'skimage'", metavar="DATA", default_text="the run's own data")
    batch_size: int | None = option(None, "evaluation batch size", default_text="the run's")
    lr: str | None = option(None, "LR images for --data's HR images, paired by name (0001x2.png or 0001.png), "
                            "instead of downscaling here; needs one SR --degradation", metavar="DIR",
                            default_text="downscale here")
    degradations: list[str] | None = option(None, "evaluate this task only (repeatable)", flag="--degradation",
                                             metavar="NAME", repeat=True, default_text="all the run's tasks")
    crop: int | None = option(None, "score each image's centre, this many pixels square; 0: whole images",
                              default_text="the run's --eval-crop")


@dataclass(frozen=True)
class RestorationPredictOptions:
    """`vitlab predict` of a restoration run (`vitlab restore` has more)."""

    degradation: str | None = option(None, "what to undo: one of the run's degradations", metavar="NAME",
                                     default_text="its first")
    out: str | None = option(None, "write each restored image here, as NAME_DEGRADATION.png", metavar="DIR",
                             default_text="write nothing")
    reference: str | None = option(None, "a folder of clean images by the same stems, to score PSNR and SSIM "
                                   "against", metavar="DIR", default_text="no scores")


@dataclass(frozen=True)
class RestorationServeOptions:
    """The server's form fields of a restoration run; `reference` is an uploaded image."""

    degradation: str | None = option(None, "what to undo: one of the run's degradations", metavar="NAME",
                                     default_text="its first")
    reference: object = option(None, "the clean image, to score PSNR and SSIM against", upload=True)
