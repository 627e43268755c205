"""A data folder's splits found and checked whole, as `vitlab check-data` shows them: the layouts are the ones the
tasks read (coco.find_split, segmentation.find_segmentation_split, an image folder with or without train/ and
test/ or val/), the checks those of data/checks.py, with every image decoded.

Each function returns one CheckReport per split; none trains or raises for a problem it finds.
"""

from __future__ import annotations

from pathlib import Path

from .checks import CheckReport, check_coco, check_image_files, check_masks
from .coco import find_split, has_split
from .folder import ImageFolderDataset
from .segmentation import IGNORE_INDEX, count_classes, find_segmentation_split, has_segmentation_split

SPLITS = ("train", "val", "test")


def check_coco_folder(root: str | Path) -> list[CheckReport]:
    """The COCO splits of `root` it has: train, and val and test where given (either layout of `find_split`)."""
    return [check_coco(*find_split(root, split), decode=True)[0] for split in SPLITS
            if split == "train" or has_split(root, split)]


def check_mask_folder(root: str | Path, num_classes: int | None = None) -> list[CheckReport]:
    """The image/mask pairs of each split `root` has (train, and val and test where given); the classes are
    `num_classes`, else as many as the folder names, else counted from the masks (then no value is beyond
    them)."""
    splits = {split: find_segmentation_split(root, split) for split in SPLITS
              if split == "train" or has_segmentation_split(root, split)}
    names = splits["train"][1]
    classes = num_classes or (len(names) if names else count_classes([p for s in splits.values() for p in s[0]]))
    return [check_masks(pairs, classes, f"{split} split of {root} ({classes} classes)", IGNORE_INDEX,
                        decode_images=True) for split, (pairs, _) in splits.items()]


def check_image_folder(root: str | Path) -> list[CheckReport]:
    """A folder of class sub-folders: train/, val/ and test/ checked apart where it has them, else the whole."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"no image folder at {root}; give a folder of class sub-folders (root/<class>/<image>)")
    folders = [root / name for name in SPLITS if (root / name).is_dir()] if (root / "train").is_dir() else [root]
    return [check_image_files([path for path, _ in ImageFolderDataset(folder).samples], f"images in {folder}")
            for folder in folders]
