"""load_fashion_mnist and the FashionMNIST dataset, on the mini fixture and (when installed) the real data."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.data.helpers import MINI_DIR, REAL_DIR, copy_mini, requires_real_data
from vitlab.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD, FashionMNIST, load_fashion_mnist, write_idx


def raw_images(name: str) -> np.ndarray:
    """Images decoded by hand: skip the 16-byte header of a 3-d IDX file."""
    return np.frombuffer(gzip.decompress((MINI_DIR / name).read_bytes())[16:], dtype=np.uint8).reshape(-1, 28, 28)


def test_official_counts_are_enforced_by_default(isolated: Path) -> None:
    with pytest.raises(ValueError, match=r"should have 60000 images, got 200.*strict_counts=False"):
        load_fashion_mnist("train", MINI_DIR, download=False)


@pytest.mark.parametrize(("split", "n", "prefix"), [("train", 200, "train"), ("test", 100, "t10k")])
def test_load_subset(isolated: Path, split: str, n: int, prefix: str) -> None:
    images, labels = load_fashion_mnist(split, MINI_DIR, download=False, strict_counts=False)
    assert images.shape == (n, 28, 28) and images.dtype == torch.uint8
    assert labels.shape == (n,) and labels.dtype == torch.int64
    np.testing.assert_array_equal(images.numpy(), raw_images(f"{prefix}-images-idx3-ubyte.gz"))


def test_unknown_split(isolated: Path) -> None:
    with pytest.raises(ValueError, match=r"'train' or 'test', got 'val'"):
        load_fashion_mnist("val", MINI_DIR, download=False)  # type: ignore[arg-type]


def test_image_and_label_counts_must_agree(isolated: Path, tmp_path: Path) -> None:
    folder = copy_mini(tmp_path / "fm")
    labels = np.zeros(150, dtype=np.uint8)
    write_idx(folder / "train-labels-idx1-ubyte.gz", labels)
    with pytest.raises(ValueError, match=r"200 images but .*150 labels"):
        load_fashion_mnist("train", folder, download=False, strict_counts=False)


def test_label_range_checked(isolated: Path, tmp_path: Path) -> None:
    folder = copy_mini(tmp_path / "fm")
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.full(100, 10, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"labels must be in 0\.\.9, found 10"):
        load_fashion_mnist("test", folder, download=False, strict_counts=False)


def test_image_shape_checked(isolated: Path, tmp_path: Path) -> None:
    folder = copy_mini(tmp_path / "fm")
    write_idx(folder / "t10k-images-idx3-ubyte.gz", np.zeros((100, 32, 32), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"expected images of shape \(N, 28, 28\) uint8, got \(100, 32, 32\)"):
        load_fashion_mnist("test", folder, download=False, strict_counts=False)


def test_dataset_default_item(isolated: Path) -> None:
    ds = FashionMNIST("test", MINI_DIR, download=False, strict_counts=False)
    assert len(ds) == 100 and ds.classes[9] == "Ankle boot" and ds.classes[0] == "T-shirt/top"
    image, label = ds[3]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    expected = raw_images("t10k-images-idx3-ubyte.gz")[3].astype(np.float32) / 255
    np.testing.assert_allclose(image[0].numpy(), expected)
    assert label == 1 and isinstance(label, int)  # 4th test label: trouser
    assert ds.images.dtype == torch.uint8 and ds.images.shape == (100, 28, 28)
    assert ds.targets is ds.labels


def test_dataset_transform_gets_uint8_tensor(isolated: Path) -> None:
    ds = FashionMNIST(
        "train", MINI_DIR, transform=lambda x: (x.dtype, tuple(x.shape)), download=False, strict_counts=False
    )
    assert ds[0] == ((torch.uint8, (1, 28, 28)), 9)


@requires_real_data
def test_real_data_counts_and_normalisation_constants() -> None:
    images, labels = load_fashion_mnist("train", REAL_DIR, download=False)
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    assert torch.bincount(labels).tolist() == [6000] * 10  # the training set is balanced
    # Recompute mean/std from a histogram of pixel values (exact, and cheap in memory).
    counts = torch.bincount(images.flatten(), minlength=256).double()
    values = torch.arange(256, dtype=torch.float64) / 255
    mean = float((counts * values).sum() / counts.sum())
    std = math.sqrt(float((counts * (values - mean) ** 2).sum() / counts.sum()))
    assert FASHION_MNIST_MEAN[0] == pytest.approx(mean, abs=1e-9)
    assert FASHION_MNIST_STD[0] == pytest.approx(std, abs=1e-9)
    test_images, test_labels = load_fashion_mnist("test", REAL_DIR, download=False)
    assert test_images.shape == (10000, 28, 28) and test_labels.shape == (10000,)
