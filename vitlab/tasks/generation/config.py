"""The options of VQGAN's two stages: the autoencoder with its discriminator (`--task vqgan`), and the transformer
prior over its codes (`--task prior`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...engine.options import check, option
from ..weights_options import WEIGHTS_BY_NAME, strict_option

PERCEPTUAL_HELP = ("weight of a perceptual (LPIPS) term in the reconstruction loss. Off by default: LPIPS needs "
                   "pretrained VGG weights, which vitlab cannot download; with a weight above 0 the `lpips` package "
                   "must be installed and find its weights on disk")


@dataclass(frozen=True)
class VQGANTaskConfig:
    data: str = option("fashion-mnist", "fashion-mnist, or a folder of images with one sub-folder per class "
                       "(held out: its test/ or val/ folder, else --val-fraction)", group="data")
    data_dir: str | None = option(None, "where Fashion-MNIST's files are (found or downloaded otherwise)",
                                  metavar="DIR", default_text="search, then download", group="data")
    allow_partial_data: bool = option(False, "accept a Fashion-MNIST copy with fewer images than the official "
                                      "60,000/10,000", group="data")
    model: str | None = option(None, "vqgan_small (Fashion-MNIST at 32×32), vqgan_f16_1024 (the paper's)",
                               default_text="vqgan_small; with --weights TAG: the release's", group="model")
    weights: str | None = option(None, "start from these weights: a vqgan run, a vitlab file, a taming checkpoint or "
                                 "a diffusers VQModel folder"
                                 + WEIGHTS_BY_NAME, metavar="PATH", default_text="random", group="model")
    strict: bool = strict_option()
    img_size: int | None = option(None, "image side: Fashion-MNIST is padded, folder images resized to it",
                                  default_text="the model's resolution", group="data")
    val_fraction: float | None = option(None, "share of the training images held out to select the best checkpoint "
                                              "where the data has no val/",
                                        default_text="5,000 of Fashion-MNIST's 60,000; 0.1 of a folder", group="data")
    codebook_weight: float = option(1.0, "weight of the quantiser's loss L_VQ")
    perceptual_weight: float = option(0.0, PERCEPTUAL_HELP)
    disc_start: int = option(2000, "optimizer step at which the discriminator and the GAN term start")
    disc_weight: float = option(0.8, "factor on the adaptive GAN weight λ (taming's default)")
    eval_images: int = option(2000, "validation images scored at each evaluation during training, which selects "
                              "the best checkpoint (0: all; `vitlab eval` scores the whole test set)")
    skip_bad_images: bool = option(False, "a folder: skip unreadable images (counted) instead of stopping",
                                   group="data")

    def __post_init__(self) -> None:
        check(self.codebook_weight >= 0, "codebook_weight", ">= 0", self.codebook_weight)
        check(self.perceptual_weight >= 0, "perceptual_weight", ">= 0 (0: off)", self.perceptual_weight)
        check(self.disc_start >= 0, "disc_start", ">= 0", self.disc_start)
        check(self.disc_weight >= 0, "disc_weight", ">= 0 (0: no GAN term)", self.disc_weight)
        check(self.eval_images >= 0, "eval_images", ">= 0 (0: all)", self.eval_images)
        check(self.val_fraction is None or 0 < self.val_fraction < 1, "val_fraction", "in (0, 1)",
              self.val_fraction)


@dataclass(frozen=True)
class PriorTaskConfig:
    vqgan: str | None = option(None, "the trained VQGAN run whose codes the prior models (its data, frozen)",
                               metavar="RUN", default_text="none: required", group="data")
    model: str = option("gpt_prior_small", "the prior: gpt_prior_small; its codes, grid and classes come from the "
                        "VQGAN run", group="model")
    data_dir: str | None = option(None, "where Fashion-MNIST's files are", metavar="DIR",
                                  default_text="the VQGAN run's", group="data")
    classifier: str | None = option(None, "a classification run on the same data: FID in its feature space and "
                                    "the accuracy of its predictions on class-conditional samples", metavar="RUN",
                                    default_text="none: no FID")
    eval_samples: int = option(1000, "samples drawn at each evaluation (classes in turn) for FID and class_acc")
    temperature: float = option(1.0, "sampling temperature at evaluation (0: the most likely code)")
    top_k: int | None = option(None, "sample among the k most likely codes only", default_text="all")
    top_p: float | None = option(None, "sample among the most likely codes that make up probability p",
                                 default_text="all")

    def __post_init__(self) -> None:
        check(self.eval_samples >= 0, "eval_samples", ">= 0", self.eval_samples)
        check(0 <= self.temperature < math.inf, "temperature", "0 or a finite positive number", self.temperature)
        check(self.top_k is None or self.top_k >= 1, "top_k", ">= 1", self.top_k)
        check(self.top_p is None or 0 < self.top_p <= 1, "top_p", "in (0, 1]", self.top_p)


@dataclass(frozen=True)
class GenerationEvalOptions:
    """`vitlab eval` of a VQGAN or prior run."""

    data_dir: str | None = option(None, "where Fashion-MNIST's files are", metavar="DIR",
                                  default_text="the run's, then the usual places")
    classifier: str | None = option(None, "a prior: the classification run whose features FID uses and whose "
                                    "predictions class_acc counts", metavar="RUN",
                                    default_text="the run's --classifier; none: no FID")
    samples: int | None = option(None, "a prior: samples to draw, classes in turn",
                                 default_text="the run's --eval-samples")
    temperature: float | None = option(None, "a prior: sampling temperature", default_text="the run's")
    top_k: int | None = option(None, "a prior: top-k sampling", default_text="the run's")
    top_p: float | None = option(None, "a prior: top-p sampling", default_text="the run's")


@dataclass(frozen=True)
class VQGANServeOptions:
    """The server takes no options: it answers with the reconstruction and its PSNR."""


@dataclass(frozen=True)
class PriorServeOptions:
    """The server's form fields for a prior (what `vitlab sample` takes)."""

    class_index: int = option(0, "the class to draw (its index)")
    n: int = option(8, "how many samples")
    temperature: float = option(1.0, "softmax temperature, 0 takes the most likely code")
    top_k: int | None = option(None, "sample among the k most likely codes", default_text="all")
    top_p: float | None = option(None, "sample among the most likely codes that make up probability p",
                                 default_text="all")
    seed: int = option(0, "seed of the draws")

    def __post_init__(self) -> None:
        check(1 <= self.n <= 64, "n", "in 1 … 64", self.n)
