"""One entry point from a data set name (or folder) to ready-to-use train, validation and test datasets."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch.utils.data import Dataset, Subset

from vitlab.data.fashion_mnist import FASHION_MNIST_CLASSES, FASHION_MNIST_MEAN, FASHION_MNIST_STD, FashionMNIST
from vitlab.data.folder import ImageFolderDataset
from vitlab.data.split import split_indices
from vitlab.data.stats import image_folder_stats
from vitlab.data.transforms import build_eval_transform, build_train_transform

__all__ = ["FASHION_MNIST_NAMES", "DatasetBundle", "build_datasets"]

FASHION_MNIST_NAMES = ("fashion-mnist", "fashion_mnist", "fashionmnist")
FASHION_MNIST_VAL_FRACTION = 5000 / 60000  # 5,000 validation images, as many as each class's share gives
_SPLIT_FOLDERS = {"train", "val", "test"}


@dataclass(frozen=True)
class DatasetBundle:
    """What a training run needs to know about its data.

    Attributes:
        name: ``"fashion-mnist"`` or the image folder's path.
        train, val, test: datasets of ``(image: (channels, img_size, img_size) float32 normalised, label: int)``;
            ``train`` augments unless ``augment=False``; ``val`` picks the best checkpoint, ``test`` is scored once
            at the end (None where the data has no test part). For Fashion-MNIST they are :class:`FashionMNIST`
            sets whose raw ``images``/``labels`` tensors allow batched augmentation instead.
        split: how the parts were made: their sizes, where each came from, the seed of any held-out split.
        classes: class names, index = label.
        channels, img_size: the shape the transforms produce.
        native_size: side of the stored images when they all share one (28 for Fashion-MNIST), else None.
        mean, std: per-channel normalisation applied by the transforms (in [0, 1] units).
    """

    name: str
    train: Dataset
    val: Dataset
    test: Dataset | None
    classes: list[str]
    channels: int
    img_size: int
    native_size: int | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    split: dict | None = None

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def _repeat(stats: tuple[float, ...], channels: int) -> tuple[float, ...]:
    return stats * channels if len(stats) == 1 else stats


def _check_common(img_size: int | None, channels: int | None) -> None:
    if channels is not None and channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}.")
    if img_size is not None and (not isinstance(img_size, int) or img_size < 1):
        raise ValueError(f"img_size must be a positive int (pixels per side), got {img_size!r}.")


def build_datasets(
    data: str,
    data_dir: str | os.PathLike[str] | None = None,
    val_fraction: float | None = None,
    img_size: int | None = None,
    channels: int | None = None,
    skip_bad_images: bool = False,
    seed: int = 0,
    *,
    augment: bool = True,
    crop_padding: int | None = None,
    hflip: bool = True,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    download: bool = True,
    strict_counts: bool = True,
    randaugment: tuple[int, int] | None = None,
    random_erasing: float = 0.0,
) -> DatasetBundle:
    """Build train, validation and test datasets for ``data``.

    The validation part, which selects the best checkpoint, is never the test part:
    - Fashion-MNIST: a stratified 5,000 of the 60,000 training images, chosen with ``seed``; the test part is its
      10,000 test images.
    - A folder split already, ``root/train/<class>/...`` with ``root/val/`` and/or ``root/test/``: each part is used
      for what its name says; without ``val/`` a stratified ``val_fraction`` of ``train/`` is held out; without
      ``test/`` there is no test part.
    - A flat folder, ``root/<class>/...``: a stratified ``val_fraction`` held out for validation, and no test part
      (give ``root/train/`` + ``root/test/`` to have one).

    Args:
        data: data set name or folder.
        data_dir: where to look for Fashion-MNIST files first (see :func:`find_fashion_mnist`).
        val_fraction: share of the training images held out for validation where the data has no ``val/``, in
            (0, 1); default 5,000 / 60,000 for Fashion-MNIST, 0.1 for folders.
        img_size: side of the images the model sees; default 28 for Fashion-MNIST, 224 for folders.
        channels: 1 or 3; default 1 for Fashion-MNIST, 3 for folders.
        skip_bad_images: leave out unreadable images of a folder (checked once, up front) instead of failing.
        seed: seed of the held-out validation split and of the sample used to estimate folder statistics.
        augment: random crops and flips on ``train``; off gives it the test pipeline.
        hflip: whether the training pipeline flips half the images horizontally.
        crop_padding: shift-style augmentation of up to this many pixels (default for Fashion-MNIST: 2 pixels
            at 28x28, scaled with img_size); None for folders means random-resized crops.
        mean, std: normalisation; default Fashion-MNIST's constants, or for folders an estimate from up to 512
            training images.
        download, strict_counts: passed to :class:`FashionMNIST`.
        randaugment, random_erasing: DeiT's augmentations in the per-image training pipeline
            (see :func:`build_train_transform`).

    Raises:
        ValueError: ``data`` is neither a known name nor an existing folder, or an argument is out of range.
    """
    _check_common(img_size, channels)
    extra = {"randaugment": randaugment, "random_erasing": random_erasing}
    if data.lower() in FASHION_MNIST_NAMES:
        return _fashion_mnist(
            data_dir, img_size, channels, augment, crop_padding, hflip, mean, std, download, strict_counts, extra,
            FASHION_MNIST_VAL_FRACTION if val_fraction is None else val_fraction, seed,
        )
    root = Path(data).expanduser()
    if root.is_dir():
        return _image_folder(
            root, 0.1 if val_fraction is None else val_fraction, img_size, channels, skip_bad_images, seed, augment,
            crop_padding, hflip, mean, std,
            extra,
        )
    raise ValueError(
        f"unknown data set {data!r}: expected one of {', '.join(FASHION_MNIST_NAMES)} or the path of an existing "
        "image folder (root/<class>/<image>). Check the spelling, or the path relative to the current directory "
        f"({Path.cwd()})."
    )


def _check_val_fraction(val_fraction: float, where: str) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"{where} has no val/ part, so a share of its training images is held out to select the "
                         f"best checkpoint: val_fraction must be in (0, 1), got {val_fraction!r}. Use e.g. 0.1, or "
                         f"give a val/ folder.")


def _fashion_mnist(data_dir, img_size, channels, augment, crop_padding, hflip, mean, std, download, strict_counts,
                   extra, val_fraction, seed):
    img_size = img_size or 28
    channels = channels or 1
    mean = tuple(mean) if mean is not None else _repeat(FASHION_MNIST_MEAN, channels)
    std = tuple(std) if std is not None else _repeat(FASHION_MNIST_STD, channels)
    if crop_padding is None:
        crop_padding = max(1, round(2 * img_size / 28))  # 2 of 28 pixels: the shift keeps the garment in frame
    eval_tf = build_eval_transform(img_size, mean, std, channels)
    train_tf = (
        build_train_transform(img_size, mean, std, channels, crop_padding=crop_padding, hflip=0.5 if hflip else 0.0,
                              **extra)
        if augment
        else eval_tf
    )
    kwargs = {"data_dir": data_dir, "download": download, "strict_counts": strict_counts}
    _check_val_fraction(val_fraction, "Fashion-MNIST")
    train_full = FashionMNIST("train", transform=train_tf, **kwargs)
    train_idx, val_idx = split_indices(train_full.labels.tolist(), val_fraction, seed)
    test = FashionMNIST("test", transform=eval_tf, **kwargs)
    return DatasetBundle(
        name="fashion-mnist",
        train=train_full.subset(train_idx),
        val=train_full.subset(val_idx, transform=eval_tf),
        test=test,
        split={"train": len(train_idx), "val": len(val_idx), "test": len(test), "val_from": "train",
               "val_fraction": val_fraction, "seed": seed},
        classes=list(FASHION_MNIST_CLASSES),
        channels=channels,
        img_size=img_size,
        native_size=28,
        mean=mean,
        std=std,
    )


def _is_split_folder(root: Path) -> bool:
    names = {e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")}
    return "train" in names and names <= _SPLIT_FOLDERS


def _image_folder(
    root, val_fraction, img_size, channels, skip_bad_images, seed, augment, crop_padding, hflip, mean, std, extra
):
    img_size = img_size or 224
    channels = channels or 3
    if _is_split_folder(root):
        train_full = ImageFolderDataset(root / "train", channels=channels, skip_bad_images=skip_bad_images)
        parts = {name: ImageFolderDataset(root / name, channels=channels, skip_bad_images=skip_bad_images)
                 for name in ("val", "test") if (root / name).is_dir()}
        for name, part in parts.items():
            if part.classes != train_full.classes:
                raise ValueError(
                    f"{root}: train/ and {name}/ must have the same class folders; train has {train_full.classes}, "
                    f"{name} has {part.classes}. Give both the same class folders.")
        train_idx = list(range(len(train_full)))
        if "val" in parts:
            val_full, val_idx, val_from = parts["val"], list(range(len(parts["val"]))), "val/"
        else:
            _check_val_fraction(val_fraction, str(root))
            train_idx, val_idx = split_indices(train_full.targets, val_fraction, seed)
            val_full, val_from = train_full, "train/"
        test_full = parts.get("test")
    else:
        _check_val_fraction(val_fraction, str(root))
        train_full = val_full = ImageFolderDataset(root, channels=channels, skip_bad_images=skip_bad_images)
        train_idx, val_idx = split_indices(train_full.targets, val_fraction, seed)
        test_full, val_from = None, "the folder"
    if mean is None or std is None:
        est_mean, est_std = image_folder_stats(train_full, train_idx, seed=seed)
        mean = tuple(mean) if mean is not None else est_mean
        std = tuple(std) if std is not None else est_std
    eval_tf = build_eval_transform(img_size, mean, std, channels)
    train_tf = (
        build_train_transform(img_size, mean, std, channels, crop_padding=crop_padding, hflip=0.5 if hflip else 0.0,
                              **extra)
        if augment
        else eval_tf
    )
    return DatasetBundle(
        name=str(root),
        train=Subset(train_full.with_transform(train_tf), train_idx),
        val=Subset(val_full.with_transform(eval_tf), val_idx),
        test=None if test_full is None else test_full.with_transform(eval_tf),
        split={"train": len(train_idx), "val": len(val_idx), "test": 0 if test_full is None else len(test_full),
               "val_from": val_from, "val_fraction": val_fraction if val_from != "val/" else None, "seed": seed},
        classes=list(train_full.classes),
        channels=channels,
        img_size=img_size,
        native_size=None,
        mean=tuple(mean),
        std=tuple(std),
    )
