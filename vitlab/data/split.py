"""Deterministic, stratified train/validation split of any map-style dataset."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset, Subset

__all__ = ["dataset_targets", "split_dataset", "split_indices"]


def dataset_targets(dataset: Dataset) -> list[int] | None:
    """Class index per example, read from ``targets`` or ``labels`` without loading any image; else None."""
    for name in ("targets", "labels"):
        values = getattr(dataset, name, None)
        if values is not None:
            return [int(v) for v in values]
    if isinstance(dataset, Subset):
        parent = dataset_targets(dataset.dataset)
        return None if parent is None else [parent[i] for i in dataset.indices]
    return None


def split_indices(targets: Sequence[int], val_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Split ``range(len(targets))`` into (train, val) index lists, class by class.

    The val set gets ``round(len(targets) * val_fraction)`` examples (at least one, where a fraction is asked for
    and there are two examples or more: a validation set of none could select nothing), shared among classes in
    proportion to their size (largest remainders get the odd ones), but every class keeps at least one example in
    train so none is missing from training. Members are picked by a random permutation seeded with ``seed``, independent
    of the global RNG. Both lists come back sorted.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(
            f"val_fraction is the share of examples held out, in [0, 1); got {val_fraction!r}. Use e.g. 0.1."
        )
    by_class: dict[int, list[int]] = defaultdict(list)
    for index, target in enumerate(targets):
        by_class[int(target)].append(index)
    classes = sorted(by_class)

    quota = {t: len(by_class[t]) * val_fraction for t in classes}
    n_val = {t: min(int(quota[t]), len(by_class[t]) - 1) for t in classes}
    wanted = round(len(targets) * val_fraction)
    if val_fraction > 0 and len(targets) >= 2:
        wanted = max(wanted, 1)
    missing = wanted - sum(n_val.values())
    for t in sorted(classes, key=lambda t: (int(quota[t]) - quota[t], t)):  # largest fractional part first
        if missing <= 0:
            break
        if n_val[t] < len(by_class[t]) - 1:
            n_val[t] += 1
            missing -= 1

    generator = torch.Generator().manual_seed(seed)
    train: list[int] = []
    val: list[int] = []
    for t in classes:
        members = by_class[t]
        order = torch.randperm(len(members), generator=generator).tolist()
        val += [members[i] for i in order[: n_val[t]]]
        train += [members[i] for i in order[n_val[t] :]]
    return sorted(train), sorted(val)


def split_dataset(dataset: Dataset, val_fraction: float, seed: int = 0) -> tuple[Subset, Subset]:
    """Split ``dataset`` into ``(train_subset, val_subset)``, reproducibly for a given ``seed``.

    The split is stratified by class when the dataset exposes ``targets`` or ``labels`` (ImageFolderDataset,
    FashionMNIST, torchvision datasets); otherwise all examples count as one class (a plain random split).
    """
    targets = dataset_targets(dataset)
    if targets is None:
        targets = [0] * len(dataset)  # type: ignore[arg-type]
    train, val = split_indices(targets, val_fraction, seed)
    return Subset(dataset, train), Subset(dataset, val)
