"""Semantic segmentation data: images with a class-index mask each, in the layouts people have.

    pairs, classes = find_segmentation_split("data/scenes", "train")
    dataset = SegmentationDataset(pairs, num_classes=len(classes), transforms=segmentation_transforms(True, 128))
    image, mask = dataset[0]     # image (C, H, W) float in [0, 1]; mask (H, W) int64, IGNORE_INDEX where unlabelled

Layouts, tried in this order (`find_segmentation_split`):
- `images/{split}/` + `masks/{split}/`, the same file stems (vitlab make-scenes writes this: 0 background, class
  + 1 on each item's pixels; the class names come from its `annotations/instances_{split}.json`);
- Pascal VOC: `JPEGImages/`, `SegmentationClass/` (palette PNGs), `ImageSets/Segmentation/{split}.txt`, with
  VOC's 21 class names unless the folder has a `classes.txt`;
- `images/` + `masks/` without split folders: every tenth pair (by sorted stem) is `val`, the rest `train`.
Masks are single-channel PNGs (mode L, P or I): a palette PNG's pixel values are its class indices, as VOC's are,
and 255 marks pixels to ignore (VOC's object borders). A `classes.txt` (one name per line) names the classes of
any layout. A mask missing, of another size than its image, or with a value ≥ the number of classes other than
255, is an error that names the file, found when the dataset is built (data/checks.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from .checks import check_masks
from .folder import IMAGE_EXTENSIONS, load_image
from .images import BadImageError, open_image, warn_skipped

IGNORE_INDEX = 255
VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")
Pair = tuple[Path, Path]  # (image file, mask file)


class BadMaskError(ValueError):
    """A mask that does not fit its image or the classes."""


def _stems(folder: Path, extensions: tuple[str, ...]) -> dict[str, Path]:
    return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix.lower() in extensions and
            not p.name.startswith(".")}


def _paired(image_dir: Path, mask_dir: Path) -> list[Pair]:
    """Each image with the mask of its stem; an image without one is paired with the path its mask should have,
    for the dataset's check to report (with every other problem) or skip."""
    images, masks = _stems(image_dir, IMAGE_EXTENSIONS), _stems(mask_dir, (".png",))
    if not images:
        raise FileNotFoundError(f"no images in {image_dir} (expected {', '.join(IMAGE_EXTENSIONS)} files)")
    return [(images[stem], masks.get(stem, mask_dir / f"{stem}.png")) for stem in sorted(images)]


def _class_names(root: Path, split: str, default: tuple[str, ...] | None) -> list[str] | None:
    listed = root / "classes.txt"
    if listed.is_file():
        return [line.strip() for line in listed.read_text().splitlines() if line.strip()]
    instances = root / "annotations" / f"instances_{split}.json"
    if instances.is_file():  # make-scenes: mask value = category's rank + 1, 0 the background
        categories = sorted(json.loads(instances.read_text())["categories"], key=lambda c: c["id"])
        return ["background"] + [str(c["name"]) for c in categories]
    return list(default) if default else None


def has_segmentation_split(root: str | Path, split: str) -> bool:
    """Whether the segmentation folder has the split ("train", "val" or "test"), by its layout alone (a split that
    is there but broken is found, and `find_segmentation_split` says what is wrong)."""
    root = Path(root).expanduser()
    if (root / "images" / split).is_dir() and (root / "masks" / split).is_dir():
        return True
    if (root / "JPEGImages").is_dir() and (root / "ImageSets" / "Segmentation" / f"{split}.txt").is_file():
        return True
    flat = (root / "images").is_dir() and (root / "masks").is_dir() and not any(
        (root / "images" / name).is_dir() for name in ("train", "val", "test"))
    return flat and split != "test"


