"""A task of one's own that takes no image, and the family it trains, written outside vitlab with its public API:
a number in, a number out. tests/test_extending.py trains it and serves it on the generic page with its options.

    toyline   a family: a straight line, y = w·x + b (one Linear(1, 1))
    affine    a task: fit the line y = 3x − 1 from noisy samples; the server answers `x` with the fitted line's y,
              applied `repeat` times, negated if asked
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.engine.loop import TaskData
from vitlab.engine.options import check, option
from vitlab.models.family import Model, ModelFamily
from vitlab.models.registry import create_model, register_config, register_model
from vitlab.tasks.base import Task, register_task


@register_config
@dataclass(frozen=True)
class ToyLineConfig(ModelFamily):
    family: ClassVar[str] = "toyline"
    title: ClassVar[str] = "ToyLine"
    description: ClassVar[str] = "a test's own straight line: y = w·x + b"
    tasks: ClassVar[tuple[str, ...]] = ("affine",)

    def summary(self) -> dict[str, Any]:
        return {"dim": 1, "depth": 1}

    def build(self) -> ToyLine:
        return ToyLine(self)


class ToyLine(Model):
    """x (B, 1) -> y (B, 1)."""

    def __init__(self, config: ToyLineConfig) -> None:
        super().__init__()
        self.config = config
        self.line = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.line(x)


@register_model
def toyline() -> ToyLineConfig:
    return ToyLineConfig()


@dataclass(frozen=True)
class AffineConfig:
    model: str = option("toyline", "a registered model whose family trains this task")
    samples: int = option(256, "noisy samples of y = 3x - 1")

    def __post_init__(self) -> None:
        check(self.samples >= 16, "samples", "at least 16", self.samples)


@dataclass(frozen=True)
class AffineServeOptions:
    x: float = option(0.0, "the number in")
    repeat: int = option(1, "apply the fitted line this many times")
    negate: bool = option(False, "answer -y")


def noisy_line(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 4 - 2
    return x, 3 * x - 1 + 0.01 * torch.randn(n, 1, generator=g)


class Epochs:
    """The same batches every epoch, in order: the loop's loader contract at its smallest."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> None:
        self.x, self.y, self.batch_size = x, y, batch_size

    def set_epoch(self, epoch: int) -> None:
        pass

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def __iter__(self):
        for i in range(len(self)):
            yield self.x[i * self.batch_size:(i + 1) * self.batch_size], self.y[i * self.batch_size:(i + 1) *
                                                                                   self.batch_size]


@register_task
class AffineTask(Task):
    name: ClassVar[str] = "affine"
    order: ClassVar[int] = 2000
    Config: ClassVar[type] = AffineConfig
    best: ClassVar[tuple[str, str]] = ("val_mae", "min")
    model_noun: ClassVar[str] = "a line"
    inference_module: ClassVar[str] = __name__
    ServeOptions: ClassVar[type] = AffineServeOptions
    needs_image: ClassVar[bool] = False

    @classmethod
    def loop_defaults(cls, config: AffineConfig) -> dict[str, Any]:
        return {"epochs": 20, "batch_size": 32, "lr": 0.1, "warmup_epochs": 0.0, "weight_decay": 0.0}

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        x, y = noisy_line(self.config.samples, self.loop.seed)
        return TaskData(train=Epochs(x, y, self.loop.batch_size), val=noisy_line(64, self.loop.seed + 1),
                        test=noisy_line(64, self.loop.seed + 2))

    def build_model(self) -> nn.Module:
        self.model_config()
        return create_model(self.config.model)

    def loss(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"loss": F.mse_loss(model(x), y)}

    def evaluate(self, model: nn.Module, data: Any) -> dict[str, float]:
        x, y = data
        with torch.no_grad():
            return {"mae": (model(x) - y).abs().mean().item()}


# the inference module: what the server answers
def answer(task, model, saved, image: Path | None, folder: Path, context: dict[str, Any], x: float = 0.0,
           repeat: int = 1, negate: bool = False) -> dict[str, Any]:
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    y = torch.tensor([[float(x)]])
    for _ in range(repeat):
        y = model(y)
    return {"x": x, "y": -float(y) if negate else float(y)}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    return []
