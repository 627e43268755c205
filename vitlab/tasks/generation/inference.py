"""A finished VQGAN or prior run: `vitlab eval` (reconstruction and, for a prior, generation scores), `vitlab sample`
(a grid of class-conditional samples) and `vitlab reconstruct` (images through the autoencoder)."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ...atomic import atomic_write, output_files
from ...data.generation import crop_padding
from ...data.images import INPUT_HINT, read_image
from ...data.preprocessing import Preprocessing
from .metrics import from_uint8, generation_scores, load_classifier_features, reconstruction_scores, to_unit
from .prior_task import balanced_labels, code_loss, encode_images, load_vqgan_run, sample_images, vqgan_images


def vqgan_of(task, model, saved) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The VQGAN of a vqgan run (the model itself) or of a prior run (the run its --vqgan names)."""
    if task.name == "vqgan":
        return model.eval(), saved
    return load_vqgan_run(saved["config"]["vqgan"])


def record_for(task, model, preprocessing) -> dict[str, Any]:
    """What a VQGAN run records of its images, for a VQGAN without a run (a release, a file): their channels and
    size, the model's own, unpadded, and the release's preprocessing where it has one (else an image is squashed
    to the model's size, as a run's are). A prior by name is refused: it needs the VQGAN run it was trained on."""
    from ...models.family import family_config

    if task.name != "vqgan":
        raise ValueError(f"a {task.name} model samples through the VQGAN run it was trained with: give its run folder")
    config = family_config(model)
    record = {"channels": config.fact("channels"), "img_size": config.fact("image_size"), "pad": 0, "classes": []}
    return record | ({"preprocessing": preprocessing.to_dict()} if preprocessing is not None else {})


def evaluate_run(task, model, saved: dict[str, Any], run_dir, data_dir: str | None = None,
                 classifier: str | None = None, samples: int | None = None, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, split: str = "test", **_: Any
                 ) -> dict[str, Any]:
    """psnr, ssim, usage, perplexity on the whole of `split` (the test part, or the validation part where the data
    has none); for a prior also its code loss and, with a classifier (given, or the run's own), fid, fid_floor,
    class_acc of `samples` class-conditional samples against those images."""
    vqgan, vqgan_saved = vqgan_of(task, model, saved)
    images = vqgan_images(vqgan_saved, data_dir)
    held, held_labels, split = images.held_out(split)
    result: dict[str, Any] = {"run": str(run_dir), "task": task.name, "split": split, "num_images": len(held),
                              **reconstruction_scores(vqgan, images, progress=True, part=split)}
    if task.name != "prior":
        return result
    c = task.config
    prior = model.eval()
    codes = encode_images(vqgan, held, desc=f"encoding the {split} images")
    result["code_loss"] = code_loss(prior, codes, held_labels)
    classifier = classifier or c.classifier
    if classifier:
        n = samples if samples is not None else c.eval_samples
        labels = balanced_labels(n, prior.config.num_classes)
        drawn = sample_images(prior, vqgan, labels, c.temperature if temperature is None else temperature,
                              top_k if top_k is not None else c.top_k, top_p if top_p is not None else c.top_p,
                              generator=torch.Generator().manual_seed(0))
        features = load_classifier_features(classifier, images.crop)
        result.update({**generation_scores(features, images, drawn, labels, part=split), "samples": n,
                       "classifier": str(classifier)})
    return result


def format_evaluation(result: dict[str, Any], which: str) -> str:
    lines = [f"{result['run']} ({which} weights), {result['num_images']} {result['split']} images:",
             f"  reconstruction PSNR {result['psnr']:.2f} dB, SSIM {result['ssim']:.4f}",
             f"  codebook usage {100 * result['usage']:.1f} %, perplexity {result['perplexity']:.1f}"]
    if "code_loss" in result:
        lines.append(f"  prior: cross-entropy {result['code_loss']:.4f} nats per code")
    if "fid" in result:
        lines.append(f"  {result['samples']} samples: FID {result['fid']:.2f} (floor, training against "
                     f"{result['split']} images: {result['fid_floor']:.2f}), recognised as their class "
                     f"{100 * result['class_acc']:.1f} %")
    return "\n".join(lines)


