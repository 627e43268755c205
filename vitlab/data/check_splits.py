"""A data folder's splits found and checked whole, as `vitlab check-data` shows them: the layouts are the ones the
tasks read (coco.find_split, segmentation.find_segmentation_split, an image folder with or without train/ and
test/ or val/), the checks those of data/checks.py, with every image decoded.

Each function returns one CheckReport per split; none trains or raises for a problem it finds.
"""

from __future__ import annotations

from pathlib import Path

from .checks import CheckReport, check_coco, check_image_files, check_masks
from .coco import find_split
from .folder import ImageFolderDataset
from .segmentation import IGNORE_INDEX, count_classes, find_segmentation_split

SPLITS = ("train", "val")


def check_coco_folder(root: str | Path) -> list[CheckReport]:
    """The train and val COCO splits of `root` (either layout of `find_split`)."""
    return [check_coco(*find_split(root, split), decode=True)[0] for split in SPLITS]


def check_mask_folder(root: str | Path, num_classes: int | None = None) -> list[CheckReport]:
    """The train and val image/mask pairs of `root`; the classes are `num_classes`, else as many as the folder
    names, else counted from the masks (then no value is beyond them)."""
    splits = {split: find_segmentation_split(root, split) for split in SPLITS}
    names = splits["train"][1]
    classes = num_classes or (len(names) if names else count_classes([p for s in splits.values() for p in s[0]]))
    return [check_masks(pairs, classes, f"{split} split of {root} ({classes} classes)", IGNORE_INDEX,
                        decode_images=True) for split, (pairs, _) in splits.items()]


def check_image_folder(root: str | Path) -> list[CheckReport]:
    """A folder of class sub-folders: train/ and test/ (or val/) checked apart if it has them, else the whole."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"no image folder at {root}; give a folder of class sub-folders (root/<class>/<image>)")
    held_out = next((name for name in ("test", "val") if (root / name).is_dir()), None)
    folders = [root / "train", root / held_out] if (root / "train").is_dir() and held_out else [root]
    return [check_image_files([path for path, _ in ImageFolderDataset(folder).samples], f"images in {folder}")
            for folder in folders]
