"""Images for generative models, held in memory as uint8: Fashion-MNIST padded to 32×32 (so that it halves down to
8×8 and 4×4 code grids), or a folder of images with one sub-folder per class, resized to a square.

`GenerationImages.crop(x)` undoes the padding, so that reconstructions and samples are scored on the pixels the
data set has (a black border is free to reconstruct and would flatter PSNR).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist
from .registry import FASHION_MNIST_NAMES, build_datasets


@dataclass
class GenerationImages:
    """train, test: (N, C, S, S) uint8; train_labels, test_labels: (N,) int64; pad: pixels of border added on
    each side (Fashion-MNIST: 2, from 28 to 32)."""

    name: str
    train: torch.Tensor
    train_labels: torch.Tensor
    test: torch.Tensor
    test_labels: torch.Tensor
    classes: list[str]
    pad: int = 0
    num_skipped: int = 0  # unreadable images of a folder left out (skip_bad_images)

    @property
    def channels(self) -> int:
        return self.train.shape[1]

    @property
    def size(self) -> int:
        return self.train.shape[-1]

    def crop(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, S, S) -> (B, C, S − 2·pad, S − 2·pad): the data set's own pixels."""
        return crop_padding(x, self.pad)


def crop_padding(x: torch.Tensor, pad: int) -> torch.Tensor:
    """(…, H, W) -> (…, H − 2·pad, W − 2·pad): a border of `pad` pixels cut off each side."""
    return x[..., pad:x.shape[-2] - pad, pad:x.shape[-1] - pad] if pad else x


def pad_to(images: torch.Tensor, size: int) -> tuple[torch.Tensor, int]:
    """(N, C, s, s) -> (N, C, size, size) with a black border of (size − s) / 2 on each side, and that border."""
    s = images.shape[-1]
    if size < s or (size - s) % 2:
        raise ValueError(f"cannot pad {s}×{s} images to {size}×{size}: the size must be {s} plus an even number")
    pad = (size - s) // 2
    return (F.pad(images, (pad, pad, pad, pad)) if pad else images), pad


def load_generation_images(data: str = "fashion-mnist", data_dir: str | os.PathLike[str] | None = None,
                           size: int = 32, channels: int | None = None, val_fraction: float = 0.1,
                           seed: int = 0, strict_counts: bool = True, skip_bad_images: bool = False
                           ) -> GenerationImages:
    """Fashion-MNIST (train 60,000, test 10,000), padded to `size`; or an image folder resized to `size`, its
    test/ (or val/) split folder held out, else `val_fraction` of it. `strict_counts=False` accepts a Fashion-MNIST
    copy with fewer images; `skip_bad_images` leaves a folder's unreadable images out (counted, warned) instead of
    stopping."""
    if data.lower() in FASHION_MNIST_NAMES:
        if channels not in (None, 1):
            raise ValueError(f"Fashion-MNIST is grayscale (1 channel); the model asks for {channels}")
        train, train_labels = load_fashion_mnist("train", data_dir, strict_counts=strict_counts)
        test, test_labels = load_fashion_mnist("test", data_dir, strict_counts=strict_counts)
        train, pad = pad_to(train[:, None], size)
        test, _ = pad_to(test[:, None], size)
        return GenerationImages("fashion-mnist", train, train_labels, test, test_labels, list(FASHION_MNIST_CLASSES),
                                pad)
    if not Path(data).is_dir():
        raise FileNotFoundError(f"--data must be fashion-mnist or a folder of images (one sub-folder per class), got "
                                f"{data!r}, which is neither")
    channels = channels or 3
    bundle = build_datasets(data, val_fraction=val_fraction, img_size=size, channels=channels, seed=seed,
                            augment=False, mean=(0.0,) * channels, std=(1.0,) * channels,
                            skip_bad_images=skip_bad_images)
    train, train_labels = _in_memory(bundle.train, f"reading {data}")
    test, test_labels = _in_memory(bundle.test, "reading the held-out images")
    folders = {getattr(d, "dataset", d) for d in (bundle.train, bundle.test)}  # one folder, or train/ and test/
    return GenerationImages(str(Path(data).resolve()), train, train_labels, test, test_labels, list(bundle.classes),
                            num_skipped=sum(getattr(folder, "num_skipped", 0) for folder in folders))


def _in_memory(dataset, description: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A dataset of ((C, S, S) float in [0, 1], label) -> (N, C, S, S) uint8, (N,) int64."""
    images, labels = [], []
    for image, label in tqdm(dataset, desc=description, leave=False, mininterval=1.0):
        images.append((image.clamp(0, 1) * 255).round().to(torch.uint8))
        labels.append(int(label))
    if not images:
        raise ValueError(f"{description}: no images")
    return torch.stack(images), torch.tensor(labels, dtype=torch.long)