def find_segmentation_split(root: str | Path, split: str) -> tuple[list[Pair], list[str] | None]:
    """The (image, mask) pairs of a split ("train", "val" or "test") of a segmentation folder in any of the layouts
    above, and the class names if the folder says them (None: count them with `count_classes`). A flat images/ +
    masks/ folder has a train and a val split (every tenth pair), no test."""
    root = Path(root).expanduser()
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    if (root / "images" / split).is_dir() and (root / "masks" / split).is_dir():
        return _paired(root / "images" / split, root / "masks" / split), _class_names(root, split, None)
    voc_list = root / "ImageSets" / "Segmentation" / f"{split}.txt"
    if (root / "JPEGImages").is_dir() and (root / "SegmentationClass").is_dir() and voc_list.is_file():
        pairs = []
        for stem in (line.strip() for line in voc_list.read_text().splitlines()):
            if stem:
                # a file missing is the dataset's check to report, with every other problem
                pairs.append((root / "JPEGImages" / f"{stem}.jpg", root / "SegmentationClass" / f"{stem}.png"))
        return pairs, _class_names(root, split, VOC_CLASSES)
    if (root / "images").is_dir() and (root / "masks").is_dir() and split != "test" and not any(
            (root / "images" / name).is_dir() for name in ("train", "val", "test")):
        pairs = _paired(root / "images", root / "masks")
        held_out = [p for i, p in enumerate(pairs) if i % 10 == 9]
        if not held_out:
            raise ValueError(f"{root} has {len(pairs)} pairs, too few to hold every tenth out for val; put them in "
                             f"images/{{train,val}}/ and masks/{{train,val}}/")
        return (held_out if split == "val" else [p for i, p in enumerate(pairs) if i % 10 != 9]), \
            _class_names(root, split, None)
    raise FileNotFoundError(f"{root} is not a segmentation folder: expected images/{split}/ + masks/{split}/, "
                            f"VOC's JPEGImages/ + SegmentationClass/ + ImageSets/Segmentation/{split}.txt, or "
                            f"images/ + masks/; make one with `vitlab make-scenes --out {root}`")


def read_mask(path: Path) -> np.ndarray:
    """A class-index mask file -> (H, W) int64. Palette PNGs give their indices, not their colours. Opened by the
    one image reader (a BadImageError names a missing, damaged or oversized file), but never converted."""
    with open_image(path, hint="replace the mask") as image:
        if image.mode not in ("L", "P", "I", "I;16"):
            raise BadMaskError(f"{path} is a {image.mode} image; a mask must hold one class index per pixel "
                               f"(a single-channel or palette PNG), not colours")
        return np.asarray(image, dtype=np.int64)


def count_classes(pairs: list[Pair]) -> int:
    """The number of classes the masks use: their largest value other than the ignore index, plus one. Masks that
    cannot be read are passed over here: the dataset's check reports them."""
    largest = 0
    for _, mask in pairs:
        try:
            values = read_mask(mask)
        except (BadImageError, BadMaskError):
            continue
        values = values[values != IGNORE_INDEX]
        largest = max(largest, int(values.max()) if values.size else 0)
    return largest + 1


