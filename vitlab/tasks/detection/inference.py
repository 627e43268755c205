"""A finished detection run: `vitlab eval RUN` (COCO AP on the val split, or on another COCO-format folder) and
`vitlab predict RUN IMAGE... --out DIR` (each image with its boxes, class names and scores drawn)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn
from torchvision.transforms.v2 import functional as TF
from torchvision.utils import draw_bounding_boxes

from ...atomic import atomic_write, output_files, write_json
from ...data.coco import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    image_preprocessing,
    pad_collate,
)
from ...data.images import INPUT_HINT, read_image
from ...data.preprocessing import Preprocessing
from ...engine.loaders import EpochDataLoader
from ..base import class_names
from ..sources import keeps_results
from .coco_eval import coco_metrics, format_table
from .task import postprocessed

NO_CATEGORY = "N/A"  # a COCO release's unused slots (models/labels.py)


def evaluate_run(task, model: nn.Module, saved: dict[str, Any], run_dir: str | Path, data: str | None = None,
                 batch_size: int | None = None, split: str = "test", **_: Any) -> dict[str, Any]:
    """COCO metrics of the run's model on `split` of its own data (or of `data`, a COCO-format folder with the same
    categories): the test part, or the validation part where the data has none, split as training split it."""
    if data:
        task.config = dataclasses.replace(task.config, data=str(Path(data).expanduser().resolve()))
    if "source" in saved:  # a model by name, on the user's folder: its categories matched by name
        dataset, split = _named_split(task, saved, split)
        label_to_category = _categories_by_name(class_names(model, saved), dataset, saved["source"])
    else:
        _, val, test = task.datasets(train_transforms=False)
        dataset, split = (test, "test") if split == "test" and test is not None else (val, "val")
        if dataset.category_names != saved["data"]["classes"]:
            raise ValueError(f"{dataset.annotations_file} names the categories {dataset.category_names}, the run was "
                             f"trained on {saved['data']['classes']}; evaluate on data with the run's categories")
        label_to_category = None
    loader = EpochDataLoader(dataset, batch_size or task.config.eval_batch_size, pad=False, collate_fn=pad_collate)
    start = time.perf_counter()
    detections = task.detect(model, loader, label_to_category)  # category ids: the annotation file's own
    seconds = time.perf_counter() - start
    metrics = coco_metrics(dataset.coco, detections, image_ids=[image["id"] for image in dataset.images],
                           per_class=True)
    result = {**metrics, "num_detections": len(detections), "split": split, "num_images": len(dataset),
              "images_per_s": len(dataset) / seconds, "data": str(task.config.data), "run_dir": str(run_dir)}
    if keeps_results(run_dir):  # the detections as pycocotools' loadRes reads them (into a run's own folder)
        path = Path(run_dir) / (f"coco-results-{split}.json" if data is None else
                                f"coco-results-{split}-other-data.json")
        write_json(path, detections)
        result["results_file"] = str(path)
    return result


def _named_split(task, saved: dict[str, Any], split: str):
    """The `split` part of the folder --data names (its val part where it has no test part), each image put through
    the named model's own preprocessing (the release's or the file's)."""
    from ...data.coco import CocoDetection, find_split, has_split

    folder = task.config.data
    found = split if has_split(folder, split) else "val"
    preprocessing = _preprocessing(task, saved)

    def transforms(image: torch.Tensor, target: dict[str, Any]):  # image: (3, H, W) in [0, 1], from uint8
        return preprocessing((image * 255).round().to(torch.uint8)), target

    return CocoDetection(*find_split(folder, found), channels=3, transforms=transforms), found


def _categories_by_name(classes: list[str], dataset, source: str) -> list[int | None]:
    """For each of a named model's classes, the id the annotation file gives the category of that name (None: not
    one of the file's categories, and never reported); a category of the file the model does not know is refused."""
    unknown = [name for name in dataset.category_names if name not in classes]
    if unknown:
        raise ValueError(f"{source} does not know {len(unknown)} of the categories of {dataset.annotations_file}: "
                         f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}; it detects "
                         f"{', '.join(c for c in classes[:10] if c != NO_CATEGORY)} ...; fine-tune it on this data "
                         f"(vitlab train --weights {source} --data ...), which keeps the heads of the categories it "
                         f"knows")
    by_name = dict(zip(dataset.category_names, dataset.label_to_category))
    return [by_name.get(name) for name in classes]


def format_evaluation(result: dict[str, Any], which: str) -> str:
    return (f"COCO box metrics on {result['num_images']} {result.get('split', 'val')} images of {result['data']} "
            f"({result['run_dir']}, {which})\n"
            + format_table(result))


def record_for(task, model: nn.Module, preprocessing) -> dict[str, Any]:
    """What a detection run records of its data, for a model without a run (a release, a hub model): its classes
    (the model's labels, by index; their indices where it has none), whose category ids are those indices (a COCO
    release's 91 slots are COCO's ids), and its preprocessing (the release's or the file's; else the task's own)."""
    from ...models.family import family_config

    config = family_config(model)
    classes = list(config.labels) or [str(i) for i in range(config.fact("classes"))]
    preprocessing = preprocessing or image_preprocessing(task.config.max_size, IMAGENET_MEAN, IMAGENET_STD)
    return {"classes": classes, "category_ids": list(range(len(classes))), "mean": list(preprocessing.mean),
            "std": list(preprocessing.std), "preprocessing": preprocessing.to_dict()}


