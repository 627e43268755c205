"""Minibatch iterators with a deterministic order per (seed, epoch), so a resumed run sees the same batches.

`TensorLoader` serves an in-memory uint8 dataset (Fashion-MNIST) and augments whole batches with tensor ops:
on 2 CPU cores a per-image PIL pipeline costs more than the model's forward pass for 28×28 images.
`EpochDataLoader` wraps a torch DataLoader (image folders, per-image torchvision transforms) with the same
`set_epoch` contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


class EpochBatches:
    """What both loaders share: an epoch number that fixes the order, and the number of batches per epoch."""

    batch_size: int
    drop_last: bool
    epoch: int = 0

    @property
    def dataset_size(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n = self.dataset_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class TensorLoader(EpochBatches):
    """images: (N, C, H, W) or (N, H, W) uint8, labels: (N,) int64 -> batches (B, C, H, W) float normalised, (B,).

    `augment(x, generator)` receives the batch in [0, 1] before normalisation.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        shuffle: bool = False,
        drop_last: bool = False,
        augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
        seed: int = 0,
        channels: int | None = None,
    ) -> None:
        if images.ndim == 3:
            images = images[:, None]  # (N, H, W) -> (N, 1, H, W)
        if channels is not None and images.shape[1] != channels:
            if images.shape[1] != 1:
                raise ValueError(f"cannot turn {images.shape[1]}-channel images into {channels} channels")
            images = images.expand(-1, channels, -1, -1)
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.augment, self.seed, self.epoch = augment, seed, 0
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    @property
    def dataset_size(self) -> int:
        return len(self.labels)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = epoch_generator(self.seed, self.epoch)
        n = len(self.labels)
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            x = self.images[index].float().div_(255.0)  # (B, C, H, W) in [0, 1]
            if self.augment is not None:
                x = self.augment(x, generator)
            yield (x - self.mean) / self.std, self.labels[index]


class EpochDataLoader(EpochBatches):
    """A DataLoader whose shuffling order is fixed by (seed, epoch)."""

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool = False, drop_last: bool = False,
                 num_workers: int = 0, seed: int = 0) -> None:
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.num_workers, self.seed, self.epoch = num_workers, seed, 0

    @property
    def dataset_size(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        loader = DataLoader(
            self.dataset, batch_size=self.batch_size, shuffle=self.shuffle, drop_last=self.drop_last,
            num_workers=self.num_workers, generator=epoch_generator(self.seed, self.epoch),
        )
        yield from loader
