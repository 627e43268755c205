"""The runs a server serves, and what each answers for one image.

Each answer is the run's task's own (`task.answer`, the functions `vitlab predict`, `vitlab restore`, `vitlab sample`
and `vitlab reconstruct` call): the upload is written as a PNG into a folder of its own for the one request, the
task reads it from there and writes its pictures beside it, and they come back as base64 PNG. Nothing is shared
between requests but the models, which are only read. This module knows no task by name.

With `reload`, a run folder's weights file is watched: when training replaces it (a new best checkpoint), the next
answer first loads it into a copy of the model and answers from that; answers in flight keep the model they started
with. Every checkpoint is written whole and renamed into place (checkpoint.py), so what is read is one complete
file, the old or the new, never a half-written one.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from .uploads import BadInput, png_safe


@dataclass
class ServedRun:
    """A run folder loaded for serving: its task (rebuilt from config.json), its model (eval mode, loaded once)
    and what the task loads once besides (`context`: a prior's VQGAN)."""

    name: str
    path: Path
    task: Any
    saved: dict[str, Any]
    model: nn.Module
    weights: str
    context: dict[str, Any] = field(default_factory=dict)
    examples: list[Path] = field(default_factory=list)
    follows: Path | None = None  # with reload: the weights file whose replacement is loaded before the next answer
    _loaded: tuple[int, int, int] | None = None  # that file's identity when its weights were loaded
    _reloading: threading.Lock = field(default_factory=threading.Lock)

    def current_model(self) -> nn.Module:
        """The model to answer with: with reload, the weights the run's file holds now (a file replaced since the
        last answer is loaded first, into a copy of the model); a file that cannot be read keeps the old weights,
        with a warning."""
        if self.follows is None:
            return self.model
        with self._reloading:
            now = file_identity(self.follows)
            if now is not None and now != self._loaded:
                from ..checkpoint import read_state_dict

                self._loaded = now  # a damaged file is tried again only once it is replaced
                try:
                    model = copy.deepcopy(self.model)
                    model.load_state_dict(read_state_dict(self.follows)[0])
                except Exception as error:  # noqa: BLE001 - the server keeps answering with the weights it has
                    warnings.warn(f"{self.name}: {self.follows} could not be loaded ({error}); still serving the "
                                  f"weights loaded before", stacklevel=2)
                else:
                    self.model = model
            return self.model

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
        return self.task.needs_image

    @property
    def options(self) -> dict[str, str]:
        """The form fields the run reads beside `image`, with their help (its task's ServeOptions)."""
        return options_of(self.task)

    def describe(self) -> dict[str, Any]:
        """What `GET /api/runs` says of the run."""
        info: dict[str, Any] = {"name": self.name, "task": self.kind, "model": self.model_name,
                                "weights": self.weights, "classes": self.classes, "needs_image": self.needs_image,
                                "options": self.options, "examples": [p.name for p in self.examples]}
        if self.model.task_names:
            info["degradations"] = list(self.model.task_names)
        return info


def options_of(task: Any) -> dict[str, str]:
    """A task's form fields and their help, with defaults: its ServeOptions."""
    fields = dataclasses.fields(task.ServeOptions)
    return {f.name: f"{f.metadata.get('help', '')} (default {_default_text(f)})" for f in fields}


def uploads_of(task: Any) -> tuple[str, ...]:
    """The task's options that are uploaded images (declared `option(..., upload=True)`), besides `image`."""
    return tuple(f.name for f in dataclasses.fields(task.ServeOptions) if f.metadata.get("upload"))


def field_types(task: Any) -> dict[str, type]:
    """Each of the task's form fields (its ServeOptions but the uploads) and the type its text is read as."""
    import types
    import typing

    hints = typing.get_type_hints(task.ServeOptions)
    found = {}
    for f in dataclasses.fields(task.ServeOptions):
        if f.metadata.get("upload"):
            continue
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # int | None -> int
            hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
        found[f.name] = hint
    return found


def _default_text(f: dataclasses.Field) -> str:
    if f.metadata.get("default_text"):
        return f.metadata["default_text"]
    return str(f.default).lower() if isinstance(f.default, bool) else str(f.default)


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, modification time, size): changes when a file is replaced; None where there is no file."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def load_runs(paths: list[str | Path], weights: str = "best",
              runtime: Callable[[nn.Module, Any], nn.Module] | None = None, reload: bool = False) -> list[ServedRun]:
    """Each run folder or model by name (a release tag, hf-hub:org/name, a weights file: tasks/sources.py) loaded
    once; names are the folder names (a model's name made URL-safe), made unique with -2, -3, ... `weights`: which of
    each run's weights. `runtime(model, source)`: the model to serve in place of each one's own (a task decoding in
    a Python loop stays on torch). `reload`: follow each run folder's weights file (see the module's doc); run
    folders served on torch only."""
    from ..engine.run import RunDir
    from ..tasks.sources import is_run_folder, open_source

    if reload and runtime is not None:
        raise ValueError("--reload serves runs on torch's own path: a runtime's graph would have to be made again "
                         "for each new checkpoint (leave out --runtime, --precision and --threads, or --reload)")

    runs: list[ServedRun] = []
    for given in map(str, paths):
        path = Path(given)
        if path.is_dir() and not (path / "config.json").is_file() and is_run_folder(path):
            raise FileNotFoundError(f"{path} is not a run folder (no config.json): give folders written by "
                                    f"`vitlab train --out RUN`, or models by name")
        run_folder = is_run_folder(path)
        if reload and not run_folder:
            raise ValueError(f"--reload follows run folders as they train; {given} is a model by name, whose "
                             f"weights do not change (serve it without --reload)")
        kept = RunDir(path).kept_weights(weights) if run_folder else None
        follows = RunDir(path).weights_file(kept) if reload else None
        loaded = file_identity(follows) if follows else None  # before reading: a newer file is loaded at once
        source = open_source(given, weights=kept)
        task = source.task
        if not task.serves():
            from ..tasks import TASKS

            servable = ", ".join(name for name, cls in TASKS.items() if cls.serves())
            raise ValueError(f"{given} is a {task.name} {'run' if run_folder else 'model'}; `vitlab serve` serves "
                             f"image runs ({servable}); use its own commands for it")
        model = source.model.requires_grad_(False)
        if runtime is not None and task.python_loop is None:
            model = runtime(model, source)
        base = path.resolve().name if run_folder else re.sub(r"[^A-Za-z0-9_.-]+", "-", given.removeprefix("hf-hub:"))
        name, suffix = base, 2
        while any(run.name == name for run in runs):
            name, suffix = f"{base}-{suffix}", suffix + 1
        run = ServedRun(name, path, task, source.saved, model, source.weights, task.serving_context(source.saved),
                        follows=follows, _loaded=loaded)
        run.examples = example_images(run)
        runs.append(run)
    return runs