def _preprocessing(task, saved: dict[str, Any]) -> Preprocessing:
    """The record's preprocessing; a run's from before runs recorded it is its evaluation transform."""
    if saved["data"].get("preprocessing"):
        return Preprocessing.from_dict(saved["data"]["preprocessing"])
    return image_preprocessing(task.config.max_size, IMAGENET_MEAN, IMAGENET_STD)


@torch.inference_mode()
def predict_images(task, model: nn.Module, saved: dict[str, Any], images: list, threshold: float = 0.5,
                   batch_size: int = 8) -> list[dict[str, torch.Tensor]]:
    """Detections of each image (PIL) above `threshold`, boxes in its own pixels: per image {"scores", "labels",
    "boxes" (x0, y0, x1, y1)} as tensors. Images that preprocess to the same size go through together."""
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"--threshold must be in [0, 1), got {threshold}")
    preprocessing = _preprocessing(task, saved)
    model.eval()
    device = next(model.parameters()).device
    inputs = [preprocessing(picture) for picture in images]  # (3, H_i, W_i) each
    found: list[dict[str, torch.Tensor] | None] = [None] * len(images)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(inputs):
        by_shape.setdefault(tuple(x.shape), []).append(i)
    for indices in by_shape.values():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start:start + batch_size]
            outputs = model(torch.stack([inputs[i] for i in chunk]).to(device))
            sizes = torch.tensor([[images[i].height, images[i].width] for i in chunk])
            for i, detections in zip(chunk, postprocessed(model, outputs, sizes, threshold)):
                found[i] = detections
    return found  # type: ignore[return-value]


def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], out: str | None = None,
                  threshold: float = 0.5, **_: Any) -> list[dict[str, Any]]:
    """Detections of each image above `threshold`: label, category id, score, box (x0, y0, x1, y1) in the image's
    pixels; with `out`, the image with its boxes drawn is written there as NAME.png."""
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no image at {path}")
    targets = output_files(paths, out) if out else [()] * len(paths)
    pictures = [read_image(path, 3, hint=INPUT_HINT) for path in paths]  # checked, decoded, upright
    results = []
    for path, picture, found, target in zip(paths, pictures, predict_images(task, model, saved, pictures, threshold),
                                            targets):
        detections = [{**d, "score": round(d["score"], 4), "box": [round(v, 1) for v in d["box"]]}
                      for d in named_detections(model, saved, found)]
        item: dict[str, Any] = {"input": str(path), "detections": detections}
        if out:
            pixels = TF.to_dtype(TF.to_image(picture), torch.float32, scale=True)
            item["output"] = str(draw(pixels, found, class_names(model, saved), *target))
        results.append(item)
    return results


def named_detections(model: nn.Module, saved: dict[str, Any], found: dict[str, torch.Tensor]
                     ) -> list[dict[str, Any]]:
    """One image's detections (`predict_images`) as plain Python, and as `vitlab.pipeline` gives them: [{"label",
    "category_id", "score", "box": [x0, y0, x1, y1]}], the box in the image's own pixels."""
    classes, category_ids = class_names(model, saved), saved["data"]["category_ids"]
    return [{"label": classes[label], "category_id": category_ids[label], "score": score, "box": box}
            for label, score, box in zip(found["labels"].tolist(), found["scores"].tolist(), found["boxes"].tolist())]


pipeline_answer = named_detections


def draw(pixels: torch.Tensor, found: dict[str, torch.Tensor], classes: list[str], path: Path,
         min_side: int = 384) -> Path:
    """The image (3, H, W) in [0, 1] with each detection's box and "class score" drawn, enlarged (nearest
    neighbour) to at least `min_side` pixels so that small images stay legible; written atomically as PNG."""
    scale = max(1, -(-min_side // max(pixels.shape[1:])))
    image = (pixels * 255).round().to(torch.uint8)
    image = image.repeat_interleave(scale, 1).repeat_interleave(scale, 2)  # (3, H·s, W·s)
    labels = [f"{classes[label]} {score:.2f}" for label, score in zip(found["labels"].tolist(),
                                                                      found["scores"].tolist())]
    palette = ["#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#46f0f0", "#f032e6", "#bcf60c",
               "#fabebe"]
    colors = [palette[label % len(palette)] for label in found["labels"].tolist()]
    if len(labels):
        image = draw_bounding_boxes(image, found["boxes"].cpu() * scale, labels=labels, colors=colors, width=2)
    picture = Image.fromarray(image.permute(1, 2, 0).numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: picture.save(f, format="PNG"), mode="wb")
    return path


def format_prediction(item: dict[str, Any]) -> str:
    found = ", ".join(f"{d['label']} {d['score']:.2f} at ({', '.join(f'{v:.0f}' for v in d['box'])})"
                      for d in item["detections"]) or "nothing above the threshold"
    drawn = f" -> {item['output']}" if "output" in item else ""
    return f"{item['input']}: {found}{drawn}"


# ---- the server ----------------------------------------------------------------------------------------------------
def answer(task, model: nn.Module, saved: dict[str, Any], image: Path, folder: Path, context: dict[str, Any],
           threshold: float = 0.5) -> dict[str, Any]:
    item = predict_files(task, model, saved, [str(image)], out=str(folder / "out"), threshold=threshold)[0]
    return {"threshold": threshold, "detections": item["detections"], "image_png": Path(item["output"])}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    """The images of the run's own folder: its val split first (never scored as test there)."""
    from ..base import IMAGE_SUFFIXES

    data = saved.get("data", {})
    if not data.get("path"):
        return []
    folder = Path(data["path"]) / "images"
    for split in ("val", "test", "train"):
        found = sorted(p for p in (folder / split).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        if found:
            return found[:count]
    return []


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`)."""
    return "object-detection"
