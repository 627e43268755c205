"""A finished pretraining run: `vitlab eval RUN` (the reconstruction loss on the hidden patches of its test images,
or its val images where it has none, or of another folder) and `vitlab predict RUN IMAGE... --out DIR` (MAE's
figure for each image: the image, what the encoder saw, the reconstruction with the visible patches pasted in)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision.transforms.v2 import functional as TF

from ...atomic import atomic_write, output_files
from ...data.coco import IMAGENET_MEAN, IMAGENET_STD
from ...data.images import INPUT_HINT, read_image
from ...engine.loaders import EpochDataLoader


def evaluate_run(task, model: nn.Module, saved: dict[str, Any], run_dir: str | Path, data: str | None = None,
                 batch_size: int | None = None, split: str = "test", **_: Any) -> dict[str, Any]:
    """The mean squared error over the hidden patches (masks fixed by the run's --eval-seed) of `split` of the
    run's data, or of `data`'s."""
    if data:
        task.config = dataclasses.replace(task.config, data=str(Path(data).expanduser().resolve()))
    if batch_size:
        task.config = dataclasses.replace(task.config, eval_batch_size=batch_size)
    _, val, test = task.datasets()
    dataset, split = (test, "test") if split == "test" and test is not None else (val, "val")
    start = time.perf_counter()
    result = task.evaluate(model, EpochDataLoader(dataset, task.config.eval_batch_size, pad=False))
    return {"loss": result["loss"], "split": split, "num_images": len(dataset),
            "mask_ratio": model.config.mask_ratio, "images_per_s": len(dataset) / (time.perf_counter() - start),
            "data": str(task.config.data), "run_dir": str(run_dir)}


def format_evaluation(result: dict[str, Any], which: str) -> str:
    return (f"masked image modelling on {result['num_images']} {result['split']} images of {result['data']} "
            f"({result['run_dir']}, {which})\nreconstruction loss {result['loss']:.4f} on the hidden patches "
            f"({result['mask_ratio']:.0%} of each image)")


def _to_pixels(normalised: torch.Tensor) -> np.ndarray:
    """(C, H, W) ImageNet-normalised -> (H, W, C) uint8."""
    mean, std = torch.tensor(IMAGENET_MEAN)[:, None, None], torch.tensor(IMAGENET_STD)[:, None, None]
    return (normalised.cpu() * std + mean).clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy()


@torch.inference_mode()
def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], out: str | None = None,
                  **_: Any) -> list[dict[str, Any]]:
    """Each image resized to the run's size, its patches hidden by a mask drawn from the run's --eval-seed: the
    reconstruction loss; with `out`, NAME_mim.png there: the image | what the encoder saw (hidden patches grey) |
    the reconstruction."""
    model.eval()
    device = next(model.parameters()).device
    size = saved["data"]["img_size"]
    targets = output_files(paths, out, "_mim") if out else [()] * len(paths)
    results = []
    for index, (path, target) in enumerate(zip(paths, targets)):
        picture = read_image(path, 3, hint=INPUT_HINT)
        pixels = TF.to_dtype(TF.to_image(picture), torch.float32, scale=True)
        pixels = TF.resize(pixels, [size, size], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        image = TF.normalize(pixels, list(IMAGENET_MEAN), list(IMAGENET_STD))[None].to(device)
        generator = torch.Generator(device).manual_seed(task.config.eval_seed * 1_000_003 + index)
        output = model(image, generator=generator)
        item: dict[str, Any] = {"input": str(path), "size": [size, size], "loss": round(float(output.loss), 6),
                                "hidden": round(float(output.mask.mean()), 4)}
        if out:
            patches = model.patchify(image)
            seen = model.unpatchify(torch.where(output.mask[..., None].bool(), 0.0, patches),
                                    model.patch_embed.grid_for(size, size))  # 0: the mean colour, grey
            row = np.concatenate([_to_pixels(image[0]), _to_pixels(seen[0]),
                                  _to_pixels(model.reconstruct(image, output)[0])], axis=1)
            Path(out).mkdir(parents=True, exist_ok=True)
            item["output"] = str(target[0])
            atomic_write(Path(item["output"]), lambda f, row=row: Image.fromarray(row).save(f, format="PNG"),
                         mode="wb")
        results.append(item)
    return results


def format_prediction(item: dict[str, Any]) -> str:
    written = f" -> {item['output']}" if "output" in item else ""
    return f"{item['input']}: reconstruction loss {item['loss']:.4f} on {item['hidden']:.0%} hidden{written}"


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    """The run's held-out images (test, else val) to try it on."""
    from ...data.unlabelled import unlabelled_split

    root = saved.get("data", {}).get("path")
    if not root or not Path(root).is_dir():
        return []
    return (unlabelled_split(root, "test") or unlabelled_split(root, "val") or [])[:count]


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`)."""
    return "image-feature-extraction"