# ---- pictures -----------------------------------------------------------------------------------------------------
def grid_picture(images: torch.Tensor, columns: int, pad: int = 2) -> Image.Image:
    """images (N, C, H, W) in [0, 1] -> one picture, `columns` per row, `pad` white pixels between."""
    N, C, H, W = images.shape
    rows = math.ceil(N / columns)
    canvas = torch.ones(C, rows * (H + pad) + pad, columns * (W + pad) + pad)
    for i, image in enumerate(images):
        r, col = divmod(i, columns)
        canvas[:, pad + r * (H + pad):pad + r * (H + pad) + H, pad + col * (W + pad):pad + col * (W + pad) + W] = image
    array = (canvas.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    return Image.fromarray(array[..., 0] if C == 1 else array)


def save_picture(picture: Image.Image, path: str | Path) -> Path:
    """PNG written atomically (a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    atomic_write(path, lambda f: f.write(buffer.getvalue()))
    return path


def sample_grid(task, prior, saved: dict[str, Any], out: str | Path, class_index: int | None = None, n: int = 16,
                temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0,
                use_cache: bool = True, vqgan: tuple[torch.nn.Module, dict[str, Any]] | None = None) -> dict[str, Any]:
    """n samples of one class (or n of each class, a row per class) as one PNG. `vqgan`: the prior's VQGAN run
    (model, config), already loaded (default: loaded from the run's --vqgan)."""
    if task.name != "prior":
        raise ValueError(f"`vitlab sample` takes a prior run (vitlab train --task prior); this is a {task.name} run")
    if not -(2**63) <= seed < 2**64:  # what torch's generators take
        raise ValueError(f"--seed must be a whole number from -2**63 to 2**64 - 1, got {seed}")
    vqgan, _ = vqgan or load_vqgan_run(saved["config"]["vqgan"])
    classes = saved["data"]["classes"]
    if class_index is not None and not 0 <= class_index < len(classes):
        raise ValueError(f"--class must be one of 0 … {len(classes) - 1} ({', '.join(classes)}), got {class_index}")
    labels = (torch.full((n,), class_index) if class_index is not None
              else torch.arange(len(classes)).repeat_interleave(n))
    images = sample_images(prior.eval(), vqgan, labels, temperature, top_k, top_p,
                           generator=torch.Generator().manual_seed(seed), use_cache=use_cache)
    columns = min(n, 8) if class_index is not None else n
    path = save_picture(grid_picture(images, columns), out)
    return {"out": str(path), "samples": len(labels),
            "classes": [classes[class_index]] if class_index is not None else classes}


def prepare_image(path: str, images_like: dict[str, Any]) -> torch.Tensor:
    """An image file -> (1, C, S, S) in [-1, 1], shaped as the run's data: resized to the data's own pixels
    (S − 2·pad), then padded as the data was."""
    return prepare_picture(read_image(path, images_like["channels"], hint=INPUT_HINT), images_like)


def prepare_picture(picture: Image.Image, images_like: dict[str, Any]) -> torch.Tensor:
    """A picture -> (1, C, S, S) in [-1, 1], as `prepare_image` makes of a file: as the record's preprocessing
    says (a release's), else squashed to the data's size with Pillow's bicubic (a run's)."""
    channels, size, pad = images_like["channels"], images_like["img_size"], images_like.get("pad", 0)
    if images_like.get("preprocessing"):
        return Preprocessing.from_dict(images_like["preprocessing"])(picture)[None]
    picture = picture.convert("L" if channels == 1 else "RGB")
    picture = picture.resize((size - 2 * pad,) * 2, Image.Resampling.BICUBIC)
    array = np.asarray(picture, dtype=np.uint8)
    x = torch.from_numpy(array.copy()).view(size - 2 * pad, size - 2 * pad, channels).permute(2, 0, 1)[None]
    x = F.pad(x, (pad,) * 4) if pad else x
    return from_uint8(x)


@torch.no_grad()
def reconstruct_files(task, model, saved: dict[str, Any], inputs: list[str], out: str | Path) -> list[dict[str, Any]]:
    """Each image through the VQGAN: NAME_reconstruction.png (the input beside its reconstruction), with the PSNR
    of the reconstruction on the image's own pixels."""
    vqgan, vqgan_saved = vqgan_of(task, model, saved)
    data = vqgan_saved["data"]
    pad = data.get("pad", 0)
    results = []
    for path, (target,) in zip(inputs, output_files(inputs, out, "_reconstruction")):
        x = prepare_image(path, data)
        output = vqgan(x)
        original, rebuilt = crop_padding(to_unit(x), pad), crop_padding(to_unit(output.reconstruction), pad)
        mse = float(((original - rebuilt) ** 2).mean())
        psnr = 10 * math.log10(1 / mse) if mse > 0 else float("inf")
        save_picture(grid_picture(torch.cat([original, rebuilt]), 2), target)
        results.append({"image": str(path), "out": str(target), "psnr": psnr,
                        "codes": output.indices[0].tolist()})
    return results


@torch.no_grad()
def predict_images(task, model, saved: dict[str, Any], images: list[Image.Image]) -> list[tuple[torch.Tensor, list]]:
    """Each picture through the VQGAN, prepared as `vitlab reconstruct` prepares a file: (its reconstruction
    (C, S, S) in [0, 1] without the data's padding, its codes)."""
    if task.name != "vqgan":
        raise ValueError(f"a {task.name} model samples images (vitlab sample RUN); give a VQGAN to reconstruct them")
    vqgan, vqgan_saved = vqgan_of(task, model, saved)
    pad = vqgan_saved["data"].get("pad", 0)
    found = []
    for picture in images:
        output = vqgan(prepare_picture(picture, vqgan_saved["data"]))
        found.append((crop_padding(to_unit(output.reconstruction), pad)[0], output.indices[0].tolist()))
    return found


def pipeline_answer(model, saved: dict[str, Any], item: tuple[torch.Tensor, list]) -> dict[str, Any]:
    """One image's answer as `vitlab.pipeline` gives it: the reconstruction (a PIL image) and the grid of codes
    that makes it."""
    reconstruction, codes = item
    return {"reconstruction": grid_picture(reconstruction[None], 1, pad=0), "codes": codes}


def format_reconstruction(item: dict[str, Any]) -> str:
    return f"{item['image']}: PSNR {item['psnr']:.2f} dB -> {item['out']}"


# ---- the server ----------------------------------------------------------------------------------------------------
def answer(task, model, saved: dict[str, Any], image: Path | None, folder: Path, context: dict[str, Any],
           **options: Any) -> dict[str, Any]:
    """A VQGAN's reconstruction of the upload; a prior's grid of samples (`options`: PriorServeOptions)."""
    if task.needs_image:
        item = reconstruct_files(task, model, saved, [str(image)], folder / "out")[0]
        return {"psnr": item["psnr"], "codes": item["codes"], "image_png": Path(item["out"])}
    result = sample_grid(task, model, saved, folder / "grid.png", vqgan=context.get("vqgan"), **options)
    return {**options, "classes": result["classes"], "samples": result["samples"], "grid_png": Path(result["out"])}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    from ..classification.inference import examples as one_channel_examples

    return one_channel_examples({"data": {"channels": saved.get("data", {}).get("channels", 3)}}, count)


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`): a VQGAN
    maps an image to its reconstruction, a prior samples images of a class."""
    return "image-to-image" if task.name == "vqgan" else "unconditional-image-generation"
