"""The order in which one epoch visits the training set: shuffled by (seed, epoch), optionally with repeated
augmentation, optionally split over the processes of a distributed run.

Repeated augmentation (Hoffer et al. 2020, "Augment your batch"; used by DeiT §6): an epoch draws only
⌈n / r⌉ distinct images and shows each r times in a row, so the r copies land in the same batch and each gets
its own random augmentation. The epoch keeps its length n.

Distributed: each of R processes takes every R-th index (rank, rank + R, ...), after padding the order with
its own head to a multiple of R, so all ranks run the same number of steps. With a per-rank batch b, step i of
all ranks together covers exactly the indices of step i of one process with batch R·b.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data.distributed import DistributedSampler

from .options import OptionError


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


class EpochSampler(DistributedSampler):
    """torch's DistributedSampler (same arguments, same set_epoch contract, usable where one is expected), with
    the order drawn from (seed, epoch) as above and repeated augmentation added."""

    def __init__(self, size: int, shuffle: bool = True, seed: int = 0, repeats: int = 1, num_replicas: int = 1,
                 rank: int = 0, pad: bool = True) -> None:
        """pad=False (evaluation): the shards are left uneven rather than counting some images twice."""
        if repeats < 1:
            raise OptionError("repeated_aug", f"is a number of copies, 1 (off) or more; got {repeats}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside 0..{num_replicas - 1}")
        super().__init__(range(size), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.size, self.shuffle, self.seed, self.repeats = size, shuffle, seed, repeats
        self.num_replicas, self.rank, self.pad, self.epoch = num_replicas, rank, pad, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if not self.pad:
            return len(range(self.rank, self.size, self.num_replicas))
        return -(-self.size // self.num_replicas)

    def order(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """This rank's indices for the current epoch, (len(self),) int64. `generator` (default: a fresh one
        seeded by (seed, epoch)) is advanced by the shuffle, so a caller can go on drawing augmentations from it."""
        n = self.size
        generator = generator if generator is not None else epoch_generator(self.seed, self.epoch)
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        if self.repeats > 1:
            order = order[: -(-n // self.repeats)].repeat_interleave(self.repeats)[:n]
        if self.num_replicas > 1 and self.pad:
            padded = len(self) * self.num_replicas
            order = torch.cat([order, order[: padded - n]])
        if self.num_replicas > 1:
            order = order[self.rank :: self.num_replicas]
        return order

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())
