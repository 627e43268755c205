"""Scenes: a detection and segmentation set made of real Fashion-MNIST items pasted onto a canvas.

Each scene is a `size`×`size` grayscale canvas holding 1–6 items (train items in train scenes; test items in val
and test scenes, the even-numbered ones in val and the odd-numbered in test, so no garment is in both), each
rescaled to 16–64 px and placed with light overlap: a new item's box overlaps every earlier box by an IoU of at
most 0.3, and every item keeps at least half of its pixels visible. An item's pixels are its non-zero
pixels; a later item covers an earlier one where they meet. For each item the annotations record

    bbox          the tight extent (x, y, w, h) of its visible pixels, in pixels (COCO's convention)
    segmentation  its visible pixels, as COCO's uncompressed RLE (column-major run lengths, starting with 0s)
    area          the number of its visible pixels
    category_id   its Fashion-MNIST class + 1 (COCO ids start at 1), named in `categories`

    DIR/images/{train,val,test}/NNNNNN.png          the scenes (8-bit grayscale)
    DIR/masks/{train,val,test}/NNNNNN.png           semantic masks: 0 background, class + 1 on each item's pixels
    DIR/annotations/instances_{train,val,test}.json COCO-format instances

val selects a model's best checkpoint, test is scored once at the end.

The same arguments give the same bytes: every draw comes from one `random.Random` seeded by (seed, split).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..atomic import write_json
from .fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist

SPLITS = {"train": "train", "val": "test", "test": "test"}  # scene split -> the Fashion-MNIST split of its items
ITEMS = {"train": slice(None), "val": slice(0, None, 2), "test": slice(1, None, 2)}  # which of those items
MAX_IOU = 0.3  # light overlap: a new box may overlap each earlier one up to this IoU
MIN_VISIBLE = 0.5  # every item keeps at least this share of its pixels
TRIES = 20  # placements tried per item before it is left out


@dataclass(frozen=True)
class SceneOptions:
    train: int = 4000  # train scenes
    val: int = 500  # val scenes
    test: int = 500  # test scenes
    size: int = 128  # canvas side, pixels
    objects: tuple[int, int] = (1, 6)  # items per scene, drawn uniformly in [min, max]
    scale: tuple[int, int] = (16, 64)  # an item's side after rescaling, pixels
    seed: int = 0
    classes: tuple[int, ...] = tuple(range(10))  # the Fashion-MNIST classes drawn, in the order of their new ids

    def __post_init__(self) -> None:
        low, high = self.objects
        if not 1 <= low <= high:
            raise ValueError(f"objects must be a range MIN-MAX with 1 <= MIN <= MAX, got {low}-{high}")
        if not 1 <= self.scale[0] <= self.scale[1] <= self.size:
            raise ValueError(f"item sizes {self.scale[0]}-{self.scale[1]} px must fit the {self.size} px canvas; "
                             f"give a size of at least {self.scale[1]}")
        if not self.classes or len(set(self.classes)) != len(self.classes) or \
                not all(0 <= c < len(FASHION_MNIST_CLASSES) for c in self.classes):
            raise ValueError(f"classes must be distinct Fashion-MNIST class numbers 0-9, got {self.classes}")
        if self.train < 0 or self.val < 0 or self.test < 0:
            raise ValueError(f"the scene counts must be 0 or more, got train={self.train}, val={self.val}, "
                             f"test={self.test}")


def box_iou(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """IoU of two (x0, y0, x1, y1) boxes, corners exclusive at x1, y1."""
    w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union else 0.0


def rle_encode(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of a (H, W) bool mask: run lengths in column-major order, the first run of 0s."""
    flat = mask.T.reshape(-1).astype(np.uint8)  # column-major, as COCO counts
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        counts = [0, *counts]  # COCO's runs start with the 0s
    return {"counts": counts, "size": [int(mask.shape[0]), int(mask.shape[1])]}


def rle_decode(rle: dict[str, Any]) -> np.ndarray:
    """The (H, W) bool mask of an uncompressed RLE."""
    H, W = rle["size"]
    values = np.zeros(H * W, dtype=bool)
    position, value = 0, False
    for count in rle["counts"]:
        values[position:position + count] = value
        position, value = position + count, not value
    return values.reshape(W, H).T


def _rescaled(item: np.ndarray, side: int) -> np.ndarray:
    """A 28×28 uint8 item resized to side×side (bilinear): (side, side) uint8."""
    return np.asarray(Image.fromarray(item).resize((side, side), Image.BILINEAR))


def _scene(rng: random.Random, images: np.ndarray, labels: np.ndarray, options: SceneOptions):
    """One canvas (size, size) uint8 and its items: [(label, visible mask (size, size) bool, source index)]."""
    S = options.size
    canvas = np.zeros((S, S), dtype=np.uint8)
    owner = np.full((S, S), -1, dtype=np.int64)  # which item each pixel shows, -1 background
    items: list[dict[str, Any]] = []
    for _ in range(rng.randint(*options.objects)):
        index = rng.randrange(len(images))
        side = rng.randint(*options.scale)
        pixels = _rescaled(images[index], side)
        shape = pixels > 0
        for _ in range(TRIES):
            x, y = rng.randint(0, S - side), rng.randint(0, S - side)
            box = (x, y, x + side, y + side)
            if any(box_iou(box, other["box"]) > MAX_IOU for other in items):
                continue
            trial = owner.copy()
            trial[y:y + side, x:x + side][shape] = len(items)
            if all((trial == i).sum() >= MIN_VISIBLE * other["pixels"] for i, other in enumerate(items)):
                owner = trial
                canvas[y:y + side, x:x + side][shape] = pixels[shape]
                items.append({"box": box, "pixels": int(shape.sum()), "label": int(labels[index]),
                              "index": index})
                break
    return canvas, [(item["label"], owner == i, item["index"]) for i, item in enumerate(items)]


