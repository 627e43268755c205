"""A dataset of image files laid out one folder per class: ``root/<class name>/<...>/<image>``.

This is torchvision's ImageFolder layout, with the same class order (sorted folder names), but with clear
errors: a corrupt file raises :class:`BadImageError` naming it, or is found and skipped up front with
``skip_bad_images=True``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image
from torch.utils.data import Dataset

from vitlab.data.channels import MODES
from vitlab.data.images import BadImageError, read_image, warn_skipped
from vitlab.data.split import split_dataset

__all__ = ["IMAGE_EXTENSIONS", "BadImageError", "ImageFolderDataset", "load_image", "split_dataset"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def load_image(path: str | os.PathLike[str], channels: int = 3) -> Image.Image:
    """Open and fully decode an image, converted to ``L`` (channels=1) or ``RGB`` (channels=3): the one reader,
    vitlab.data.images.read_image, with its defaults (EXIF orientation applied, at most 64 MP).

    Raises:
        BadImageError: the file is missing, truncated, too large, or not an image Pillow can decode.
    """
    return read_image(path, channels)


def _is_visible(name: str) -> bool:
    # Hidden folders such as .ipynb_checkpoints would otherwise become classes of their own.
    return not name.startswith(".")


def _scan(root: Path, extensions: tuple[str, ...]) -> tuple[list[str], list[tuple[Path, int]]]:
    """Return (sorted class names, [(image path, class index)]) in a stable order."""
    if not root.exists():
        raise FileNotFoundError(
            f"image folder {root} does not exist; expected a folder with one sub-folder of images per class."
        )
    if not root.is_dir():
        raise NotADirectoryError(
            f"{root} is a file; expected a folder with one sub-folder of images per class (root/<class>/<image>)."
        )
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and _is_visible(e.name))
    if not classes:
        raise ValueError(
            f"{root} has no class sub-folders; expected the layout root/<class name>/<image>, e.g. "
            f"{root}/cat/1.jpg and {root}/dog/2.jpg. Move the images into one folder per class."
        )
    samples: list[tuple[Path, int]] = []
    empty: list[str] = []
    for index, name in enumerate(classes):
        found = []
        for folder, dirs, files in os.walk(root / name, followlinks=True):
            dirs[:] = sorted(d for d in dirs if _is_visible(d))  # sorted in place: os.walk then visits in order
            found += [Path(folder, f) for f in sorted(files) if _is_visible(f) and f.lower().endswith(extensions)]
        if not found:
            empty.append(name)
        samples += [(path, index) for path in found]
    if empty:
        raise ValueError(
            f"{root}: class folder(s) {empty} contain no images with extensions {', '.join(extensions)}. "
            "Every class needs at least one image: add images, or remove the folder."
        )
    return classes, samples


class ImageFolderDataset(Dataset):
    """Images in ``root/<class>/...``, returned as ``(image, class index)``.

    Without a ``transform`` an item is ``(image: (channels, H, W) float32 in [0, 1], label: int)``; a
    ``transform`` receives the PIL image (mode ``L`` or ``RGB``) instead, e.g. a pipeline from
    vitlab.data.transforms. Grayscale, RGBA, palette and other modes are converted to ``channels``; transparent
    pixels become white.

    Attributes:
        classes: sorted class (folder) names; ``class_to_idx`` maps them to labels.
        samples: ``[(path, label)]`` in class order, then path order.
        targets: the labels alone, for stratified splits.
        num_skipped, skipped_files: unreadable files left out (only with ``skip_bad_images=True``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Image.Image], Any] | None = None,
        channels: int = 3,
        skip_bad_images: bool = False,
        extensions: tuple[str, ...] = IMAGE_EXTENSIONS,
    ) -> None:
        if channels not in MODES:
            raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}.")
        self.root = Path(root).expanduser()
        self.transform = transform
        self.channels = channels
        self.classes, samples = _scan(self.root, tuple(e.lower() for e in extensions))
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.skipped_files: list[Path] = []
        if skip_bad_images:
            # Decode every file once now, so bad ones never reach a DataLoader worker mid-epoch.
            good = []
            for path, label in samples:
                try:
                    load_image(path, channels)
                    good.append((path, label))
                except BadImageError:
                    self.skipped_files.append(path)
            samples = good
            warn_skipped(str(self.root), {"unreadable images": [str(p) for p in self.skipped_files]})
            if not samples:
                raise ValueError(
                    f"{self.root}: none of the {len(self.skipped_files)} image files could be read; expected "
                    "readable images. Check the files (e.g. open one in an image viewer)."
                )
        self.samples: list[tuple[Path, int]] = samples
        self.targets: list[int] = [label for _, label in samples]

    @property
    def num_skipped(self) -> int:
        return len(self.skipped_files)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        image = load_image(path, self.channels)
        if self.transform is None:
            return TF.to_dtype(TF.pil_to_tensor(image), torch.float32, scale=True), label
        return self.transform(image), label

    def with_transform(self, transform: Callable[[Image.Image], Any] | None) -> ImageFolderDataset:
        """A copy sharing the scanned file list but applying ``transform`` (no rescan, no re-verification)."""
        clone = copy.copy(self)
        clone.transform = transform
        return clone

    def __repr__(self) -> str:
        return (
            f"ImageFolderDataset(root={str(self.root)!r}, n={len(self)}, classes={len(self.classes)}, "
            f"channels={self.channels}, skipped={self.num_skipped})"
        )
