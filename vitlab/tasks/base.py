"""What a task is: the seam between vitlab's generic machinery and what a kind of training adds. A task has two
halves, each used by its own side; `Task` is both.

The training half, `TrainingTask` (what `vitlab train` and the one loop, engine/loop.py, need):
    name, Config        the task's name and its options, a frozen dataclass (one field per option, with default, help)
    loop_defaults()     its defaults for the loop's shared options (epochs or steps, batch size, lr, ...)
    build_data()        a TaskData: `train` (an epoch loader or a stream), `val` (selects the best checkpoint) and
                        `test` (scored once at the end; None where the data has no test part)
    build_model()       the model, built from the config (after the data, which may fix classes and channels);
                        `model_config()` checks that --model names a family that trains the task (`model_noun`),
                        `default_model` is built where none is named
    loss, evaluate, best, optimized_modules, lr_scales, num_samples, train_step, sample_name, unused_parameters
                        what the loop itself asks (engine/loop.py's Trainable, which this half extends)
    run_info(), extra_files, resumable   what config.json records; what a resumed run may change
    recipes()           its recipes' loop defaults, by name (the help)
It never writes its own loop.

The inference half, `InferenceTask` (`vitlab eval`, `predict`, `serve`, `quantize`, the runtimes and the help):
    EvalOptions, PredictOptions, ServeOptions   typed options (dataclasses of `option` fields): the command line's
                                                flags and the server's form fields are generated from them
    evaluate_run(), format_evaluation()         a finished run scored on its held-out data, as JSON and as text
    predict(), format_prediction()              what the run makes of input files
    answer(), serving_context(), serves()       the server's JSON for one upload (pictures as PIL images or files)
    page, needs_image, examples()               the server page's layout (serve/page.py's PAGES; none: the generic
                                                page), whether it needs an image, images to try it on
    order, commands                             where `--task` and the page list it; its own commands
    python_loop                                 why its inference cannot run on an inference runtime, if it cannot
    int8_guard, int8_agreement()                what int8 may cost it (`vitlab quantize`, tasks/int8.py)
    check_data()                                `vitlab check-data` of a folder, split by split
The functions behind eval, predict and answer live in the task's `inference_module`, imported only when used.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from ..engine.config import LoopConfig
from ..engine.distributed import DistInfo
from ..engine.loop import TaskData, Trainable
from ..models.family import family_config
from ..registry import Registry
from .weights_options import released


def with_absolute_paths(config: Any, *keys: str) -> Any:
    """The config with each named path option that is set made absolute (~ expanded): a run's config.json must
    name its files from any working directory. Released weights by name (a tag, hf-hub:org/name) stay names."""
    from ..interop.hub import names_remote_weights

    changes = {key: str(Path(getattr(config, key)).expanduser().resolve()) for key in keys
               if getattr(config, key) and not names_remote_weights(getattr(config, key))}
    return dataclasses.replace(config, **changes) if changes else config


@dataclass(frozen=True)
class NoOptions:
    """The options of a task that takes none here."""


DOCS_EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"  # Fashion-MNIST test images, in a checkout
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


# every task by name, in the order `--task` lists them (each task's `order`); the first lookup imports the task
# packages of vitlab/tasks/, which register themselves: a task is a package, and no list names it
TASKS: Registry[type[Task]] = Registry("task", discover=__name__.rpartition(".")[0], packages=True,
                                       order=lambda task: task.order)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task known to `train`, the command line and the server, under `cls.name`."""
    return TASKS.register(cls.name, cls)


def class_names(model: nn.Module, saved: dict[str, Any]) -> list[str]:
    """What a run's model calls its classes: its own labels (they travel with the weights), else the names its run's
    data recorded (a model saved without them)."""
    config = family_config(model)
    return list(config.labels) if config is not None and config.labels else list(saved["data"]["classes"])


def release_overrides(config: Any) -> dict[str, Any]:
    """The model config fields the release `config.weights` names sets (a two-stage Deformable DETR, ADE20K's 150
    classes), where it is a release of the run's model; the task's own arguments (its classes, its crop) come
    after."""
    release = released(getattr(config, "weights", None))  # a task whose config takes no weights: none
    return release.config_overrides if release and release.model == config.model else {}


