"""What a task is: the seam between the one training loop (engine/loop.py) and what a kind of training adds.

A task supplies
    Config             its options, a frozen dataclass (one field per option, with default and help)
    loop_defaults()    its defaults for the loop's shared options (epochs or steps, batch size, lr, ...)
    build_data()       a TaskData: `train` (an epoch loader or a stream) and `eval` (what `evaluate` reads)
    build_model()      the model, built from the config (after the data, which may fix classes and channels)
    loss(model, batch) {"loss": the total, other keys: logged}; DETR's weight-dict pattern
    evaluate(model, data) -> dict[str, float], reduced over processes
    best               the metric that picks best.safetensors and its direction: ("test_acc", "max")
and, optionally, `optimized_modules(model)` with `train_step(model, batch, stepper)` for several optimizers.
For `vitlab eval` and `vitlab predict` it also knows how to evaluate a finished run and predict with it.
It never writes its own loop.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from ..engine.config import LoopConfig
from ..engine.distributed import DistInfo
from ..engine.loop import TaskData


def with_absolute_paths(config: Any, *keys: str) -> Any:
    """The config with each named path option that is set made absolute (~ expanded): a run's config.json must
    name its files from any working directory."""
    changes = {key: str(Path(getattr(config, key)).expanduser().resolve()) for key in keys if getattr(config, key)}
    return dataclasses.replace(config, **changes) if changes else config


class Task:
    name: ClassVar[str]
    Config: ClassVar[type]
    best: ClassVar[tuple[str, str]]
    sample_name: ClassVar[str] = "samples"  # what the training throughput counts ("images" -> train_images_per_s)
    extra_files: ClassVar[tuple[str, ...]] = ()  # files the task writes into a run folder besides the loop's
    resumable: ClassVar[tuple[str, ...]] = ()  # task options a resumed run may change
    unused_parameters: ClassVar[bool] = False  # a step leaves some parameters without gradients (DDP must know)
    model_noun: ClassVar[str] = "a model"  # what --model must name, in an error: "a detector"
    # the module with a finished run's evaluate_run, format_evaluation, predict_files and format_prediction, imported
    # only when `vitlab eval` / `vitlab predict` need it (detection's and segmentation's `inference.py`)
    inference_module: ClassVar[str | None] = None

    def __init__(self, config: Any, loop: LoopConfig | None = None, dist: DistInfo | None = None) -> None:
        self.config = config
        self.loop = loop or LoopConfig()
        self.dist = dist or DistInfo()

    @classmethod
    def loop_defaults(cls, config: Any) -> dict[str, Any]:
        return {}

    @classmethod
    def recipes(cls) -> dict[str, dict[str, Any]]:
        """The loop defaults of each of the task's recipes, by name (for the command line's help)."""
        return {cls.name: cls.loop_defaults(cls.Config())}

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        """`saved`: the data record of the run being resumed (its `run_info()["data"]`), or None."""
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def model_config(self, name: str | None = None) -> Any:
        """The config of the registered model `name` (default: the task's `model` option), which must be of a
        family that declares this task among its `tasks`."""
        from ..engine.options import OptionError
        from ..models.registry import get_config, models_for_task

        name = name or self.config.model
        config = get_config(name)
        if self.name not in getattr(config, "tasks", ()):
            raise OptionError("model", f"must be {self.model_noun} ({', '.join(models_for_task(self.name))}), got "
                                       f"{name!r}")
        return config

    def loss(self, model: nn.Module, batch: Any) -> dict[str, Any]:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, data: Any) -> dict[str, Any]:
        raise NotImplementedError

    def optimized_modules(self, model: nn.Module) -> dict[str, nn.Module]:
        """One optimizer per entry; `train_step` steps them by name."""
        return {"model": model}

    def lr_scales(self) -> dict[str, float]:
        """Learning-rate factors by parameter-name prefix ({"backbone.": 0.1}); the rest trains at the loop's lr."""
        return {}

    def num_samples(self, batch: Any) -> int:
        return len(batch[0]) if isinstance(batch, list | tuple) else len(batch)

    def run_info(self) -> dict[str, Any]:
        """What config.json records about the data, beside the configs (classes, sizes, ...)."""
        return {}

    def check_resume(self, saved: dict[str, Any]) -> None:
        """Refuse to resume on data other than the run's own (`saved` is the run's config.json)."""

    # -- a finished run: `vitlab eval` and `vitlab predict`, through `inference_module` ------------------------
    def _inference(self):
        if self.inference_module is None:
            raise NotImplementedError(f"the {self.name} task has no evaluation or prediction of a finished run")
        return importlib.import_module(self.inference_module)

    def evaluate_run(self, model: nn.Module, saved: dict[str, Any], run_dir, **options: Any) -> dict[str, Any]:
        return self._inference().evaluate_run(self, model, saved, run_dir, **options)

    def format_evaluation(self, result: dict[str, Any], which: str) -> str:
        return self._inference().format_evaluation(result, which)

    def predict(self, model: nn.Module, saved: dict[str, Any], inputs: list[str], **options: Any
                ) -> list[dict[str, Any]]:
        return self._inference().predict_files(self, model, saved, inputs, **options)

    def format_prediction(self, item: dict[str, Any]) -> str:
        return self._inference().format_prediction(item)
