"""Images without labels, for self-supervised pretraining (tasks/mim): the splits of a folder, whatever it was
made for, and a dataset of its images as tensors.

A folder's splits, in the first layout that matches:

    a segmentation folder     its images, the masks ignored (data/segmentation.py's layouts): pretraining on the
                              very images a SETR then trains on, with their val and test split kept apart
    train/ [val/] [test/]     the images under each (searched recursively): an image-folder classification set,
                              vitlab fetch-photos' folder
    any folder                every image under it; val drawn from it (--val-fraction), no test
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torchvision.transforms.v2.functional as TF
from torch.utils.data import Dataset
from torchvision.transforms import v2

from .folder import IMAGE_EXTENSIONS, load_image
from .segmentation import find_segmentation_split, has_segmentation_split

SPLITS = ("train", "val", "test")


def _images_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def unlabelled_split(root: str | Path, split: str) -> list[Path] | None:
    """The image files of `split` ("train", "val" or "test") of `root`, in the module's layouts; None where the
    folder has no such split (the caller then holds out val from train). Raises FileNotFoundError, saying what was
    looked for, where there is no image at all to train on."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"no folder at {root}: give a folder of images (any layout: a segmentation folder, "
                                f"train/ and val/ folders, or images anywhere under it)")
    if has_segmentation_split(root, "train"):
        if not has_segmentation_split(root, split):
            return None
        return [image for image, _ in find_segmentation_split(root, split)[0]]
    if (root / "train").is_dir():
        return _images_under(root / split) if (root / split).is_dir() else None
    if split != "train":
        return None
    files = _images_under(root)
    if not files:
        raise FileNotFoundError(f"{root} holds no images ({', '.join(IMAGE_EXTENSIONS)}) in any folder under it")
    return files


def pretraining_transforms(train: bool, size: int, scale: tuple[float, float] = (0.2, 1.0), hflip: bool = True,
                           mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None) -> v2.Compose:
    """Training (MAE's): a random crop of `scale` of the image's area (aspect 3/4 to 4/3), resized to size² with
    bicubic interpolation, a horizontal flip. Evaluation: the image resized to size² (a fixed view, so that the
    validation loss compares like with like). Then normalised with mean and std where given."""
    steps: list = ([v2.RandomResizedCrop(size, scale=scale, interpolation=v2.InterpolationMode.BICUBIC,
                                         antialias=True)] + ([v2.RandomHorizontalFlip(0.5)] if hflip else [])) \
        if train else [v2.Resize((size, size), interpolation=v2.InterpolationMode.BICUBIC, antialias=True)]
    if mean is not None:
        steps.append(v2.Normalize(mean=list(mean), std=list(std)))
    return v2.Compose(steps)


class UnlabelledImages(Dataset):
    """Image files -> (C, H, W) float tensors in [0, 1] after `transforms` (the one image reader: a file that is
    not an image raises BadImageError naming it)."""

    def __init__(self, files: list[Path], channels: int = 3, transforms: Callable | None = None) -> None:
        if not files:
            raise ValueError("no images: a pretraining split needs at least one")
        self.files, self.channels, self.transforms = list(files), channels, transforms

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> torch.Tensor:
        image = TF.to_dtype(TF.to_image(load_image(self.files[index], self.channels)), torch.float32, scale=True)
        return self.transforms(image) if self.transforms is not None else image