def example_images(run: ServedRun, count: int = 4) -> list[Path]:
    """Images to try the run on, as its task finds them (its held-out images where it has files)."""
    from ..tasks.launch import get_task

    return [p for p in get_task(run.kind).examples(run.saved, count) if p.is_file()][:count]


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


def predict(run: ServedRun, image: Image.Image | None, filename: str | None = None, **options: Any
            ) -> dict[str, Any]:
    """The run's answer for one image (and its options, uploaded images among them: `uploads_of`) as JSON-ready
    data, under inference mode."""
    if run.needs_image and image is None:
        raise BadInput(422, f"the run {run.name} ({run.kind}) needs an image: send one in the multipart form "
                            f"field `image`")
    unknown = sorted(set(options) - set(run.options))
    if unknown:
        raise BadInput(422, f"{', '.join(unknown)} {'is not an option' if len(unknown) == 1 else 'are not options'}"
                            f" of a {run.kind} run; it takes {', '.join(run.options) or 'no options'}")
    for name in uploads_of(run.task):
        if options.get(name) is not None:
            options[name] = png_safe(options[name])
    with tempfile.TemporaryDirectory(prefix="vitlab-serve-") as tmp, torch.inference_mode():
        folder = Path(tmp)
        stem = safe_stem(filename)
        path = None
        if image is not None:
            path = folder / "in" / f"{stem}.png"
            path.parent.mkdir()
            png_safe(image).save(path)
        try:
            result = encoded(run.task.answer(run.current_model(), run.saved, path, folder, run.context, **options))
        except (ValueError, FileNotFoundError) as error:  # what the task refuses (a threshold out of range, ...)
            if isinstance(error, BadInput):
                raise
            raise BadInput(422, str(error)) from error
    return {"run": run.name, "task": run.kind, **({"image": filename or f"{stem}.png"} if image is not None else {}),
            **result}


def encoded(answer: Any, key: str = "") -> Any:
    """A task's answer with its pictures (PIL images or files, under keys ending in `_png`) as base64 PNG text."""
    if isinstance(answer, dict):
        return {k: encoded(v, k) for k, v in answer.items()}
    if isinstance(answer, list):
        return [encoded(v, key) for v in answer]
    if key.endswith("_png") and isinstance(answer, Image.Image | Path):
        return encode_png(answer)
    return answer


def decode_picture(text: str) -> Image.Image:
    """A base64 PNG (as the API returns it) -> the PIL image, palette and all."""
    import io

    return Image.open(io.BytesIO(base64.b64decode(text)))


def decode_png(text: str) -> np.ndarray:
    """A base64 PNG (as the API returns it) -> its pixels."""
    return np.asarray(decode_picture(text))
