"""Any COCO-format detection set: a folder of images and an instances JSON (a user's COCO, an annotation tool's
export, or `vitlab make-scenes`).

    dataset = CocoDetection("data/scenes/images/train", "data/scenes/annotations/instances_train.json")
    image, target = dataset[0]     # image (C, H, W) float in [0, 1]; target["boxes"] (N, 4) XYXY pixels

- Category ids (any integers, in any order) map to contiguous labels 0 … K-1 by ascending id, and back
  (`label_to_category`, `category_names`), so a model's class index always names a COCO category.
- Crowd annotations (iscrowd=1) are left out, as DETR's training does; boxes that a crop or resize leaves without
  area are dropped. The whole file is checked when the dataset is built (data/checks.py).
- Images of any size, grayscale or RGB, come out with `channels` channels.
- `transforms` is a torchvision transforms v2 callable on (image, target): the boxes are `tv_tensors.BoundingBoxes`,
  so every flip, resize and crop moves them with the image.
- `pad_collate` pads a batch to its largest image and returns the padding mask (B, H, W), True at padded pixels.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from .checks import check_coco, keep_good
from .images import read_image
from .preprocessing import Preprocessing


class CocoDetection(Dataset):
    """A COCO split, checked whole when built (data/checks.py): a bad box, an unknown category or image, a
    duplicate id or an image missing on disk raises one DataCheckError listing every problem, unless
    `skip_bad_annotations` / `skip_bad_images` drop the bad entries (counted in `num_skipped`, and warned about).
    With `skip_bad_images` every image is decoded once now, so that the length stays fixed through the epochs.
    `coco` is the instances dictionary as trained on (the bad entries left out): the ground truth to score."""

    def __init__(self, image_dir: str | Path, annotations: str | Path, channels: int = 3,
                 transforms: Callable | None = None, skip_bad_images: bool = False,
                 skip_bad_annotations: bool = False) -> None:
        self.image_dir, self.channels, self.transforms = Path(image_dir), channels, transforms
        path = Path(annotations)
        self.annotations_file = path
        report, coco = check_coco(self.image_dir, path, decode=skip_bad_images)
        self.check_report = report
        self.num_skipped = report.num_problems
        self.coco = coco = keep_good(report, coco, skip_bad_images, skip_bad_annotations)
        categories = sorted(coco["categories"], key=lambda c: c["id"])
        self.label_to_category = [int(c["id"]) for c in categories]
        self.category_names = [str(c["name"]) for c in categories]
        self.category_to_label = {cid: label for label, cid in enumerate(self.label_to_category)}
        self.images = sorted(coco["images"], key=lambda image: image["id"])
        self.annotations: dict[int, list[dict[str, Any]]] = {image["id"]: [] for image in self.images}
        for ann in coco["annotations"]:
            if not ann.get("iscrowd", 0):
                self.annotations[ann["image_id"]].append(ann)

    @property
    def num_classes(self) -> int:
        return len(self.label_to_category)

    def subset(self, indices: list[int], transforms: Callable | str | None = "same") -> CocoDetection:
        """The images at `indices` (a validation part held out of the training images, the rest for training),
        with their annotations; scoring reads the same annotations file, restricted to these images."""
        part = copy.copy(self)
        part.images = [self.images[i] for i in indices]
        if transforms != "same":
            part.transforms = transforms
        return part

    def __len__(self) -> int:
        return len(self.images)

    def load_image(self, index: int) -> Image.Image:
        return read_image(self.image_dir / self.images[index]["file_name"], self.channels)

    def target(self, index: int, height: int, width: int) -> dict[str, Any]:
        """boxes: (N, 4) XYXY pixels clamped to the image, labels: (N,) contiguous, image_id, orig_size (H, W)."""
        image_id = self.images[index]["id"]
        boxes, labels = [], []
        for ann in self.annotations[image_id]:
            x, y, w, h = (float(v) for v in ann["bbox"])
            x0, y0 = max(0.0, x), max(0.0, y)
            x1, y1 = min(float(width), x + w), min(float(height), y + h)
            if x1 > x0 and y1 > y0:  # a box without area teaches nothing
                boxes.append([x0, y0, x1, y1])
                labels.append(self.category_to_label[ann["category_id"]])
        return {"boxes": tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32).view(-1, 4),
                                                  format="XYXY", canvas_size=(height, width)),
                "labels": torch.tensor(labels, dtype=torch.int64), "image_id": int(image_id),
                "orig_size": torch.tensor([height, width])}

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        pil = self.load_image(index)
        image = TF.to_dtype(TF.to_image(pil), torch.float32, scale=True)  # (C, H, W) in [0, 1]
        target = self.target(index, pil.height, pil.width)
        if self.transforms is not None:
            image, target = self.transforms(image, target)
        return image, target


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def detection_transforms(train: bool, max_size: int | None = None, hflip: bool = True,
                         mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None) -> v2.Compose:
    """Flips (training, with `hflip`) and an optional resize of the longer side to `max_size`; boxes follow, and
    boxes a crop or resize left without area are removed with their labels. With mean and std the image is
    normalised last (DETR's backbones read ImageNet-normalised images)."""
    steps: list[Any] = []
    if train and hflip:
        steps.append(v2.RandomHorizontalFlip(0.5))
    if max_size is not None:
        steps.append(v2.Resize(size=None, max_size=max_size))  # the longer side becomes max_size
    steps.append(v2.SanitizeBoundingBoxes(labels_getter=lambda sample: sample[1]["labels"]))
    if mean is not None:
        steps.append(v2.Normalize(mean=list(mean), std=list(std)))
    return v2.Compose(steps)


def image_transforms(max_size: int | None = None, mean: tuple[float, ...] | None = None,
                     std: tuple[float, ...] | None = None) -> v2.Compose:
    """What `detection_transforms(train=False)` does to an image, for an image without annotations (prediction)."""
    steps: list[Any] = [v2.Resize(size=None, max_size=max_size)] if max_size is not None else []
    if mean is not None:
        steps.append(v2.Normalize(mean=list(mean), std=list(std)))
    return v2.Compose(steps)


def image_preprocessing(max_size: int | None, mean: tuple[float, ...], std: tuple[float, ...]) -> Preprocessing:
    """`image_transforms` as a Preprocessing record (what a detection run records and its inference applies): the
    longer side to `max_size` with torchvision's antialiased bilinear on float pixels, then normalised."""
    return Preprocessing(max_size=max_size, mean=mean, std=std, resampler="float")


def pad_collate(batch: list[tuple[torch.Tensor, dict[str, Any]]]):
    """[(image (C, H_i, W_i), target)] -> images (B, C, H, W) zero-padded at the bottom and right, padding_mask
    (B, H, W) True at padded pixels, and the targets as a list, each given "size" (H_i, W_i): the image's own size
    as the model sees it (after the transforms), which boxes are normalised by."""
    C = batch[0][0].shape[0]
    H = max(image.shape[1] for image, _ in batch)
    W = max(image.shape[2] for image, _ in batch)
    images = torch.zeros(len(batch), C, H, W)
    padding_mask = torch.ones(len(batch), H, W, dtype=torch.bool)
    for i, (image, _) in enumerate(batch):
        h, w = image.shape[1:]
        images[i, :, :h, :w] = image
        padding_mask[i, :h, :w] = False
    return images, padding_mask, [{**target, "size": torch.tensor([h, w])} for (image, target) in batch]


def has_split(root: str | Path, split: str) -> bool:
    """Whether the COCO-format folder has the split ("train", "val" or "test")."""
    try:
        find_split(root, split)
    except FileNotFoundError:
        return False
    return True


def find_split(root: str | Path, split: str) -> tuple[Path, Path]:
    """(image folder, annotations file) of a split ("train", "val" or "test") of a COCO-format folder, in either
    layout:
    `images/{split}/` + `annotations/instances_{split}.json` (vitlab make-scenes, annotation tools), or COCO's own
    `{split}2017/` + `annotations/instances_{split}2017.json`."""
    root = Path(root).expanduser()
    candidates = [(root / "images" / split, root / "annotations" / f"instances_{split}.json"),
                  (root / f"{split}2017", root / "annotations" / f"instances_{split}2017.json"),
                  (root / split, root / "annotations" / f"instances_{split}.json")]
    for image_dir, instances in candidates:
        if image_dir.is_dir() and instances.is_file():
            return image_dir, instances
    tried = "; ".join(f"{i.relative_to(root)}/ + {a.relative_to(root)}" for i, a in candidates)
    raise FileNotFoundError(f"{root} has no COCO-format {split} split (looked for {tried}); make one with "
                            f"`vitlab make-scenes --out {root}` or point --data at a COCO folder")
