"""Minibatch iterators with a deterministic order per (seed, epoch), so a resumed run sees the same batches.

`TensorLoader` serves an in-memory uint8 dataset (Fashion-MNIST) and augments whole batches with tensor ops:
on 2 CPU cores a per-image PIL pipeline costs more than the model's forward pass for 28×28 images.
`EpochDataLoader` wraps a torch DataLoader (image folders, per-image torchvision transforms) with the same
`set_epoch` contract. Both take their order from an `EpochSampler` (samplers.py): shuffling, repeated
augmentation and the split over distributed processes live there, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from .samplers import EpochSampler, epoch_generator


class EpochBatches:
    """What both loaders share: an epoch number that fixes the order, and the number of batches per epoch."""

    batch_size: int
    drop_last: bool
    sampler: EpochSampler

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(self.sampler)  # this process's share of the data
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
        repeats: int = 1,
        num_replicas: int = 1,
        rank: int = 0,
        pad: bool = True,
    ) -> None:
        if images.ndim == 3:
            images = images[:, None]  # (N, H, W) -> (N, 1, H, W)
        if channels is not None and images.shape[1] != channels:
            if images.shape[1] != 1:
                raise ValueError(f"cannot turn {images.shape[1]}-channel images into {channels} channels")
            images = images.expand(-1, channels, -1, -1)
        self.images, self.labels = images, labels
        self.batch_size, self.drop_last, self.augment, self.seed = batch_size, drop_last, augment, seed
        self.sampler = EpochSampler(len(labels), shuffle, seed, repeats, num_replicas, rank, pad)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = epoch_generator(self.seed, self.epoch)  # the order first, then this epoch's augmentations
        order = self.sampler.order(generator)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            x = self.images[index].float().div_(255.0)  # (B, C, H, W) in [0, 1]
            if self.augment is not None:
                x = self.augment(x, generator)
            yield (x - self.mean) / self.std, self.labels[index]


class EpochDataLoader(EpochBatches):
    """A DataLoader whose order is fixed by (seed, epoch)."""

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool = False, drop_last: bool = False,
                 num_workers: int = 0, seed: int = 0, repeats: int = 1, num_replicas: int = 1,
                 rank: int = 0, pad: bool = True, collate_fn: Callable | None = None) -> None:
        self.dataset, self.batch_size, self.drop_last, self.num_workers = dataset, batch_size, drop_last, num_workers
        self.collate_fn = collate_fn  # None: torch's default (stacking); detection pads instead
        self.sampler = EpochSampler(len(dataset), shuffle, seed, repeats, num_replicas, rank, pad)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.batches_from(0)

    def batches_from(self, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This epoch's batches from batch `start` on. The images before it are not loaded: in a run resumed
        mid-epoch, their random transforms were drawn before the checkpoint, whose RNG state the run restored."""
        order = self.sampler.order().tolist()[start * self.batch_size:]
        # the base seed DataLoader draws comes from (seed, epoch) too, not from the global RNG, which dropout uses
        generator = epoch_generator(self.sampler.seed + 1, self.epoch)
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=order, drop_last=self.drop_last,
                            num_workers=self.num_workers, generator=generator, collate_fn=self.collate_fn)
        yield from loader


class TensorBatches(EpochBatches):
    """Batches of rows of in-memory tensors, as they are (no conversion): tensors (N, ...) each -> tuples of their
    rows (B, ...). The prior's code sequences and labels."""

    def __init__(self, *tensors: torch.Tensor, batch_size: int, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        if not tensors or any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError(f"expected tensors with one row per sample, got lengths {[len(t) for t in tensors]}")
        self.tensors, self.batch_size, self.drop_last = tensors, batch_size, drop_last
        self.sampler = EpochSampler(len(tensors[0]), shuffle, seed, 1, num_replicas, rank, True)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        order = self.sampler.order(epoch_generator(self.sampler.seed, self.epoch))
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield tuple(t[index] for t in self.tensors)