class TrainingTask(Trainable):
    """The training half of a task (see the module's doc)."""

    name: ClassVar[str]
    Config: ClassVar[type]
    extra_files: ClassVar[tuple[str, ...]] = ()  # files the task writes into a run folder besides the loop's
    resumable: ClassVar[tuple[str, ...]] = ()  # task options a resumed run may change
    model_noun: ClassVar[str] = "a model"  # what --model must name, in an error: "a detector"
    default_model: ClassVar[str | None] = None  # built where --model is not given and --weights names no release

    def __init__(self, config: Any, loop: LoopConfig | None = None, dist: DistInfo | None = None) -> None:
        self.config = self._with_model(config)
        self.loop = loop or LoopConfig()
        self.dist = dist or DistInfo()

    @classmethod
    def _with_model(cls, config: Any) -> Any:
        """The config with `model` filled in where not given: the model of the release --weights names (so that
        `vitlab train --weights detr_resnet50.coco --data DIR` fine-tunes DETR-R50), else the task's default."""
        if getattr(config, "model", "") is not None:
            return config
        release = released(getattr(config, "weights", None))
        model = release.model if release else cls.default_model
        return dataclasses.replace(config, model=model) if model else config

    @classmethod
    def loop_defaults(cls, config: Any) -> dict[str, Any]:
        return {}

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        """`saved`: the data record of the run being resumed (its `run_info()["data"]`), or None; data other than
        the run's own is refused (a resumed run continues on what it started on)."""
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
        if self.name not in config.tasks:
            raise OptionError("model", f"must be {self.model_noun} ({', '.join(models_for_task(self.name))}), got "
                                       f"{name!r}")
        return config

    def run_info(self) -> dict[str, Any]:
        """What config.json records about the data, beside the configs (classes, sizes, ...)."""
        return {}

    @classmethod
    def recipes(cls) -> dict[str, dict[str, Any]]:
        """The loop defaults of each of the task's recipes, by name (for the command line's help)."""
        return {cls.name: cls.loop_defaults(cls.Config())}


