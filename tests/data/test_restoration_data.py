"""Restoration patches and test pairs: sizes per task, one task per batch in turn, reproducible test degradations,
and DIV2K-style HR/LR folders."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vitlab.data.restoration import (
    RestorationPairs,
    RestorationPatches,
    TaskBatchSampler,
    halve,
    load_photos,
    paired_files,
)


def photos(n=3):
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(3, 150 + 10 * i, 170, generator=g) * 255).to(torch.uint8) for i in range(n)]


def test_patches_have_each_tasks_sizes():
    data = RestorationPatches(photos(), ("sr2", "sr3", "denoise30", "derain"), patch=16, per_task=5)
    assert len(data) == 20
    for index, (task, scale) in zip((0, 5, 10, 15), ((0, 2), (1, 3), (2, 1), (3, 1))):
        lq, hq, t = data[index]
        assert t == task and lq.shape == (3, 16, 16) and hq.shape == (3, 16 * scale, 16 * scale)
        assert lq.min() >= 0 and hq.max() <= 1


def test_every_batch_is_one_task_and_the_tasks_take_turns():
    data = RestorationPatches(photos(), ("sr2", "denoise30", "derain"), patch=8, per_task=12)
    sampler = TaskBatchSampler(data, batch_size=4)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 9
    tasks = [{data.task_of(i) for i in batch} for batch in batches]
    assert all(len(t) == 1 for t in tasks)
    assert [t.pop() for t in tasks] == [0, 1, 2] * 3
    assert sorted(i for b in batches for i in b) == list(range(36))  # each item once an epoch
    sampler.set_epoch(1)
    assert list(sampler) != batches
    halves = [list(TaskBatchSampler(data, 4, rank=r, world_size=2)) for r in (0, 1)]
    # as many batches for each process (one that ran out first would stall the other): the ninth is left out
    assert len(halves[0]) == len(halves[1]) == 4
    assert sorted(map(tuple, halves[0] + halves[1])) == sorted(map(tuple, batches[:8]))


def test_test_pairs_are_the_same_every_time():
    a = RestorationPairs(photos(), "denoise50", crop=64, seed=3)
    b = RestorationPairs(photos(), "denoise50", crop=64, seed=3)
    assert torch.equal(a[1][0], b[1][0]) and not torch.equal(a[1][0], a[2][0][:, :64, :64])
    lq, hq, _ = RestorationPairs(photos(), "sr4", crop=66)[0]
    assert hq.shape == (3, 64, 64) and lq.shape == (3, 16, 16)  # cropped to a multiple of the scale


def test_div2k_style_folders_pair_by_stem(tmp_path):
    (tmp_path / "HR").mkdir()
    (tmp_path / "LR_bicubic/X2").mkdir(parents=True)
    for stem in ("0001", "0002"):
        Image.new("RGB", (20, 20)).save(tmp_path / "HR" / f"{stem}.png")
        Image.new("RGB", (10, 10)).save(tmp_path / "LR_bicubic/X2" / f"{stem}x2.png")
    pairs = paired_files(tmp_path / "HR", tmp_path / "LR_bicubic/X2", 2)
    assert [(h.name, lr.name) for h, lr in pairs] == [("0001.png", "0001x2.png"), ("0002.png", "0002x2.png")]
    Image.new("RGB", (20, 20)).save(tmp_path / "HR" / "0003.png")
    with pytest.raises(FileNotFoundError, match=r"0003\.png"):
        paired_files(tmp_path / "HR", tmp_path / "LR_bicubic/X2", 2)
    (tmp_path / "HR" / "broken.png").write_bytes(b"no image")
    with pytest.raises(ValueError, match=r"broken\.png: it is not an image"):
        load_photos([tmp_path / "HR" / "broken.png"])
    assert halve(torch.zeros(3, 21, 30, dtype=torch.uint8)).shape == (3, 10, 15)
