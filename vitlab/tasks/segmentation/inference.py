"""A finished segmentation run: `vitlab eval RUN` (per-class IoU, mIoU and pixel accuracy on the val split, or on
another folder with the run's classes) and `vitlab predict RUN IMAGE... --out DIR` (each image's class mask as a
palette PNG, whose pixel values are the class indices, and an overlay of its colours on the image)."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from ...atomic import atomic_write, output_files
from ...data.coco import IMAGENET_MEAN, IMAGENET_STD
from ...data.images import INPUT_HINT, read_image
from ...data.preprocessing import Preprocessing
from ...data.segmentation import (
    pad_collate_masks,
)
from ...engine.loaders import EpochDataLoader
from .metrics import scores
from .sliding import sliding_window_logits


def evaluate_run(task, model: nn.Module, saved: dict[str, Any], run_dir: str | Path, data: str | None = None,
                 batch_size: int | None = None, split: str = "test", **_: Any) -> dict[str, Any]:
    """mIoU, pixel accuracy and each class's IoU (None where a class is neither present nor predicted) of the run's
    model on `split` of its own data, or of `data`: the test part, or the validation part where there is none,
    split as training split it."""
    if data:
        task.config = dataclasses.replace(task.config, data=str(Path(data).expanduser().resolve()))
    classes = saved["data"]["classes"]
    task.config = dataclasses.replace(task.config, num_classes=len(classes))
    _, val, test = task.datasets(train_transforms=False)
    dataset, split = (test, "test") if split == "test" and test is not None else (val, "val")
    if task.class_names != classes:
        raise ValueError(f"{task.config.data} names the classes {task.class_names}, the run was trained on "
                         f"{classes}; evaluate on data with the run's classes")
    if batch_size:
        task.config = dataclasses.replace(task.config, eval_batch_size=batch_size)
    loader = EpochDataLoader(dataset, task.config.eval_batch_size, pad=False, collate_fn=pad_collate_masks)
    start = time.perf_counter()
    result = scores(task.confusion(model, loader, len(classes)))
    per_class = {name: (None if math.isnan(v) else v) for name, v in zip(classes, result["iou_per_class"])}
    return {"miou": result["miou"], "pixel_acc": result["pixel_acc"], "iou_per_class": per_class, "split": split,
            "num_images": len(dataset), "images_per_s": len(dataset) / (time.perf_counter() - start),
            "data": str(task.config.data), "run_dir": str(run_dir)}


def format_evaluation(result: dict[str, Any], which: str) -> str:
    lines = [f"segmentation on {result['num_images']} {result.get('split', 'val')} images of {result['data']} "
             f"({result['run_dir']}, {which})",
             f"mIoU {result['miou']:.4f}   pixel accuracy {result['pixel_acc']:.4f}", "class IoU:"]
    width = max(len(name) for name in result["iou_per_class"])
    lines += [f"  {name:<{width}}  {'—' if iou is None else f'{iou:.4f}'}"
              for name, iou in result["iou_per_class"].items()]
    return "\n".join(lines)


def palette(num_classes: int) -> np.ndarray:
    """(num_classes, 3) uint8 colours: Pascal VOC's colour map (the bits of the index spread over R, G and B), so
    that VOC masks and vitlab's look the same; class 0 black."""
    colours = np.zeros((max(num_classes, 256), 3), dtype=np.uint8)
    for index in range(len(colours)):
        value, r, g, b = index, 0, 0, 0
        for bit in range(8):
            r |= ((value >> 0) & 1) << (7 - bit)
            g |= ((value >> 1) & 1) << (7 - bit)
            b |= ((value >> 2) & 1) << (7 - bit)
            value >>= 3
        colours[index] = (r, g, b)
    return colours