def make_split(out: Path, split: str, count: int, images: np.ndarray, labels: np.ndarray,
               options: SceneOptions, origin: np.ndarray | None = None) -> dict[str, Any]:
    """Write `count` scenes of `split` under `out` and return their COCO dictionary; `origin[i]`: the index in its
    Fashion-MNIST split of item i of `images` (default: i)."""
    rng = random.Random(f"scenes-{options.seed}-{split}")
    image_dir, mask_dir = out / "images" / split, out / "masks" / split
    image_dir.mkdir(parents=True, exist_ok=True)
    mask_dir.mkdir(parents=True, exist_ok=True)
    coco_images, annotations = [], []
    new_id = {fashion_class: i + 1 for i, fashion_class in enumerate(options.classes)}  # 0 is background
    for image_id in range(count):
        canvas, items = _scene(rng, images, labels, options)
        semantic = np.zeros_like(canvas)
        name = f"{image_id:06d}.png"
        for label, visible, index in items:
            semantic[visible] = new_id[label]
            rows, cols = np.flatnonzero(visible.any(1)), np.flatnonzero(visible.any(0))
            x, y = int(cols[0]), int(rows[0])
            annotations.append({
                "id": len(annotations) + 1, "image_id": image_id + 1, "category_id": new_id[label],
                "bbox": [x, y, int(cols[-1]) - x + 1, int(rows[-1]) - y + 1], "area": int(visible.sum()),
                "iscrowd": 0, "segmentation": rle_encode(visible),
                # where the item came from
                "fashion_mnist": {"split": SPLITS[split], "index": int(index if origin is None else origin[index])},
            })
        Image.fromarray(canvas, mode="L").save(image_dir / name)
        Image.fromarray(semantic, mode="L").save(mask_dir / name)
        coco_images.append({"id": image_id + 1, "file_name": name, "width": options.size, "height": options.size})
    return {
        "info": {"description": f"vitlab scenes ({split}): Fashion-MNIST {SPLITS[split]} items on a canvas",
                 "options": options_record(options)},
        "images": coco_images, "annotations": annotations,
        "categories": [{"id": i, "name": FASHION_MNIST_CLASSES[c]} for c, i in new_id.items()],
    }


def options_record(options: SceneOptions) -> dict[str, Any]:
    """The options as each split's annotation file records them (under info.options), as JSON reads them back."""
    return {**options.__dict__, "objects": list(options.objects), "scale": list(options.scale),
            "classes": list(options.classes)}


def check_out_folder(out: Path, options: SceneOptions) -> None:
    """Refuse, before anything is written, a folder that holds another set: a split made with other options (its
    annotation file says which), or scene images that no finished make-scenes left (a stopped one, or another set's).
    The same options again are welcome: they give the same bytes."""
    for split in ("train", "val", "test"):
        annotation = out / "annotations" / f"instances_{split}.json"
        if annotation.is_file():
            try:
                made = json.loads(annotation.read_text()).get("info", {}).get("options")
            except (OSError, ValueError, AttributeError):
                made = None
            if made != options_record(options):
                raise ValueError(f"{out} holds a {split} set made otherwise ({annotation}: {made}); the new scenes "
                                 f"would be mixed with it. Give another --out, or delete {out} first")
        elif any(any((out / kind / split).glob("*")) for kind in ("images", "masks") if (out / kind / split).is_dir()):
            raise ValueError(f"{out} holds {split} images or masks but no {annotation.name}: a make-scenes that was "
                             f"stopped, or another set. Delete {out / 'images' / split} and {out / 'masks' / split}, "
                             f"or give another --out")


def make_scenes(out: str | Path, options: SceneOptions | None = None, data_dir: str | None = None,
                allow_partial_data: bool = False) -> dict[str, int]:
    """Write the scenes set to `out` (see the module docstring); returns the number of scenes and items per split.
    A folder holding another set is refused (`check_out_folder`); the same set is written again, each split's
    annotation file removed first, so that a folder whose annotation file exists holds all of its images."""
    options = options or SceneOptions()
    out = Path(out)
    check_out_folder(out, options)
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, count in (("train", options.train), ("val", options.val), ("test", options.test)):
        if count == 0 and split != "train":
            continue  # no such split, rather than an empty one
        (out / "annotations" / f"instances_{split}.json").unlink(missing_ok=True)
        images, labels = load_fashion_mnist(SPLITS[split], data_dir, strict_counts=not allow_partial_data)
        origin = np.arange(len(images))[ITEMS[split]]
        origin = origin[np.isin(labels.numpy()[origin], options.classes)]  # the items of the classes asked for
        coco = make_split(out, split, count, images.numpy()[origin], labels.numpy()[origin], options, origin)
        # written last, atomically: a folder whose JSON exists holds all of its images
        write_json(out / "annotations" / f"instances_{split}.json", coco)
        counts[split] = len(coco["images"])
        counts[f"{split}_objects"] = len(coco["annotations"])
    return counts

