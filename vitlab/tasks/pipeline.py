"""`vitlab.pipeline`: a model by name, or a run, on your own images in one line, with answers in plain Python.

    classify = vitlab.pipeline(model="vit_base_patch16_224.augreg2_in21k_ft_in1k")
    classify("cat.jpg")                      # [{"label": "tabby", "score": 0.62}, ...], the top 5
    detect = vitlab.pipeline(model="detr_resnet50.coco", threshold=0.7)
    detect(["street.jpg", photo])            # per image [{"label", "category_id", "score", "box": [x0, y0, x1, y1]}]
    segment = vitlab.pipeline(model="runs/scenes-setr")
    segment("scene.png")                     # {"mask": PIL image of class indices, "labels": {0: ...}, "areas": {...}}
    restore = vitlab.pipeline(model="runs/ipt", degradation="sr2")
    restore("photo.png")                     # the restored picture (PIL), tile by tile as `vitlab restore` does
    vitlab.pipeline(model="runs/vqgan")("shoe.png")   # {"reconstruction": PIL image, "codes": [[...], ...]}

The model is anything the inference commands take (tasks/sources.py): a run folder, a release tag,
hf-hub:org/name[@revision], a weights file. Images are paths, PIL images, numpy arrays ((H, W) or (H, W, C), uint8)
or tensors ((C, H, W), uint8, or float in [0, 1]); a list gives a list of answers. Each task answers through the
functions `vitlab predict` calls (its inference module's `predict_images`, then `pipeline_answer`), preprocessed
as the model records.
"""

from __future__ import annotations

import argparse
import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from .sources import Source, open_source

__all__ = ["Pipeline", "pipeline"]


def pipeline(task: str | None = None, model: str | os.PathLike | None = None, runtime: str = "torch",
             precision: str = "fp32", device: str | torch.device | None = None, threads: int | None = None,
             **options: Any) -> Pipeline:
    """A callable that answers for images with `model` (see the module's doc). `task`: for a model whose family
    does several (else checked against the model's); `runtime`: torch, onnxruntime, openvino or compile, at
    `precision` fp32, bf16 or int8, as the commands' --runtime and --precision; `device`: torch's device (torch
    runtime only); `options`: the task's own (a classifier's `top_k`, default 5; a detector's `threshold`, 0.5; a
    restorer's `degradation`, default its first), each call may change them."""
    if model is None:
        raise TypeError("pipeline needs a model: a release tag (vitlab.list_pretrained()), hf-hub:org/name, a run "
                        "folder or a weights file")
    from .runtime_flags import RUNTIMES, on_runtime

    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    source = open_source(model, task=task)
    if not hasattr(source.task._inference(), "pipeline_answer"):
        from .base import TASKS

        answering = [name for name, cls in TASKS.items()
                     if cls.inference_module and hasattr(cls._inference(), "pipeline_answer")]
        raise ValueError(f"vitlab.pipeline answers for {', '.join(answering)} models; {model} is a "
                         f"{source.task.name} model: use its commands (vitlab --help)")
    net = source.model
    if device is not None:
        if runtime != "torch":
            raise ValueError(f"device= places a torch model; the {runtime} runtime chooses its own")
        net = net.to(device)
    elif runtime != "torch" or precision != "fp32" or threads is not None:
        net = on_runtime(net, argparse.Namespace(runtime=runtime, precision=precision, threads=threads), source)
    return Pipeline(source, net, options)


class Pipeline:
    """A model ready to answer for images: `pipeline(...)` makes one; call it with an image or a list of them."""

    def __init__(self, source: Source, model: torch.nn.Module, options: dict[str, Any]) -> None:
        self.source, self.model = source, model
        inference = source.task._inference()
        self._predict, self._answer = inference.predict_images, inference.pipeline_answer
        self.defaults = {"top_k": 5} if "top_k" in self._takes() else {}
        self.defaults.update(self._checked(options))

    @property
    def task(self) -> str:
        return self.source.task.name

    @property
    def labels(self) -> list[str]:
        """The model's classes, by index."""
        from .base import class_names

        return class_names(self.source.model, self.source.saved)

    def _takes(self) -> list[str]:
        skip = {"task", "model", "saved", "images"}
        return [name for name in inspect.signature(self._predict).parameters if name not in skip]

    def _checked(self, options: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(self._takes()))
        if unknown:
            raise TypeError(f"a {self.task} pipeline takes {', '.join(self._takes())}; not {', '.join(unknown)}")
        return options

    def __call__(self, images: Any, **options: Any) -> Any:
        many = isinstance(images, list | tuple)
        pictures = [as_picture(image, self.source.saved["data"].get("channels", 3))
                    for image in (images if many else [images])]
        found = self._predict(self.source.task, self.model, self.source.saved, pictures,
                              **{**self.defaults, **self._checked(options)})
        answers = [self._answer(self.source.model, self.source.saved, item) for item in found]
        return answers if many else answers[0]

    def __repr__(self) -> str:
        return f"Pipeline(task={self.task!r}, model={self.source.name!r})"


def as_picture(image: Any, channels: int = 3) -> Image.Image:
    """An input as a PIL image: a path (no URL: nothing is downloaded), a PIL image, a numpy array or a tensor."""
    from ..data.images import INPUT_HINT, read_image

    if isinstance(image, str | Path):
        if str(image).startswith(("http://", "https://")):
            raise ValueError(f"{image}: vitlab.pipeline reads files, not URLs; download the image first")
        return read_image(str(image), channels, hint=INPUT_HINT)
    if isinstance(image, Image.Image):
        return image
    if isinstance(image, torch.Tensor):
        if image.ndim != 3:
            raise ValueError(f"an image tensor is (C, H, W); got the shape {tuple(image.shape)}")
        if image.is_floating_point():
            image = (image.clamp(0, 1) * 255).round().to(torch.uint8)
        image = image.permute(1, 2, 0).cpu().numpy()
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise ValueError(f"an image array is uint8 (H, W) or (H, W, C); got {image.dtype}")
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        return Image.fromarray(image)
    raise TypeError(f"an image is a path, a PIL image, a numpy array or a tensor; got {type(image).__name__}")
