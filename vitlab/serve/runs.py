"""The runs a server serves, and what each task answers for one image.

Each answer goes through the very functions `vitlab predict`, `vitlab restore`, `vitlab sample` and `vitlab
reconstruct` call (the task's `predict`, `sample_grid`, `reconstruct_files`): the upload is written as a PNG into a
folder of its own for the one request, the function reads it from there and writes its pictures beside it, and
they come back as base64 PNG. Nothing is shared between requests but the models, which are only read.
"""

from __future__ import annotations

import base64
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from .uploads import BadInput, png_safe

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"  # Fashion-MNIST test images, in a checkout
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


@dataclass
class ServedRun:
    """A run folder loaded for serving: its task (rebuilt from config.json), its model (eval mode, loaded once)
    and, for a prior, the VQGAN that turns its codes into pixels."""

    name: str
    path: Path
    task: Any
    saved: dict[str, Any]
    model: nn.Module
    weights: str
    vqgan: tuple[nn.Module, dict[str, Any]] | None = None
    examples: list[Path] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.task.name

    @property
    def classes(self) -> list[str]:
        return list(self.saved.get("data", {}).get("classes", []))

    @property
    def model_name(self) -> str | None:
        return self.saved.get("model_config", {}).get("name") or self.saved.get("config", {}).get("model")

    @property
    def needs_image(self) -> bool:
        return self.kind != "prior"

    def describe(self) -> dict[str, Any]:
        """What `GET /api/runs` says of the run."""
        info: dict[str, Any] = {"name": self.name, "task": self.kind, "model": self.model_name,
                                "weights": self.weights, "classes": self.classes, "needs_image": self.needs_image,
                                "options": OPTIONS[self.kind], "examples": [p.name for p in self.examples]}
        if self.kind == "restoration":
            info["degradations"] = list(self.model.degradations)
        return info


# the form fields each task reads, beside `image` (the `POST /api/runs/{name}/predict` documentation)
OPTIONS: dict[str, dict[str, str]] = {
    "classification": {"top_k": "how many classes to return (default 3)",
                       "attention": "also return the attention rollout and each head's map of the last layer, "
                                    "as PNG (default true)"},
    "detection": {"threshold": "return detections scoring above this, in [0, 1) (default 0.5)"},
    "segmentation": {},
    "restoration": {"degradation": "what to undo: one of the run's degradations (default its first)",
                    "reference": "an upload: the clean image, to score PSNR and SSIM against"},
    "vqgan": {},
    "prior": {"class_index": "the class to draw (its index; default 0)", "n": "how many samples (default 8)",
              "temperature": "softmax temperature, 0 takes the most likely code (default 1.0)",
              "top_k": "sample among the k most likely codes (default all)",
              "top_p": "sample among the most likely codes that make up probability p (default all)",
              "seed": "seed of the draws (default 0)"},
}


def load_runs(paths: list[str | Path], weights: str = "best",
              runtime: Callable[[nn.Module, Path, str], nn.Module] | None = None) -> list[ServedRun]:
    """Each run folder loaded once; names are the folder names, made unique with -2, -3, ... `runtime(model,
    run_dir, weights)`: the model to serve in place of each run's own (a prior's sampling loop stays on torch)."""
    from ..engine.run import RunDir
    from ..tasks import load_task
    from ..tasks.generation.prior_task import load_vqgan_run

    runs: list[ServedRun] = []
    for path in map(Path, paths):
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a run folder (no config.json): give folders written by "
                                    f"`vitlab train --out RUN`")
        task, saved = load_task(path)
        if task.name == "seq2seq":
            raise ValueError(f"{path} is a seq2seq run; `vitlab serve` serves image runs (classification, "
                             f"detection, segmentation, restoration, vqgan, prior); use `vitlab translate` for it")
        which = weights if RunDir(path).weights_file(weights).is_file() else "last"
        model = RunDir(path).load_model(which).requires_grad_(False)
        if runtime is not None and task.name != "prior":
            model = runtime(model, path, which)
        name, suffix = path.resolve().name, 2
        while any(run.name == name for run in runs):
            name, suffix = f"{path.resolve().name}-{suffix}", suffix + 1
        run = ServedRun(name, path, task, saved, model, which)
        if task.name == "prior":
            run.vqgan = load_vqgan_run(saved["config"]["vqgan"])
        run.examples = example_images(run)
        runs.append(run)
    return runs


