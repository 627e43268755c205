"""Per-channel mean and standard deviation of an image folder, for normalisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vitlab.data.folder import ImageFolderDataset, load_image

__all__ = ["image_folder_stats"]


def image_folder_stats(
    dataset: ImageFolderDataset,
    indices: Sequence[int] | None = None,
    max_images: int = 512,
    seed: int = 0,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and std per channel, in [0, 1] units, over all pixels of up to ``max_images`` images.

    Images are read at their own size (after channel conversion, before any transform) and pooled pixel by
    pixel, so large images weigh more, as they would in a pixel-level average over the data set.

    Args:
        dataset: the folder; only ``dataset.samples`` and ``dataset.channels`` are used.
        indices: examples to draw from (e.g. the training part of a split); default all.
        max_images: sample size; a deterministic random subset (``seed``) is used when there are more.

    Returns:
        ``(mean, std)``, each a tuple with one float per channel.
    """
    pool = list(range(len(dataset))) if indices is None else list(indices)
    if not pool:
        raise ValueError("cannot compute image statistics of an empty set of images; pass a non-empty dataset.")
    if len(pool) > max_images:
        pick = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:max_images]
        pool = [pool[i] for i in sorted(pick.tolist())]
    total = np.zeros(dataset.channels)
    total_sq = np.zeros(dataset.channels)
    count = 0
    for index in pool:
        pixels = np.asarray(load_image(dataset.samples[index][0], dataset.channels), dtype=np.float64) / 255.0
        pixels = pixels.reshape(-1, dataset.channels)
        total += pixels.sum(axis=0)
        total_sq += (pixels**2).sum(axis=0)
        count += len(pixels)
    mean = total / count
    # Clip tiny negative variances from rounding; a constant image gives std 0, which would divide by zero later.
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    std = np.where(std < 1e-6, 1.0, std)
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)
