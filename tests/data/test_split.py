"""split_dataset / split_indices: deterministic, disjoint, stratified."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, Subset

from vitlab.data import split_dataset, split_indices


class Labelled(Dataset):
    def __init__(self, targets: list[int]) -> None:
        self.targets = targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> int:
        return index


class Unlabelled(Dataset):
    def __len__(self) -> int:
        return 50

    def __getitem__(self, index: int) -> int:
        return index


TARGETS = [0] * 60 + [1] * 30 + [2] * 10


def test_deterministic_and_independent_of_global_rng() -> None:
    torch.manual_seed(1)
    first = split_dataset(Labelled(TARGETS), 0.2, seed=7)
    torch.manual_seed(2)
    second = split_dataset(Labelled(TARGETS), 0.2, seed=7)
    assert first[0].indices == second[0].indices and first[1].indices == second[1].indices
    other = split_dataset(Labelled(TARGETS), 0.2, seed=8)
    assert other[1].indices != first[1].indices


def test_disjoint_cover_and_stratified() -> None:
    train, val = split_dataset(Labelled(TARGETS), 0.2, seed=0)
    assert isinstance(train, Subset) and isinstance(val, Subset)
    assert sorted(train.indices + val.indices) == list(range(100))
    per_class = [sum(TARGETS[i] == c for i in val.indices) for c in range(3)]
    assert per_class == [12, 6, 2]  # 20 % of 60, 30, 10


def test_total_follows_fraction_with_small_classes() -> None:
    targets = [0] * 7 + [1] * 7 + [2] * 6  # 10 % of each rounds to 1, 1, 1 but 10 % of 20 is 2
    train, val = split_indices(targets, 0.1, seed=0)
    assert len(val) == 2 and len(train) == 18


def test_singleton_class_stays_in_training() -> None:
    targets = [0] * 10 + [1]
    # 11 * 0.51 = 5.61 -> 6 held out. The singleton has the largest leftover quota (0.51 vs 0.1) but must stay
    # in training, so the sixth comes from class 0.
    train, val = split_indices(targets, 0.51, seed=3)
    assert 10 in train and 10 not in val
    assert len(val) == 6


def test_without_targets_is_a_plain_random_split() -> None:
    train, val = split_dataset(Unlabelled(), 0.3, seed=0)
    assert len(val) == 15 and len(train) == 35
    assert val.indices != list(range(35, 50))  # shuffled, not the tail


def test_subset_inherits_parent_targets() -> None:
    parent = Labelled([0] * 10 + [1] * 10)
    _, val = split_dataset(Subset(parent, list(range(5, 20))), 0.2, seed=0)  # 5 zeros, 10 ones
    assert sorted(parent.targets[5 + i] for i in val.indices) == [0, 1, 1]


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_fraction_checked(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        split_indices([0, 1], fraction)