def example_images(run: ServedRun, count: int = 4) -> list[Path]:
    """Images to try the run on: the run's own held-out images where it has files (scenes, photographs), else
    the Fashion-MNIST examples beside the code for runs on Fashion-MNIST-like images."""
    data = run.saved.get("data", {})
    found: list[Path] = []
    if run.kind in ("detection", "segmentation") and data.get("path"):
        folder = Path(data["path"]) / "images"
        for split in ("val", "test", "train"):
            found = sorted(p for p in (folder / split).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
            if found:
                break
    elif run.kind == "restoration":
        found = [Path(p) for p in data.get("test", [])]
    elif run.kind == "classification" and data.get("name") and Path(data["name"]).is_dir():
        found = folder_examples(Path(data["name"]), run.classes, count)
    elif run.kind in ("classification", "vqgan") and EXAMPLES.is_dir() and data.get("channels", 3) == 1:
        found = sorted(EXAMPLES.glob("*.png"))
    return [p for p in found if p.is_file()][:count]


def folder_examples(root: Path, classes: list[str], count: int) -> list[Path]:
    """One image of each of the first classes of an image folder (its test/ or val/ split where it has one)."""
    split = next((root / name for name in ("test", "val") if (root / name).is_dir()), root)
    found = []
    for name in classes[:count]:
        files = sorted(p for p in (split / name).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        found += files[:1]
    return found


# ---- one request ----------------------------------------------------------------------------------------------------
def encode_png(path_or_image: str | Path | Image.Image) -> str:
    """A PNG file or a PIL image as base64 text."""
    if isinstance(path_or_image, Image.Image):
        import io

        buffer = io.BytesIO()
        path_or_image.save(buffer, format="PNG")
        return base64.b64encode(buffer.getvalue()).decode("ascii")
    return base64.b64encode(Path(path_or_image).read_bytes()).decode("ascii")


def safe_stem(filename: str | None) -> str:
    """The upload's file name, reduced to a stem safe to write (it names the image in the answer)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(filename or "image").stem).strip("._") or "image"
    return stem[:64]


def predict(run: ServedRun, image: Image.Image | None, filename: str | None = None,
            reference: Image.Image | None = None, **options: Any) -> dict[str, Any]:
    """The run's answer for one image (and its options) as JSON-ready data, under inference mode."""
    if run.needs_image and image is None:
        raise BadInput(422, f"the run {run.name} ({run.kind}) needs an image: send one in the multipart form "
                            f"field `image`")
    unknown = sorted(set(options) - set(OPTIONS[run.kind]) | ({"reference"} - set(OPTIONS[run.kind])
                                                               if reference is not None else set()))
    if unknown:
        raise BadInput(422, f"{', '.join(unknown)} {'is not an option' if len(unknown) == 1 else 'are not options'}"
                            f" of a {run.kind} run; it takes {', '.join(OPTIONS[run.kind]) or 'no options'}")
    with tempfile.TemporaryDirectory(prefix="vitlab-serve-") as tmp, torch.inference_mode():
        folder = Path(tmp)
        stem = safe_stem(filename)
        path = None
        if image is not None:
            path = folder / "in" / f"{stem}.png"
            path.parent.mkdir()
            png_safe(image).save(path)
        try:
            result = HANDLERS[run.kind](run, path, folder, reference=reference, **options)
        except (ValueError, FileNotFoundError) as error:  # what the task refuses (a threshold out of range, ...)
            if isinstance(error, BadInput):
                raise
            raise BadInput(422, str(error)) from error
    return {"run": run.name, "task": run.kind, **({"image": filename or f"{stem}.png"} if image is not None else {}),
            **result}


def _classification(run: ServedRun, path: Path, folder: Path, top_k: int = 3, attention: bool = True,
                    **_: Any) -> dict[str, Any]:
    from ..data.folder import load_image

    if top_k < 1:
        raise BadInput(422, f"top_k must be at least 1, got {top_k}")
    item = run.task.predict(run.model, run.saved, [str(path)], top_k=top_k)[0]
    result: dict[str, Any] = {"top_k": item["top_k"]}
    if attention:
        result["attention"] = attention_pictures(run, load_image(str(path), run.saved["data"]["channels"]))
    return result


def attention_pictures(run: ServedRun, image: Image.Image) -> dict[str, Any] | None:
    """The rollout over the image and each head's class-token map of the last layer, as base64 PNGs (None for a
    classifier without attention blocks, such as a ResNet)."""
    from ..viz.attention import image_attention
    from ..viz.render import attention_panels

    if not hasattr(run.model, "blocks"):
        return None
    shown, rollout, heads, _ = image_attention(run.model, image, run.saved["data"])
    panels = attention_panels(shown, rollout, heads)
    return {"rollout_png": encode_png(panels[1]), "heads_png": [encode_png(panel) for panel in panels[2:]],
            "layer": len(run.model.blocks) - 1}


def _detection(run: ServedRun, path: Path, folder: Path, threshold: float = 0.5, **_: Any) -> dict[str, Any]:
    item = run.task.predict(run.model, run.saved, [str(path)], out=str(folder / "out"), threshold=threshold)[0]
    return {"threshold": threshold, "detections": item["detections"], "image_png": encode_png(item["output"])}


def _segmentation(run: ServedRun, path: Path, folder: Path, **_: Any) -> dict[str, Any]:
    from ..tasks.segmentation.inference import palette

    item = run.task.predict(run.model, run.saved, [str(path)], out=str(folder / "out"))[0]
    colours = palette(len(run.classes))
    legend = [{"index": i, "class": name, "color": "#{:02x}{:02x}{:02x}".format(*colours[i])}
              for i, name in enumerate(run.classes)]
    return {"size": item["size"], "classes": item["classes"], "legend": legend,
            "mask_png": encode_png(item["mask"]), "overlay_png": encode_png(item["overlay"])}


def _restoration(run: ServedRun, path: Path, folder: Path, degradation: str | None = None,
                 reference: Image.Image | None = None, **_: Any) -> dict[str, Any]:
    references = None
    if reference is not None:
        references = folder / "reference"
        references.mkdir()
        png_safe(reference).save(references / path.name)
    item = run.task.predict(run.model, run.saved, [str(path)], out=str(folder / "out"), degradation=degradation,
                            reference=str(references) if references else None)[0]
    item.pop("input")
    written = item.pop("output")
    return {**item, "image_png": encode_png(written)}


def _vqgan(run: ServedRun, path: Path, folder: Path, **_: Any) -> dict[str, Any]:
    from ..tasks.generation.inference import reconstruct_files

    item = reconstruct_files(run.task, run.model, run.saved, [str(path)], folder / "out")[0]
    return {"psnr": item["psnr"], "codes": item["codes"], "image_png": encode_png(item["out"])}


def _prior(run: ServedRun, path: None, folder: Path, class_index: int = 0, n: int = 8, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, seed: int = 0, **_: Any) -> dict[str, Any]:
    from ..tasks.generation.inference import sample_grid

    if not 1 <= n <= 64:
        raise BadInput(422, f"n must be in 1 … 64, got {n}")
    result = sample_grid(run.task, run.model, run.saved, folder / "grid.png", class_index, n, temperature, top_k,
                         top_p, seed, vqgan=run.vqgan)
    return {"class_index": class_index, "classes": result["classes"], "samples": result["samples"],
            "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
            "grid_png": encode_png(result["out"])}


HANDLERS = {"classification": _classification, "detection": _detection, "segmentation": _segmentation,
            "restoration": _restoration, "vqgan": _vqgan, "prior": _prior}


def decode_picture(text: str) -> Image.Image:
    """A base64 PNG (as the API returns it) -> the PIL image, palette and all."""
    import io

    return Image.open(io.BytesIO(base64.b64decode(text)))


def decode_png(text: str) -> np.ndarray:
    """A base64 PNG (as the API returns it) -> its pixels."""
    return np.asarray(decode_picture(text))
