"""Fashion-MNIST: find (or download) the four IDX files, load them as tensors, wrap them as a Dataset.

Zalando's Fashion-MNIST has 60000 training and 10000 test images of clothing, 28x28 grayscale, in 10 classes.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from vitlab.data.download import download_file
from vitlab.data.idx import read_idx

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "FASHION_MNIST_URL",
    "FashionMNIST",
    "find_fashion_mnist",
    "load_fashion_mnist",
]

FASHION_MNIST_CLASSES: list[str] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]

FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

# File name -> MD5 of the gzip file as published at FASHION_MNIST_URL. Only downloads are checked against these:
# the Debian/Ubuntu package dataset-fashion-mnist recompresses the files, so its .gz bytes (and MD5s) differ
# although the decompressed data is the same.
FASHION_MNIST_FILES: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}

# Per-channel mean and standard deviation of the 60000 training images scaled to [0, 1], over all pixels
# (population std, ddof=0). Computed once from the real files, exactly, via a histogram of the uint8 values:
#   x = read_idx("train-images-idx3-ubyte.gz"); h = np.bincount(x.ravel(), minlength=256); v = np.arange(256) / 255
#   mean = (h * v).sum() / h.sum();  std = sqrt((h * (v - mean) ** 2).sum() / h.sum())
# tests/data/test_fashion_mnist.py recomputes them when the real data is installed.
FASHION_MNIST_MEAN: tuple[float, ...] = (0.28604059698879547,)
FASHION_MNIST_STD: tuple[float, ...] = (0.3530242445149226,)

# Where the Debian/Ubuntu package puts the files. A module constant so tests can point it elsewhere.
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
DATA_ENV = "VITLAB_DATA"  # $VITLAB_DATA/fashion-mnist is searched
CACHE_ENV = "VITLAB_CACHE"  # downloads go to $VITLAB_CACHE/fashion-mnist (default ~/.cache/vitlab/fashion-mnist)
URL_ENV = "VITLAB_FASHION_MNIST_URL"  # overrides FASHION_MNIST_URL, e.g. for a mirror or a test server

Split = Literal["train", "test"]
# split -> (images file, labels file, number of examples)
_SPLITS: dict[str, tuple[str, str, int]] = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}


def _file_in(folder: Path, name: str) -> Path | None:
    """``folder/name``, or its decompressed twin (``name`` without ``.gz``), whichever exists."""
    for candidate in (folder / name, folder / name.removesuffix(".gz")):
        if candidate.is_file():
            return candidate
    return None


def _is_complete(folder: Path) -> bool:
    return all(_file_in(folder, name) is not None for name in FASHION_MNIST_FILES)


def default_cache_dir() -> Path:
    """``$VITLAB_CACHE/fashion-mnist``, or ``~/.cache/vitlab/fashion-mnist``."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "vitlab") / "fashion-mnist"


def _search_path(data_dir: str | os.PathLike[str] | None) -> list[Path]:
    places: list[Path] = []
    if data_dir is not None:
        # Accept both the folder holding the files and its parent (as for $VITLAB_DATA).
        places += [Path(data_dir).expanduser(), Path(data_dir).expanduser() / "fashion-mnist"]
    if os.environ.get(DATA_ENV):
        places.append(Path(os.environ[DATA_ENV]).expanduser() / "fashion-mnist")
    places.append(SYSTEM_DIR)
    return places