class SegmentationDataset(Dataset):
    """(image, mask) pairs -> (image (C, H, W) float in [0, 1], mask (H, W) int64) after `transforms`, a
    torchvision transforms v2 callable on (tv_tensors.Image, tv_tensors.Mask): the mask moves with the image.

    Every pair is checked when the dataset is built (data/checks.py: a mask missing, unreadable, of another size
    than its image, or with values beyond the classes; an image missing or unreadable): one DataCheckError lists
    them all, unless `skip_bad_annotations` (bad masks) / `skip_bad_images` (bad images; every image is then
    decoded now) leave those pairs out, counted in `num_skipped` and warned about. The length stays fixed."""

    def __init__(self, pairs: list[Pair], num_classes: int, channels: int = 3,
                 transforms: Callable | None = None, skip_bad_images: bool = False,
                 skip_bad_annotations: bool = False, check: bool = True) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes, self.channels, self.transforms = num_classes, channels, transforms
        self.num_skipped = 0
        if check:
            where = f"{Path(pairs[0][0]).parent} with masks in {Path(pairs[0][1]).parent}" if pairs else "no pairs"
            report = check_masks(pairs, num_classes, f"segmentation pairs ({where})", IGNORE_INDEX,
                                 decode_images=skip_bad_images)
            report.raise_unless_skipped(skip_bad_images, skip_bad_annotations)
            if not report.ok:
                dropped = report.dropped("pairs")
                pairs = [pair for index, pair in enumerate(pairs) if index not in dropped]
                self.num_skipped = len(dropped)
                warn_skipped(report.title, report.warning_reasons())
                if not pairs:
                    raise ValueError(f"{report.title}: every pair was left out; fix the data (vitlab check-data "
                                     f"lists the problems)")
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def load(self, index: int) -> tuple[tv_tensors.Image, tv_tensors.Mask]:
        """The pair as stored, checked."""
        image_path, mask_path = self.pairs[index]
        image = TF.to_image(load_image(image_path, self.channels))
        mask = read_mask(mask_path)
        if mask.shape != tuple(image.shape[1:]):
            raise BadMaskError(f"{mask_path} is {mask.shape[1]}×{mask.shape[0]} pixels but its image {image_path} is "
                               f"{image.shape[2]}×{image.shape[1]}; a mask must have its image's size")
        bad = np.unique(mask[(mask >= self.num_classes) & (mask != IGNORE_INDEX)])
        if bad.size:
            raise BadMaskError(f"{mask_path} has values {bad[:5].tolist()}, but there are {self.num_classes} classes "
                               f"(0 … {self.num_classes - 1}, and {IGNORE_INDEX} to ignore); fix the mask or give "
                               f"the right number of classes")
        return tv_tensors.Image(TF.to_dtype(image, torch.float32, scale=True)), \
            tv_tensors.Mask(torch.from_numpy(mask))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.load(index)
        if self.transforms is not None:
            image, mask = self.transforms(image, mask)
        return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor).long()


def segmentation_transforms(train: bool, crop_size: int, scale: tuple[float, float] = (0.5, 2.0),
                            hflip: bool = True, mean: tuple[float, ...] | None = None,
                            std: tuple[float, ...] | None = None) -> v2.Compose:
    """Training (the SETR paper's, from mmseg's recipe): the shorter side resized to crop_size × a random factor in
    `scale`, a random crop_size² crop (padded where the image is smaller: image 0, mask ignored), a horizontal flip.
    Evaluation: the image as it is (sliding-window inference covers any size). Masks are resized by nearest
    neighbour (transforms v2 does so for every Mask). With mean and std the image is normalised last."""
    steps: list[Any] = []
    if train:
        steps += [v2.RandomResize(int(crop_size * scale[0]), int(crop_size * scale[1]) + 1),
                  v2.RandomCrop(crop_size, pad_if_needed=True,
                                fill={tv_tensors.Image: 0.0, tv_tensors.Mask: IGNORE_INDEX})]
        if hflip:
            steps.append(v2.RandomHorizontalFlip(0.5))
    if mean is not None:
        steps.append(v2.Normalize(mean=list(mean), std=list(std)))
    return v2.Compose(steps)


def pad_collate_masks(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """[(image (C, H_i, W_i), mask (H_i, W_i))] -> images (B, C, H, W) zero-padded at the bottom and right, masks
    (B, H, W) padded with IGNORE_INDEX, so padding is neither trained on nor scored."""
    C = batch[0][0].shape[0]
    H = max(image.shape[1] for image, _ in batch)
    W = max(image.shape[2] for image, _ in batch)
    images = torch.zeros(len(batch), C, H, W)
    masks = torch.full((len(batch), H, W), IGNORE_INDEX, dtype=torch.long)
    for i, (image, mask) in enumerate(batch):
        images[i, :, :image.shape[1], :image.shape[2]] = image
        masks[i, :mask.shape[0], :mask.shape[1]] = mask
    return images, masks