class InferenceTask:
    """The inference half of a task (see the module's doc)."""

    name: ClassVar[str]
    order: ClassVar[int] = 1000  # where `--task`, the server's tabs and the docs list it: lowest first
    commands: ClassVar[tuple[str, ...]] = ()  # the task's own `vitlab` commands besides eval and predict
    # the module with a finished run's evaluate_run, format_evaluation, predict_files, format_prediction, answer and
    # examples, imported only when `vitlab eval` / `vitlab predict` / the server need it (detection's `inference.py`)
    inference_module: ClassVar[str | None] = None
    EvalOptions: ClassVar[type] = NoOptions
    PredictOptions: ClassVar[type] = NoOptions
    ServeOptions: ClassVar[type] = NoOptions
    python_loop: ClassVar[str | None] = None  # why inference runs on torch only (it decodes in a Python loop)
    needs_image: ClassVar[bool] = True  # the server's answer needs an uploaded image
    page: ClassVar[str | None] = None  # the server page's layout (serve/page.py's PAGES); None: the generic page
    # what int8 may cost: evaluate_run's figures (dotted keys, `*` for any) -> the largest drop allowed
    int8_guard: ClassVar[dict[str, float]] = {}
    int8_agreement_floor: ClassVar[float] = 0.99  # the least share of answers int8 must keep (int8_agreement)
    int8_agreement_of: ClassVar[str] = "answers"  # what int8_agreement counts, in the report: "images"

    def int8_agreement(self, reference: Any, quantized: Any) -> tuple[float, int] | None:
        """How many of one batch's answers the int8 model keeps, of how many: the fp32 and int8 models' outputs on
        the same inputs (what the model returns). None: the task measures no agreement, only its figures."""
        return None

    # -- a finished run: `vitlab eval` and `vitlab predict`, through `inference_module` ------------------------
    @classmethod
    def _inference(cls):
        if cls.inference_module is None:
            raise NotImplementedError(f"the {cls.name} task has no evaluation or prediction of a finished run")
        return importlib.import_module(cls.inference_module)

    def evaluate_run(self, model: nn.Module, saved: dict[str, Any], run_dir, split: str = "test", **options: Any
                     ) -> dict[str, Any]:
        """The run's model scored on `split` ("test", or "val") of its data; `options`: fields of EvalOptions,
        checked by it. Where the data has no test part, the validation part is scored and `result["split"]` says
        so."""
        if split not in ("test", "val"):
            raise ValueError(f"split must be 'test' or 'val', got {split!r}")
        evaluate_run = self._inference().evaluate_run
        if "split" not in inspect.signature(evaluate_run).parameters:
            if split != "test":
                raise ValueError(f"`vitlab eval` of a {self.name} run scores its held-out data only; drop --split")
            return evaluate_run(self, model, saved, run_dir, **self.options(self.EvalOptions, options))
        return evaluate_run(self, model, saved, run_dir, split=split, **self.options(self.EvalOptions, options))

    def format_evaluation(self, result: dict[str, Any], which: str) -> str:
        return self._inference().format_evaluation(result, which)

    def predict(self, model: nn.Module, saved: dict[str, Any], inputs: list[str], **options: Any
                ) -> list[dict[str, Any]]:
        """`options`: fields of PredictOptions, checked by it."""
        if not hasattr(self._inference(), "predict_files"):
            raise ValueError(f"`vitlab predict` does not take a {self.name} run (see `vitlab --help` for the "
                             f"commands that do)")
        return self._inference().predict_files(self, model, saved, inputs,
                                               **self.options(self.PredictOptions, options))

    def format_prediction(self, item: dict[str, Any]) -> str:
        return self._inference().format_prediction(item)

    def answer(self, model: nn.Module, saved: dict[str, Any], image: Path | None, folder: Path,
               context: dict[str, Any], **options: Any) -> dict[str, Any]:
        """The server's answer for one upload (written to `image`; `folder` is the request's own), JSON-ready but for
        pictures, given as PIL images or files under keys ending in `_png`. `options`: ServeOptions fields (an
        uploaded `reference` image among them); `context`: what `serving_context` prepared once per run."""
        return self._inference().answer(self, model, saved, image, folder, context,
                                        **self.options(self.ServeOptions, options))

    def serving_context(self, saved: dict[str, Any]) -> dict[str, Any]:
        """What the server loads once for a run besides its model (a prior's VQGAN)."""
        return {}

    @classmethod
    def check_data(cls, data: str, **options: Any) -> list[Any]:
        """`vitlab check-data`: every split of the folder `data` checked as a run checks it when it starts, and every
        image decoded besides; nothing trained. One vitlab.data.checks.CheckReport per split."""
        raise NotImplementedError(f"the {cls.name} task has no data check")

    @classmethod
    def serves(cls) -> bool:
        """Whether the server can answer for a run of this task (its inference module has an `answer`)."""
        return cls.inference_module is not None and hasattr(cls._inference(), "answer")

    @classmethod
    def examples(cls, saved: dict[str, Any], count: int = 4) -> list[Path]:
        """Images to try a run on (`saved`: its config.json): its held-out images where they are files."""
        return cls._inference().examples(saved, count) if cls.inference_module else []

    @classmethod
    def options(cls, options_type: type, given: dict[str, Any]) -> dict[str, Any]:
        """`given` checked against `options_type` (unknown names and bad values are errors), as keyword arguments;
        an upload field (`reference`) passes through as it is."""
        from ..engine.options import OptionError

        names = [field.name for field in dataclasses.fields(options_type)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            takes = ", ".join(names) or "no options"
            raise OptionError(unknown[0], f"is not an option of a {cls.name} run; it takes {takes}")
        checked = options_type(**given)
        return {name: getattr(checked, name) for name in names}


class Task(TrainingTask, InferenceTask):
    """A kind of training: its training half and its inference half (see the module's doc)."""