def find_fashion_mnist(
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    base_url: str | None = None,
    md5s: Mapping[str, str] | None = None,
    progress: bool = True,
) -> Path:
    """Return a folder holding the four Fashion-MNIST files, downloading them if no such folder exists.

    A folder counts when it holds all four files (gzip, or already decompressed without ``.gz``). The search
    order is ``data_dir`` (or ``data_dir/fashion-mnist``), ``$VITLAB_DATA/fashion-mnist``,
    ``/usr/share/datasets/fashion-mnist`` (package ``dataset-fashion-mnist``), then the download cache. Failing
    all, the missing files are downloaded into the cache, each one checked against its MD5 before it is renamed
    into place, so the cache only ever holds verified files.

    Args:
        data_dir: a folder to look in first.
        download: allow downloading when nothing is found.
        cache_dir: download folder; default ``$VITLAB_CACHE/fashion-mnist`` or ``~/.cache/vitlab/fashion-mnist``.
        base_url: where the files are, by name; default ``$VITLAB_FASHION_MNIST_URL`` or the official address.
        md5s: expected MD5 per file name, overriding FASHION_MNIST_FILES (for test fixtures and mirrors).
        progress: show download progress bars.

    Raises:
        FileNotFoundError: nothing found and ``download`` is False. The message lists the places searched.
        vitlab.data.download.DownloadError / ChecksumError: a download failed or had the wrong MD5.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    places = [*_search_path(data_dir), cache]
    for place in places:
        if _is_complete(place):
            return place
    if not download:
        searched = "\n".join(f"  {p}" for p in places)
        raise FileNotFoundError(
            f"Fashion-MNIST not found: expected the files {', '.join(FASHION_MNIST_FILES)} together in one of\n"
            f"{searched}\nInstall them with `apt-get install dataset-fashion-mnist`, set ${DATA_ENV} to a folder "
            "that contains fashion-mnist/, pass data_dir, or allow download=True."
        )
    url = base_url or os.environ.get(URL_ENV) or FASHION_MNIST_URL
    expected = {**FASHION_MNIST_FILES, **(md5s or {})}
    for name in FASHION_MNIST_FILES:
        if _file_in(cache, name) is None:
            download_file(f"{url.rstrip('/')}/{name}", cache / name, expected[name], progress=progress)
    return cache


def load_fashion_mnist(
    split: Split,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    *,
    strict_counts: bool = True,
    **find_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load one split of Fashion-MNIST as tensors.

    Args:
        split: ``"train"`` or ``"test"``.
        data_dir, download: as for :func:`find_fashion_mnist`; further keyword arguments go to it as well.
        strict_counts: require the official sizes (60000 train, 10000 test). Turn off to load a subset of the
            files, such as the small fixture in tests/fixtures/fashion-mnist-mini.

    Returns:
        ``images: (N, 28, 28) uint8`` and ``labels: (N,) int64`` with values 0..9.

    Raises:
        ValueError: unknown split, or files whose shapes, counts or label values are not Fashion-MNIST's.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    folder = find_fashion_mnist(data_dir, download, **find_kwargs)
    images_name, labels_name, official = _SPLITS[split]
    images_path, labels_path = _file_in(folder, images_name), _file_in(folder, labels_name)
    assert images_path is not None and labels_path is not None  # find_fashion_mnist only returns complete folders
    images, labels = read_idx(images_path), read_idx(labels_path)

    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != "uint8":
        raise ValueError(
            f"{images_path}: expected images of shape (N, 28, 28) uint8, got {images.shape} {images.dtype}. "
            "This is not a Fashion-MNIST image file; replace it with the original."
        )
    if labels.ndim != 1 or labels.dtype != "uint8":
        raise ValueError(
            f"{labels_path}: expected labels of shape (N,) uint8, got {labels.shape} {labels.dtype}. "
            "This is not a Fashion-MNIST label file; replace it with the original."
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels; they must "
            "match. One of the files is from another split or data set; replace it with the original."
        )
    if strict_counts and len(images) != official:
        raise ValueError(
            f"{images_path}: the {split} split should have {official} images, got {len(images)}. Replace the "
            "files with the originals, or pass strict_counts=False to use a subset on purpose."
        )
    if len(labels) and int(labels.max()) >= len(FASHION_MNIST_CLASSES):
        raise ValueError(
            f"{labels_path}: labels must be in 0..{len(FASHION_MNIST_CLASSES) - 1}, found {int(labels.max())}. "
            "Replace the file with the original."
        )
    return torch.from_numpy(images), torch.from_numpy(labels.astype("int64"))


class FashionMNIST(Dataset):
    """Fashion-MNIST as a map-style Dataset of ``(image, label)`` pairs.

    Without a ``transform`` an item is ``(image: (1, 28, 28) float32 in [0, 1], label: int)``. A ``transform``
    receives the image as a ``(1, 28, 28) uint8`` tensor instead; the pipelines in vitlab.data.transforms accept
    it directly.

    Training loops that augment on whole batches should skip per-sample work and index the raw tensors:
    ``images: (N, 28, 28) uint8`` and ``labels: (N,) int64`` (``targets`` is the same tensor, named as in
    torchvision). On a couple of CPU cores, a per-sample Python transform costs more than the model.
    """

    def __init__(
        self,
        split: Split,
        data_dir: str | os.PathLike[str] | None = None,
        transform: Callable[[torch.Tensor], Any] | None = None,
        download: bool = True,
        **load_kwargs: Any,
    ) -> None:
        self.split = split
        self.transform = transform
        self.images, self.labels = load_fashion_mnist(split, data_dir, download, **load_kwargs)
        self.classes: list[str] = list(FASHION_MNIST_CLASSES)

    @property
    def targets(self) -> torch.Tensor:
        return self.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.images[index].unsqueeze(0)  # (1, 28, 28) uint8
        label = int(self.labels[index])
        if self.transform is None:
            return image.float().div_(255.0), label
        return self.transform(image), label

    def subset(self, indices: list[int], transform: Callable[[torch.Tensor], Any] | str | None = "same"
               ) -> FashionMNIST:
        """The examples at `indices` (a held-out validation part, the rest for training), as a FashionMNIST whose
        `images` and `labels` are those rows; `transform` replaces this one's unless left as "same"."""
        part = copy.copy(self)
        index = torch.as_tensor(indices, dtype=torch.long)
        part.images, part.labels = self.images[index], self.labels[index]
        if transform != "same":
            part.transform = transform
        return part

    def __repr__(self) -> str:
        return f"FashionMNIST(split={self.split!r}, n={len(self)})"
