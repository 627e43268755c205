"""A finished restoration run: `vitlab eval RUN` (per degradation: Y-PSNR, Y-SSIM and RGB PSNR of the run's model
and of doing nothing, on the run's test photographs or on any HR folder, optionally with its given LR images) and
`vitlab restore RUN IMAGE... --degradation NAME --out DIR` (each image restored tile by tile, at any size)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from ...atomic import atomic_write, output_files
from ...data.degradations import baseline, scale_of
from ...data.photos import skimage_photos
from ...data.restoration import RestorationPairs, image_files, load_photos, paired_files, to_tensor
from ...layers.tiling import BLEND
from .metrics import quantize, restoration_scores
from .task import METRICS, find_photographs


class GivenPairs(torch.utils.data.Dataset):
    """(lq, hq, name) from HR files and their given LR files (DIV2K's LR_bicubic/X2, Set5's LR), floats in
    [0, 1]; each HR image cropped to a multiple of the scale, as the LR images were made."""

    def __init__(self, pairs: list[tuple[Path, Path]], scale: int) -> None:
        self.pairs, self.scale = pairs, scale

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int):
        hr_path, lr_path = self.pairs[index]
        hr, lr = load_photos([hr_path], halve_first=False)[0], load_photos([lr_path], halve_first=False)[0]
        h, w = lr.shape[-2:]
        if hr.shape[-2] < h * self.scale or hr.shape[-1] < w * self.scale:
            raise ValueError(f"{lr_path} ({h}×{w}) is not {hr_path} ({tuple(hr.shape[-2:])}) downscaled ×{self.scale}")
        return lr.float() / 255, hr[:, :h * self.scale, :w * self.scale].float() / 255, hr_path.stem


def evaluation_images(task, saved: dict[str, Any], data: str | None, split: str = "test"
                      ) -> tuple[list[torch.Tensor], list[str], str]:
    """The images to evaluate on: the run's own test photographs (or validation ones: `split`, or where it has no
    test part), `skimage` (scikit-image's five colour photographs), fetch-photos' folder (its test split) or a
    folder with test/ or val/, or an HR folder."""
    if data is None:
        record = saved["data"]
        if split == "test" and record.get("test"):
            halve, files, which = task.config.halve and not task.config.eval_data, record["test"], "test"
        else:
            halve, files, which = task.config.halve, record.get("val", []), "validation"
        return load_photos(files, halve_first=halve), [Path(p).stem for p in files], f"the run's {which} photographs"
    if data == "skimage":
        photos = skimage_photos()
        return [to_tensor(array) for array in photos.values()], list(photos), "scikit-image's photographs"
    plain, val, test = find_photographs(data)
    test = test if test is not None and (split == "test" or val is None) else val
    if test is not None:  # a photograph collection: its held-out split, read as training read it
        return load_photos(test, halve_first=task.config.halve), [Path(p).stem for p in test], str(data)
    return load_photos(plain, halve_first=False), [p.stem for p in plain], str(data)  # an HR folder, as it is


def evaluate_run(task, model: nn.Module, saved: dict[str, Any], run_dir: str | Path, data: str | None = None,
                 lr: str | None = None, degradations: list[str] | None = None, crop: int | None = None,
                 batch_size: int | None = None, split: str = "test", **_: Any) -> dict[str, Any]:
    """Per degradation, the mean Y-PSNR, Y-SSIM and RGB PSNR of the model and of the input (bicubic for SR, the
    degraded image itself otherwise) over the images. `lr`: an LR folder whose images replace the bicubic
    downscaling (one SR degradation)."""
    names = list(degradations or model.degradations)
    for name in names:
        model.task_index(name)  # says which tasks the run knows
    if batch_size:
        task.config = dataclasses.replace(task.config, eval_batch_size=batch_size)
    start = time.perf_counter()
    if lr:
        if len(names) != 1 or scale_of(names[0]) == 1:
            raise ValueError(f"--lr gives LR images of one scale: name that SR task with --degradation (the run has "
                             f"{', '.join(model.degradations)})")
        if not data:
            raise ValueError("--lr needs --data: the HR folder its images pair with")
        sets = {names[0]: GivenPairs(paired_files(data, lr, scale_of(names[0])), scale_of(names[0]))}
        source, count = f"{data} with LR images from {lr}", len(sets[names[0]])
    else:
        images, stems, source = evaluation_images(task, saved, data, split)
        size = task.config.eval_crop if crop is None else crop
        sets = {name: RestorationPairs(images, name, size or None, task.config.eval_seed, stems) for name in names}
        count = len(images)
    per_task = task.scores(model, sets, with_input=True)
    return {"degradations": per_task, "num_images": count, "data": source, "run_dir": str(run_dir),
            "crop": None if lr else (size or None), "seconds": time.perf_counter() - start,
            "metrics": "Y channel (ITU-R BT.601 luma of the 8-bit output), a border of the scale shaved; RGB PSNR "
                       "on all channels, same border"}


def format_evaluation(result: dict[str, Any], which: str) -> str:
    crop = f", centres of {result['crop']} px" if result.get("crop") else ""
    lines = [f"restoration on {result['num_images']} images ({result['data']}{crop}; {result['run_dir']}, {which})",
             f"{'degradation':<12} {'PSNR-Y':>8} {'SSIM-Y':>8} {'PSNR-RGB':>9}   {'input PSNR-Y':>12} "
             f"{'input SSIM-Y':>12}"]
    for name, scores in result["degradations"].items():
        lines.append(f"{name:<12} {scores['psnr_y']:>8.2f} {scores['ssim_y']:>8.4f} {scores['psnr_rgb']:>9.2f}   "
                     f"{scores['input_psnr_y']:>12.2f} {scores['input_ssim_y']:>12.4f}")
    lines.append(f"input: bicubic upscaling for SR, the degraded image itself otherwise. {result['metrics']}.")
    return "\n".join(lines)


@torch.inference_mode()
def restore_image(model: nn.Module, image: torch.Tensor, degradation: str, overlap: int = 12,
                  batch_size: int = 64, blend: str = BLEND) -> torch.Tensor:
    """(3, H, W) uint8 -> (3, H·s, W·s) uint8, through the model's tiled inference."""
    device = next(model.parameters()).device
    out = model.forward_chop(image[None].float().div(255).to(device), degradation, overlap, batch_size,
                             blend=blend)
    return quantize(out[0].cpu()).to(torch.uint8)


def predict_images(task, model: nn.Module, saved: dict[str, Any], images: list[Image.Image],
                   degradation: str | None = None) -> list[torch.Tensor]:
    """Each picture restored by `degradation` (a head of the model, by name; default its first): (3, H·s, W·s)
    uint8, tile by tile as `vitlab restore` does."""
    model.eval()
    name = degradation or model.degradations[0]
    model.task_index(name)  # an unknown degradation is refused, naming the model's
    return [restore_image(model, to_tensor(picture.convert("RGB")), name, task.config.overlap,
                          task.config.eval_batch_size, task.config.blend) for picture in images]


def pipeline_answer(model: nn.Module, saved: dict[str, Any], restored: torch.Tensor) -> Image.Image:
    """One image's answer as `vitlab.pipeline` gives it: the restored picture."""
    return Image.fromarray(restored.permute(1, 2, 0).numpy())


def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], out: str | None = None,
                  degradation: str | None = None, reference: str | None = None, **_: Any) -> list[dict[str, Any]]:
    """Each image restored by `degradation` (default: the run's first task); with `out`, written there as
    NAME_DEGRADATION.png. `reference`: a folder of clean images by the same stems, to score against."""
    model.eval()
    name = degradation or model.degradations[0]
    model.task_index(name)
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no image at {path}")
    targets = output_files(paths, out, f"_{name}") if out else [()] * len(paths)
    results = []
    for path, target in zip(paths, targets):
        image = load_photos([path], halve_first=False)[0]
        start = time.perf_counter()
        restored = restore_image(model, image, name, task.config.overlap, task.config.eval_batch_size,
                                 task.config.blend)
        item: dict[str, Any] = {"input": str(path), "degradation": name, "input_size": list(image.shape[-2:]),
                                "output_size": list(restored.shape[-2:]),
                                "seconds": round(time.perf_counter() - start, 3)}
        if reference:
            matches = [p for p in image_files(reference) if p.stem == Path(path).stem]
            if not matches:
                raise FileNotFoundError(f"{reference} has no image named {Path(path).stem}.*")
            clean = load_photos(matches[:1], halve_first=False)[0][:, :restored.shape[-2], :restored.shape[-1]]
            if tuple(clean.shape[-2:]) != tuple(restored.shape[-2:]):
                raise ValueError(f"{matches[0]} is {tuple(clean.shape[-2:])}, the output {tuple(restored.shape[-2:])}")
            scores = restoration_scores(restored.float()[None] / 255, clean.float()[None] / 255, scale_of(name))
            item.update({key: float(scores[key][0]) for key in METRICS})
            start_scores = restoration_scores(baseline(image, name).float()[None] / 255, clean.float()[None] / 255,
                                              scale_of(name))
            item.update({f"input_{key}": float(start_scores[key][0]) for key in METRICS})
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            picture = Image.fromarray(np.ascontiguousarray(restored.permute(1, 2, 0).numpy()))
            atomic_write(target[0], lambda f, picture=picture: picture.save(f, format="PNG"), mode="wb")
            item["output"] = str(target[0])
        results.append(item)
    return results


