"""A model family, a detector family and a task of one's own, written outside vitlab with its public registration
API only (`register_config`, `register_model`, `ModelFamily`, `ExportSpec`, `SetPrediction`, `register_task`,
`Task`, `option`, `command`, `register_page`). tests/test_extending.py registers them and runs every command on them.

    ToyNet        a convnet classifier: two convolutions, global average pooling, a linear head
    ToyDetector   a set-prediction detector: a convolution, pooled features plus learned queries -> classes, boxes
    ToyTwin       a family whose graph is of a kind no vitlab family has: two outputs, a vector and a map,
                  packed into its own output type
    a converter   for ToyNet checkpoints in a foreign library's key layout (features.N, classifier)
    brightness    a task: regress an image's mean brightness, trained on random images; its own command,
                  `vitlab brighten RUN IMAGE... --target T --out DIR`, scales images to the brightness T as the
                  run's model reads it; and its own page layout (an image in, a number out)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gradio as gr
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from vitlab.commands import command
from vitlab.engine.flags import SELECTED_WEIGHTS, add_weights_flag
from vitlab.engine.loop import TaskData
from vitlab.engine.options import check, option
from vitlab.interop.converters import Converter, register_converter
from vitlab.models.family import ExportSpec, Model, ModelFamily
from vitlab.models.registry import create_model, register_config, register_model
from vitlab.models.set_prediction import DetectionOutput, SetPrediction, detector_export_spec
from vitlab.serve.page import register_page
from vitlab.tasks.base import Task, register_task


# ---- a classifier family ---------------------------------------------------------------------------------------
@register_config
@dataclass(frozen=True)
class ToyNetConfig(ModelFamily):
    family: ClassVar[str] = "toynet"
    title: ClassVar[str] = "ToyNet"
    description: ClassVar[str] = "a test's own convnet: two convolutions, global average pooling, a linear head"
    tasks: ClassVar[tuple[str, ...]] = ("classification", "brightness")

    img_size: int = 28
    in_chans: int = 1
    num_classes: int = 10
    width: int = 8  # no drop_path_rate: a convnet without stochastic depth need not carry one (ModelFamily.for_data)

    def summary(self) -> dict[str, Any]:
        return {"image": self.img_size, "patch": None, "dim": self.width, "depth": 2, "heads": None,
                "classes": self.num_classes}

    def build(self) -> ToyNet:
        return ToyNet(self)


class ToyNet(Model):
    """images (B, C, H, W) -> logits (B, K)."""

    def __init__(self, config: ToyNetConfig) -> None:
        super().__init__()
        self.config, self.num_classes = config, config.num_classes
        self.conv1 = nn.Conv2d(config.in_chans, config.width, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(config.width, config.width, 3, stride=2, padding=1)
        self.head = nn.Linear(config.width, config.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = F.relu(self.conv2(F.relu(self.conv1(images))))  # (B, width, H/4, W/4)
        return self.head(features.mean(dim=(2, 3)))

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: Any = None) -> ExportSpec:
        example = example or (torch.randn(2, self.config.in_chans, self.config.img_size, self.config.img_size),)
        return ExportSpec("classifier", lambda model, images: (model(images),), ("images",), ("logits",), example,
                          ({0: "batch", 2: "height", 3: "width"},))


@register_model
def toynet_28() -> ToyNetConfig:
    return ToyNetConfig()


# ---- a converter: ToyNet checkpoints in a foreign layout ------------------------------------------------------------
FOREIGN_KEYS = {"features.0": "conv1", "features.2": "conv2", "classifier": "head"}  # theirs -> ours


def is_foreign_toynet(state: dict[str, torch.Tensor]) -> bool:
    return {"features.0.weight", "features.2.weight", "classifier.weight"} <= set(state)


def from_foreign(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {FOREIGN_KEYS[key.rpartition(".")[0]] + "." + key.rpartition(".")[2]: value for key, value in state.items()}


FOREIGN_TOYNET = register_converter(Converter(
    "a foreign toynet state dict (features.N, classifier)", "toynet",
    lambda state, hf_config: is_foreign_toynet(state), lambda state, hf_config: from_foreign(state),
    lambda state, file: {"family": "toynet", "width": state["conv1.weight"].shape[0],
                         "in_chans": state["conv1.weight"].shape[1], "num_classes": state["head.weight"].shape[0]},
    lambda state, hf_config: "foreign"))


# ---- a family with a new kind of graph: two outputs --------------------------------------------------------------
@dataclass
class TwinOutput:
    """What ToyTwin returns: a vector per image and a map per image."""

    scores: torch.Tensor  # (B, K)
    heat: torch.Tensor  # (B, 1, H/2, W/2)


@register_config
@dataclass(frozen=True)
class ToyTwinConfig(ModelFamily):
    family: ClassVar[str] = "toytwin"
    title: ClassVar[str] = "ToyTwin"
    description: ClassVar[str] = "a test's own two-headed convnet: a score vector and a heat map"

    width: int = 8
    num_scores: int = 3

    def summary(self) -> dict[str, Any]:
        return {"dim": self.width, "depth": 1}

    @staticmethod
    def pack_outputs(outputs: list[torch.Tensor]) -> TwinOutput:
        return TwinOutput(outputs[0], outputs[1])

    def build(self) -> ToyTwin:
        return ToyTwin(self)


class ToyTwin(Model):
    """images (B, 3, H, W) -> TwinOutput: scores (B, K), heat (B, 1, H/2, W/2)."""

    def __init__(self, config: ToyTwinConfig) -> None:
        super().__init__()
        self.config = config
        self.conv = nn.Conv2d(3, config.width, 3, stride=2, padding=1)
        self.scores = nn.Linear(config.width, config.num_scores)
        self.heat = nn.Conv2d(config.width, 1, 1)

    def forward(self, images: torch.Tensor) -> TwinOutput:
        features = F.relu(self.conv(images))  # (B, width, H/2, W/2)
        return TwinOutput(self.scores(features.mean(dim=(2, 3))), self.heat(features).sigmoid())

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: Any = None) -> ExportSpec:
        def outputs(model, images):
            out = model(images)
            return out.scores, out.heat

        return ExportSpec("two-headed", outputs, ("images",), ("scores", "heat"),
                          example or (torch.randn(2, 3, 32, 48),), ({0: "batch", 2: "height", 3: "width"},))


@register_model
def toytwin() -> ToyTwinConfig:
    return ToyTwinConfig()


# ---- a detector family -----------------------------------------------------------------------------------------
@register_config
@dataclass(frozen=True)
class ToyDetectorConfig(SetPrediction, ModelFamily):
    family: ClassVar[str] = "toydet"
    title: ClassVar[str] = "ToyDetector"
    description: ClassVar[str] = "a test's own set-prediction detector: queries read pooled convolution features"
    tasks: ClassVar[tuple[str, ...]] = ("detection",)

    num_classes: int = 10
    num_queries: int = 8
    width: int = 16
    aux_loss: bool = True  # what the detection task passes; one layer has no auxiliary outputs
    dropout: float = 0.0
    img_size: int = 64

    def summary(self) -> dict[str, Any]:
        return {"image": self.img_size, "patch": None, "dim": self.width, "depth": 1, "heads": None,
                "classes": self.num_classes}

    @staticmethod
    def pack_outputs(outputs: list[torch.Tensor]) -> DetectionOutput:
        return DetectionOutput(outputs[0], outputs[1])

    def build(self) -> ToyDetector:
        return ToyDetector(self)


class ToyDetector(Model):
    """images (B, 3, H, W), padding_mask (B, H, W) -> DetectionOutput: logits (B, N, K + 1), boxes (B, N, 4)."""

    def __init__(self, config: ToyDetectorConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = nn.Conv2d(3, config.width, 5, stride=4, padding=2)
        self.queries = nn.Embedding(config.num_queries, config.width)
        self.class_embed = nn.Linear(config.width, config.num_classes + 1)
        self.bbox_embed = nn.Linear(config.width, 4)

    def forward(self, images: torch.Tensor, padding_mask: torch.Tensor | None = None) -> DetectionOutput:
        pooled = F.relu(self.backbone(images)).mean(dim=(2, 3))  # (B, width)
        h = pooled[:, None] + self.queries.weight[None]  # (B, N, width)
        return DetectionOutput(self.class_embed(h), self.bbox_embed(h).sigmoid())

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: Any = None) -> ExportSpec:
        return detector_export_spec(self, example)


@register_model
def toydet_small() -> ToyDetectorConfig:
    return ToyDetectorConfig()


# ---- a task ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BrightnessConfig:
    model: str = option("toynet_28", "a registered model whose family trains this task")
    samples: int = option(64, "random training images")

    def __post_init__(self) -> None:
        check(self.samples >= 8, "samples", "at least 8", self.samples)


@dataclass(frozen=True)
class BrightnessEvalOptions:
    samples: int = option(32, "random images to score")


@dataclass(frozen=True)
class BrightnessPredictOptions:
    scale: float = option(1.0, "multiply the answer by this")


def random_images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, 1, 28, 28) images in [0, 1] of random brightness, and their mean brightness (n,)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 28, 28, generator=g) * torch.rand(n, 1, 1, 1, generator=g)
    return images, images.mean(dim=(1, 2, 3))


class Batches:
    """Shuffled batches of (images, brightness), in an order fixed by (seed, epoch): the loop's loader contract."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, batch_size: int, seed: int) -> None:
        self.images, self.targets, self.batch_size, self.seed, self.epoch = images, targets, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.images) // self.batch_size

    def __iter__(self):
        order = torch.randperm(len(self.images), generator=torch.Generator().manual_seed(self.seed + self.epoch))
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.images[index], self.targets[index]


