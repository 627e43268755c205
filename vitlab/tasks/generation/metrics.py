"""How well a VQGAN reconstructs and how well a prior generates, with torchmetrics:

- reconstruction PSNR (the mean of per-image PSNRs, on [0, 1]) and SSIM on test images, on the data set's own
  pixels (the padding cropped off);
- codebook usage (the share of codes some test image uses) and perplexity (exp of the entropy of the codes'
  frequencies over the test set);
- FID (Heusel et al. 2017) with `FrechetInceptionDistance(feature=...)` in the feature space of a classifier
  trained with vitlab on the same data (its pooled features before the head), so that no Inception weights are
  needed. The same FID between training and test images is the floor a perfect generator would reach with that
  many samples;
- class accuracy of samples: how often that classifier recognises a sample of class c as c.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ...data.generation import GenerationImages
from ...layers.quantize import code_statistics, usage_of_counts


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """A model's [-1, 1] -> [0, 1], clamped."""
    return ((x + 1) / 2).clamp(0, 1)


def from_uint8(images: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) uint8 -> the model's [-1, 1] float."""
    return images.float() / 127.5 - 1


def batches(n: int, batch_size: int) -> Iterator[slice]:
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.no_grad()
def reconstruction_scores(model: nn.Module, data: GenerationImages, count: int = 0, batch_size: int = 250,
                          progress: bool = False, part: str = "test") -> dict[str, float]:
    """psnr, ssim, usage, perplexity of the VQGAN on the first `count` images (0: all) of `part` ("val" or
    "test")."""
    from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    images = data.held_out(part)[0]
    images = images[:count] if count else images
    psnr = PeakSignalNoiseRatio(data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3)).to(device)
    ssim = StructuralSimilarityIndexMeasure(data_range=1.0).to(device)
    counts = torch.zeros(model.config.num_codes, device=device)
    for part in tqdm(list(batches(len(images), batch_size)), desc="reconstructing", leave=False, disable=not progress):
        x = from_uint8(images[part].to(device))
        out = model(x)
        target, reconstruction = data.crop(to_unit(x)), data.crop(to_unit(out.reconstruction))
        psnr.update(reconstruction, target)
        ssim.update(reconstruction, target)
        counts += code_statistics(out.indices, model.config.num_codes)[0]
    model.train(was_training)
    perplexity, usage = usage_of_counts(counts)
    return {"psnr": float(psnr.compute()), "ssim": float(ssim.compute()), "usage": float(usage),
            "perplexity": float(perplexity)}


class ClassifierFeatures(nn.Module):
    """A trained vitlab classifier as FID's feature extractor: images (B, C, S, S) in [0, 1], as the generator
    writes them (padding included) -> its pooled features before the head (B, D).

    `crop` removes the generator's padding; the crop is resized to the classifier's input and normalised with its
    training mean and std."""

    def __init__(self, classifier: nn.Module, img_size: int, mean: list[float], std: list[float],
                 crop: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        if not (hasattr(classifier, "forward_features") and hasattr(classifier, "forward_head")):
            raise ValueError(f"FID needs a classifier with pooled features (a ViT or DeiT run); "
                             f"{type(classifier).__name__} has no forward_features / forward_head")
        self.classifier = classifier.eval()
        self.img_size, self.crop = img_size, crop
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))
        self.num_features = classifier.forward_head(
            classifier.forward_features(torch.zeros(1, len(mean), img_size, img_size)), pre_logits=True).shape[-1]

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        x = self.crop(images.float())
        if x.shape[1] != self.mean.shape[1]:
            x = x.expand(-1, self.mean.shape[1], -1, -1) if x.shape[1] == 1 else x.mean(1, keepdim=True)
        if x.shape[-1] != self.img_size or x.shape[-2] != self.img_size:
            x = F.interpolate(x, size=(self.img_size, self.img_size), mode="bilinear", antialias=True,
                              align_corners=False)
        return (x - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier.forward_head(self.classifier.forward_features(self.prepare(images)), pre_logits=True)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, S, S) in [0, 1] -> predicted classes (B,)."""
        return self.classifier(self.prepare(images)).argmax(dim=-1)


def load_classifier_features(run_dir: str, crop: Callable[[torch.Tensor], torch.Tensor]) -> ClassifierFeatures:
    from ..classification.task import ClassificationTask
    from ..launch import load_run

    classifier, saved = load_run(run_dir, "best")
    if saved.get("task", ClassificationTask.name) != ClassificationTask.name:
        raise ValueError(f"--classifier must be a classification run; {run_dir} is a {saved.get('task')} run")
    data = saved["data"]
    return ClassifierFeatures(classifier, int(data["img_size"]), data["mean"], data["std"], crop)


@torch.no_grad()
def fid(features: ClassifierFeatures, real: torch.Tensor, fake: torch.Tensor, batch_size: int = 250) -> float:
    """FID between two sets of images (N, C, S, S) in [0, 1] (or uint8) in the classifier's feature space."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    metric = FrechetInceptionDistance(feature=features, normalize=True)
    for images, is_real in ((real, True), (fake, False)):
        for part in batches(len(images), batch_size):
            x = images[part].to(features.mean.device)
            metric.update(x.float() / 255 if x.dtype == torch.uint8 else x, real=is_real)
    return float(metric.compute())


@torch.no_grad()
def class_accuracy(features: ClassifierFeatures, samples: torch.Tensor, labels: torch.Tensor,
                   batch_size: int = 250) -> float:
    """The share of samples (N, C, S, S) in [0, 1] that the classifier assigns to their class labels (N,)."""
    hits = 0
    for part in batches(len(samples), batch_size):
        device = features.mean.device
        hits += int((features.predict(samples[part].to(device)) == labels[part].to(device)).sum())
    return hits / max(1, len(samples))


def generation_scores(features: ClassifierFeatures, data: GenerationImages, samples: torch.Tensor,
                      labels: torch.Tensor, part: str = "test") -> dict[str, Any]:
    """fid (samples against the images of `part`, "val" or "test"), fid_floor (as many training images against
    them) and class_acc."""
    reference = data.held_out(part)[0]
    floor = data.train[torch.randperm(len(data.train), generator=torch.Generator().manual_seed(0))[:len(samples)]]
    return {"fid": fid(features, reference, samples), "fid_floor": fid(features, reference, floor),
            "class_acc": class_accuracy(features, samples, labels)}
