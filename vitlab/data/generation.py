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
from .registry import FASHION_MNIST_NAMES, FASHION_MNIST_VAL_FRACTION, build_datasets
from .split import split_indices


@dataclass
class GenerationImages:
    """train, val, test: (N, C, S, S) uint8; *_labels: (N,) int64; pad: pixels of border added on each side
    (Fashion-MNIST: 2, from 28 to 32). `val` selects the best checkpoint; `test` (None where the data has no test
    part) is scored once at the end."""

    name: str
    train: torch.Tensor
    train_labels: torch.Tensor
    val: torch.Tensor
    val_labels: torch.Tensor
    test: torch.Tensor | None
    test_labels: torch.Tensor | None
    classes: list[str]
    pad: int = 0
    split: dict | None = None
    num_skipped: int = 0  # unreadable images of a folder left out (skip_bad_images)

    def held_out(self, part: str = "test") -> tuple[torch.Tensor, torch.Tensor, str]:
        """(images, labels, part read) of "val" or "test"; "test" falls back to "val" where there is no test part."""
        if part == "test" and self.test is not None:
            return self.test, self.test_labels, "test"
        if part not in ("test", "val"):
            raise ValueError(f"part must be 'test' or 'val', got {part!r}")
        return self.val, self.val_labels, "val"

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
                           size: int = 32, channels: int | None = None, val_fraction: float | None = None,
                           seed: int = 0, strict_counts: bool = True, skip_bad_images: bool = False
                           ) -> GenerationImages:
    """Fashion-MNIST (train 55,000, val 5,000 of the training images, test 10,000), padded to `size`; or an image
    folder resized to `size`, split as `build_datasets` splits it (its val/ and test/ folders, else a seeded
    `val_fraction` of the training images for validation). `strict_counts=False` accepts a Fashion-MNIST copy with
    fewer images; `skip_bad_images` leaves a folder's unreadable images out (counted, warned) instead of stopping."""
    if data.lower() in FASHION_MNIST_NAMES:
        if channels not in (None, 1):
            raise ValueError(f"Fashion-MNIST is grayscale (1 channel); the model asks for {channels}")
        images, labels = load_fashion_mnist("train", data_dir, strict_counts=strict_counts)
        test, test_labels = load_fashion_mnist("test", data_dir, strict_counts=strict_counts)
        fraction = FASHION_MNIST_VAL_FRACTION if val_fraction is None else val_fraction
        train_idx, val_idx = split_indices(labels.tolist(), fraction, seed)
        images, pad = pad_to(images[:, None], size)
        test, _ = pad_to(test[:, None], size)
        train_idx, val_idx = torch.tensor(train_idx), torch.tensor(val_idx)
        split = {"train": len(train_idx), "val": len(val_idx), "test": len(test), "val_from": "train",
                 "val_fraction": fraction, "seed": seed}
        return GenerationImages("fashion-mnist", images[train_idx], labels[train_idx], images[val_idx],
                                labels[val_idx], test, test_labels, list(FASHION_MNIST_CLASSES), pad, split)
    if not Path(data).is_dir():
        raise FileNotFoundError(f"--data must be fashion-mnist or a folder of images (one sub-folder per class), got "
                                f"{data!r}, which is neither")
    channels = channels or 3
    bundle = build_datasets(data, val_fraction=val_fraction, img_size=size, channels=channels, seed=seed,
                            augment=False, mean=(0.0,) * channels, std=(1.0,) * channels,
                            skip_bad_images=skip_bad_images)
    train, train_labels = _in_memory(bundle.train, f"reading {data}")
    val, val_labels = _in_memory(bundle.val, "reading the validation images")
    test, test_labels = _in_memory(bundle.test, "reading the test images") if bundle.test is not None else (None, None)
    parts = (bundle.train, bundle.val, bundle.test)
    folders = {getattr(d, "dataset", d) for d in parts if d is not None}  # one folder, or train/ (val/) (test/)
    return GenerationImages(str(Path(data).resolve()), train, train_labels, val, val_labels, test, test_labels,
                            list(bundle.classes), split=bundle.split,
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