def record_for(task, model: nn.Module, preprocessing) -> dict[str, Any]:
    """What a segmentation run records of its data, for a model without a run (a release, a file): its classes (the
    model's labels; their indices where it has none), the crop its sliding windows take (the model's input size)
    and its preprocessing (the release's, as its authors' test pipeline resized; else the image at its own size,
    normalised with ImageNet's mean and std, as a run reads it)."""
    from ...models.family import family_config

    config = family_config(model)
    classes = list(config.labels) or [str(i) for i in range(config.fact("classes"))]
    size = config.fact("image_size")
    preprocessing = preprocessing or Preprocessing(mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return {"classes": classes, "crop_size": size if isinstance(size, int) else size[0],
            "preprocessing": preprocessing.to_dict()}


@torch.inference_mode()
def predict_images(task, model: nn.Module, saved: dict[str, Any], images: list) -> list[np.ndarray]:
    """Each image's class per pixel, (H, W) uint8 at the image's own size: the image preprocessed as the record says
    (a run's: as it is, normalised), sliding windows at the record's crop, and the class scores resized back to the
    image's size (bilinear, as mmsegmentation's test does) before each pixel takes its best class."""
    model.eval()
    device = next(model.parameters()).device
    crop = saved["data"]["crop_size"]
    stride = task.config.stride or max(1, crop * 2 // 3)
    recorded = saved["data"].get("preprocessing")
    preprocessing = (Preprocessing.from_dict(recorded) if recorded
                     else Preprocessing(mean=IMAGENET_MEAN, std=IMAGENET_STD))
    masks = []
    for picture in images:
        image = preprocessing(picture.convert("RGB"))  # (3, h, w): the image's own size unless the record resizes
        logits = sliding_window_logits(model, image[None].to(device), crop, stride, task.config.eval_batch_size,
                                       task.config.blend)
        if logits.shape[-2:] != (picture.height, picture.width):
            logits = F.interpolate(logits, size=(picture.height, picture.width), mode="bilinear",
                                   align_corners=False)
        masks.append(logits.argmax(1)[0].cpu().numpy().astype(np.uint8))
    return masks


def pipeline_answer(model: nn.Module, saved: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """One image's answer as `vitlab.pipeline` gives it: the mask (a PIL image whose pixel values are class
    indices), the name of each index, and the share of the image each class present covers."""
    classes = saved["data"]["classes"]
    counts = np.bincount(mask.ravel(), minlength=len(classes))
    return {"mask": Image.fromarray(mask, mode="L"), "labels": dict(enumerate(classes)),
            "areas": {classes[i]: float(c) / mask.size for i, c in enumerate(counts) if c}}


def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], out: str | None = None,
                  **_: Any) -> list[dict[str, Any]]:
    """Each image's per-pixel classes (sliding windows at the run's crop size): the share of the image each class
    covers; with `out`, NAME_mask.png (a palette PNG: pixel value = class index) and NAME_overlay.png there."""
    classes = saved["data"]["classes"]
    colours = palette(len(classes))
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no image at {path}")
    targets = output_files(paths, out, "_mask", "_overlay") if out else [()] * len(paths)
    pictures = [read_image(path, 3, hint=INPUT_HINT) for path in paths]
    results = []
    for path, picture, mask, target in zip(paths, pictures, predict_images(task, model, saved, pictures), targets):
        counts = np.bincount(mask.ravel(), minlength=len(classes))
        item: dict[str, Any] = {"input": str(path), "size": list(mask.shape),
                                "classes": {classes[i]: round(float(c) / mask.size, 4) for i, c in enumerate(counts)
                                            if c}}
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            indexed = Image.fromarray(mask, mode="P")
            indexed.putpalette(colours.ravel().tolist())
            pixels = np.asarray(picture, dtype=np.float64)
            overlay = (0.5 * pixels + 0.5 * colours[mask]).round().astype(np.uint8)
            item["mask"], item["overlay"] = map(str, target)
            for target, shown in ((item["mask"], indexed), (item["overlay"], Image.fromarray(overlay))):
                atomic_write(Path(target), lambda f, shown=shown: shown.save(f, format="PNG"), mode="wb")
        results.append(item)
    return results


def format_prediction(item: dict[str, Any]) -> str:
    found = ", ".join(f"{name} {share:.1%}" for name, share in sorted(item["classes"].items(), key=lambda kv: -kv[1]))
    written = f" -> {item['mask']}, {item['overlay']}" if "mask" in item else ""
    return f"{item['input']}: {found}{written}"


# ---- the server ----------------------------------------------------------------------------------------------------
def answer(task, model: nn.Module, saved: dict[str, Any], image: Path, folder: Path, context: dict[str, Any]
           ) -> dict[str, Any]:
    item = predict_files(task, model, saved, [str(image)], out=str(folder / "out"))[0]
    classes = list(saved.get("data", {}).get("classes", []))
    colours = palette(len(classes))
    legend = [{"index": i, "class": name, "color": "#{:02x}{:02x}{:02x}".format(*colours[i])}
              for i, name in enumerate(classes)]
    return {"size": item["size"], "classes": item["classes"], "legend": legend, "mask_png": Path(item["mask"]),
            "overlay_png": Path(item["overlay"])}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    from ..detection.inference import examples as images_of_a_folder

    return images_of_a_folder(saved, count)


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`)."""
    return "image-segmentation"