@register_task
class BrightnessTask(Task):
    name: ClassVar[str] = "brightness"
    Config: ClassVar[type] = BrightnessConfig
    best: ClassVar[tuple[str, str]] = ("val_mae", "min")
    model_noun: ClassVar[str] = "a brightness model"
    inference_module: ClassVar[str] = __name__
    EvalOptions: ClassVar[type] = BrightnessEvalOptions
    PredictOptions: ClassVar[type] = BrightnessPredictOptions
    commands: ClassVar[tuple[str, ...]] = ("brighten",)
    page: ClassVar[str] = "brightness"

    @classmethod
    def loop_defaults(cls, config: BrightnessConfig) -> dict[str, Any]:
        return {"epochs": 2, "batch_size": 16, "lr": 1e-2, "warmup_epochs": 0.0}

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        images, targets = random_images(self.config.samples, self.loop.seed)
        return TaskData(train=Batches(images, targets, self.loop.batch_size, self.loop.seed),
                        val=random_images(16, self.loop.seed + 1), test=random_images(16, self.loop.seed + 2))

    def build_model(self) -> nn.Module:
        self.model_config()
        return create_model(self.config.model, num_classes=1)

    def loss(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        images, targets = batch
        return {"loss": F.mse_loss(model(images)[:, 0], targets)}

    def evaluate(self, model: nn.Module, data: Any) -> dict[str, float]:
        images, targets = data
        model.eval()
        with torch.no_grad():
            return {"mae": (model(images)[:, 0] - targets).abs().mean().item()}

    def run_info(self) -> dict[str, Any]:
        return {"data": {"samples": self.config.samples}}


# the task's inference module (`inference_module`): a finished run, its predictions, the server's answers
def evaluate_run(task, model, saved, run_dir, samples: int = 32) -> dict[str, Any]:
    images, targets = random_images(samples, 123)
    with torch.no_grad():
        return {"mae": (model(images)[:, 0] - targets).abs().mean().item(), "samples": samples}


def format_evaluation(result: dict[str, Any], which: str) -> str:
    return f"mean absolute error {result['mae']:.4f} on {result['samples']} images ({which})"


def brightness_of(model, path: Path) -> float:
    pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255
    with torch.no_grad():
        return float(model(torch.from_numpy(pixels)[None, None])[0, 0])


def predict_files(task, model, saved, paths: list[str], scale: float = 1.0) -> list[dict[str, Any]]:
    return [{"image": path, "brightness": scale * brightness_of(model, Path(path))} for path in paths]


def format_prediction(item: dict[str, Any]) -> str:
    return f"{item['image']}: brightness {item['brightness']:.3f}"


def answer(task, model, saved, image: Path, folder: Path, context: dict[str, Any]) -> dict[str, Any]:
    return {"brightness": brightness_of(model, image)}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    return []


# ---- the task's own command ------------------------------------------------------------------------------------
@command("brighten")
def add_brighten_parser(subparsers) -> None:
    p = subparsers.add_parser("brighten", help="scale images to a brightness, as a brightness run reads it")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train --task brightness`")
    p.add_argument("images", metavar="IMAGE", nargs="+", help="greyscale image files")
    p.add_argument("--target", type=float, default=0.5, help="the brightness to reach, in [0, 1] (default: 0.5)")
    p.add_argument("--out", metavar="DIR", required=True, help="write the scaled images here, under their names")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.set_defaults(run=run_brighten)


def run_brighten(args) -> int:
    from vitlab.engine.run import RunDir
    from vitlab.tasks.launch import load_run_model, load_task_for

    load_task_for(args.run_dir, "brighten")  # a run of another task is refused
    model = load_run_model(args.run_dir, RunDir(args.run_dir).selected_weights(args.weights))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.images:
        if (out / Path(name).name).resolve() == Path(name).resolve():
            raise ValueError(f"--out {out} holds {name}: the scaled image would overwrite it; give another folder")
        measured = brightness_of(model, Path(name))
        factor = args.target / max(measured, 1e-3)
        pixels = np.asarray(Image.open(name).convert("L"), dtype=np.float32) * factor
        Image.fromarray(pixels.clip(0, 255).round().astype(np.uint8)).save(out / Path(name).name)
        print(f"{name}: brightness {measured:.3f}, scaled by {factor:.3f} -> {out / Path(name).name}")
    return 0


# ---- the task's own page layout --------------------------------------------------------------------------------
@register_page("brightness")
def brightness_page(run, answer) -> None:
    """An image in, the brightness the run reads in it out."""
    image = gr.Image(type="pil", image_mode=None, label="image", elem_id=f"{run.name}-image")
    button = gr.Button("Measure", variant="primary", elem_id=f"{run.name}-run")
    reading = gr.Number(label="brightness", elem_id=f"{run.name}-output")
    button.click(lambda picture: answer(run, picture)["brightness"], [image], [reading])