def record_for(task, model: nn.Module, preprocessing) -> dict[str, Any]:
    """What a restoration run records of its data, for a restorer without a run (a release, a file): the
    degradations it undoes (its heads, by name), no photographs of its own. Its images are read as they are."""
    return {"degradations": list(model.task_names), "test": []}


def format_prediction(item: dict[str, Any]) -> str:
    size_in, size_out = "×".join(map(str, item["input_size"])), "×".join(map(str, item["output_size"]))
    scored = (f", PSNR-Y {item['psnr_y']:.2f} dB (input {item['input_psnr_y']:.2f})" if "psnr_y" in item else "")
    written = f" -> {item['output']}" if "output" in item else ""
    return f"{item['input']}: {item['degradation']} {size_in} -> {size_out} in {item['seconds']:.2f} s{scored}{written}"


# ---- the server ----------------------------------------------------------------------------------------------------
def answer(task, model: nn.Module, saved: dict[str, Any], image: Path, folder: Path, context: dict[str, Any],
           degradation: str | None = None, reference: Image.Image | None = None) -> dict[str, Any]:
    """`reference`: the clean image, uploaded, to score against."""
    references = None
    if reference is not None:
        references = folder / "reference"
        references.mkdir()
        reference.save(references / image.name)
    item = predict_files(task, model, saved, [str(image)], out=str(folder / "out"), degradation=degradation,
                         reference=str(references) if references else None)[0]
    item.pop("input")
    return {**item, "image_png": Path(item.pop("output"))}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    return [Path(p) for p in saved.get("data", {}).get("test", [])][:count]


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`)."""
    return "image-to-image"
