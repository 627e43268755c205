"""build_datasets: Fashion-MNIST (mini fixture) and image folders, flat and pre-split."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from tests.data.helpers import MINI_DIR
from vitlab.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD, FashionMNIST, build_datasets

COLOURS = {"blue": (0, 0, 255), "green": (0, 255, 0), "red": (255, 0, 0)}


def make_flat_folder(root: Path, per_class: int = 10) -> Path:
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (8, 8), colour).save(root / name / f"{i}.png")
    return root


def test_fashion_mnist_bundle(isolated: Path) -> None:
    bundle = build_datasets("fashion-mnist", MINI_DIR, strict_counts=False, download=False, augment=False)
    # 5,000 / 60,000 of the 200 training images held out for validation: 17 (rounded), as stratified as can be
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (183, 17, 100)
    full = FashionMNIST("train", MINI_DIR, download=False, strict_counts=False)
    rows = {tuple(image.flatten().tolist()) for image in full.images}
    seen = [{tuple(image.flatten().tolist()) for image in part.images} for part in (bundle.train, bundle.val)]
    assert seen[0] | seen[1] <= rows and not seen[0] & seen[1]  # disjoint parts of the training images
    assert bundle.split == {"train": 183, "val": 17, "test": 100, "val_from": "train", "val_fraction": 5000 / 60000,
                            "seed": 0}
    assert bundle.num_classes == 10 and bundle.classes[8] == "Bag"
    assert (bundle.channels, bundle.img_size, bundle.native_size) == (1, 28, 28)
    assert bundle.mean == FASHION_MNIST_MEAN and bundle.std == FASHION_MNIST_STD
    assert isinstance(bundle.train, FashionMNIST)  # raw .images available for batched augmentation
    image, label = bundle.test[0]
    expected = (bundle.test.images[0].float() / 255 - FASHION_MNIST_MEAN[0]) / FASHION_MNIST_STD[0]
    assert image.shape == (1, 28, 28) and torch.allclose(image[0], expected, atol=1e-5) and label == 9


def test_fashion_mnist_resized_to_rgb(isolated: Path) -> None:
    bundle = build_datasets("Fashion-MNIST", MINI_DIR, img_size=32, channels=3, strict_counts=False, download=False)
    assert bundle.mean == FASHION_MNIST_MEAN * 3 and bundle.img_size == 32
    assert bundle.train[0][0].shape == (3, 32, 32) and bundle.test[0][0].shape == (3, 32, 32)


def test_fashion_mnist_counts_strict_by_default(isolated: Path) -> None:
    with pytest.raises(ValueError, match="60000"):
        build_datasets("fashion-mnist", MINI_DIR, download=False)


def test_flat_folder_split_and_statistics(tmp_path: Path) -> None:
    root = make_flat_folder(tmp_path / "flat")
    bundle = build_datasets(str(root), val_fraction=0.2, img_size=16, seed=0)
    assert bundle.classes == ["blue", "green", "red"] and bundle.channels == 3 and bundle.native_size is None
    assert (len(bundle.train), len(bundle.val), bundle.test) == (24, 6, None)  # a flat folder has no test part
    assert sorted(bundle.val[i][1] for i in range(6)) == [0, 0, 1, 1, 2, 2]  # stratified
    # Training images: equally many pure red, green and blue ones, so each channel is 1 on a third of the
    # pixels: mean 1/3, std sqrt(1/3 - 1/9).
    assert bundle.mean == pytest.approx((1 / 3,) * 3, abs=1e-9)
    assert bundle.std == pytest.approx((math.sqrt(2 / 9),) * 3, abs=1e-9)
    image, label = bundle.val[0]
    assert image.shape == (3, 16, 16)
    hot = COLOURS[bundle.classes[label]].index(255)  # the channel that is 255 in this class's colour
    assert torch.allclose(image[hot], torch.full((16, 16), (1 - 1 / 3) / math.sqrt(2 / 9)), atol=1e-5)
    assert torch.allclose(image.sum(0), torch.full((16, 16), (1 - 3 * (1 / 3)) / math.sqrt(2 / 9)), atol=1e-5)


def test_flat_folder_split_depends_on_seed_only(tmp_path: Path) -> None:
    root = make_flat_folder(tmp_path / "flat")
    indices = [build_datasets(str(root), val_fraction=0.2, seed=s).val.indices for s in (1, 1, 2)]
    assert indices[0] == indices[1] and indices[0] != indices[2]


def test_flat_folder_needs_a_fraction(tmp_path: Path) -> None:
    root = make_flat_folder(tmp_path / "flat", per_class=2)
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\), got 0"):
        build_datasets(str(root), val_fraction=0)


def test_pre_split_folder(tmp_path: Path) -> None:
    make_flat_folder(tmp_path / "ds" / "train", per_class=4)
    make_flat_folder(tmp_path / "ds" / "val", per_class=2)
    bundle = build_datasets(str(tmp_path / "ds"), img_size=8, channels=1, mean=(0.5,), std=(0.5,))
    assert (len(bundle.train), len(bundle.val), bundle.test) == (12, 6, None)  # val/ selects; no test part
    assert bundle.val[0][0].shape == (1, 8, 8) and bundle.mean == (0.5,)
    make_flat_folder(tmp_path / "ds" / "test", per_class=3)
    bundle = build_datasets(str(tmp_path / "ds"), img_size=8, channels=1, mean=(0.5,), std=(0.5,))
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (12, 6, 9)  # each used for what it says


def test_train_and_test_folders_hold_validation_out_of_train(tmp_path: Path) -> None:
    make_flat_folder(tmp_path / "ds" / "train", per_class=10)
    make_flat_folder(tmp_path / "ds" / "test", per_class=2)
    bundle = build_datasets(str(tmp_path / "ds"), val_fraction=0.2, img_size=8, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (24, 6, 6)
    assert not set(bundle.train.indices) & set(bundle.val.indices)
    assert bundle.split["val_from"] == "train/" and bundle.split["val_fraction"] == 0.2


def test_pre_split_folder_class_mismatch(tmp_path: Path) -> None:
    make_flat_folder(tmp_path / "ds" / "train", per_class=1)
    (tmp_path / "ds" / "test" / "red").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(tmp_path / "ds" / "test" / "red" / "x.png")
    with pytest.raises(ValueError, match=r"same class folders.*\['red'\]"):
        build_datasets(str(tmp_path / "ds"))


def test_unknown_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown data set 'cifar-11'.*fashion-mnist.*existing image folder"):
        build_datasets("cifar-11")
    with pytest.raises(ValueError, match="unknown data set"):
        build_datasets(str(tmp_path / "missing-folder"))


def test_channels_checked() -> None:
    with pytest.raises(ValueError, match="channels must be 1"):
        build_datasets("fashion-mnist", channels=2)
