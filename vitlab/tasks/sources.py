"""What an inference command is pointed at, as one thing: a run folder written by `vitlab train`, a release tag
(`vitlab models --pretrained`), `hf-hub:org/name[@revision]`, or a weights file vitlab reads (its own
.safetensors, or another library's).

    source = open_source("detr_resnet50.coco")          # the task from the family, the preprocessing from the release
    source = open_source("runs/fm", weights="ema")      # a run, with its own weights and data record
    source.task, source.model, source.saved            # what eval, predict, serve and the runtimes take

A name has no run, so its `saved` is the record a run of its task would have written for what inference reads (the
classes, from the model's labels; the preprocessing, from the release or the file): the task's inference module
makes it (`record_for(task, model, preprocessing)`), and a task whose module has none takes runs only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..engine.run import RunDir
from ..models.family import family_config
from .base import Task
from .launch import get_task, load_run_model, load_task, model_config

GRAPH_CACHE = "vitlab--graphs"  # a name's runtime graphs, in the hub cache beside the weights they are made from


@dataclass
class Source:
    """A run or a named model, ready for inference: its task, its model (eval mode) and the record its inference
    reads (`saved`: a run's config.json, or what a name stands for)."""

    name: str  # as the user gave it
    task: Task
    model: nn.Module
    saved: dict[str, Any]
    weights: str  # a run's best / last / ema, or the name itself
    run_dir: Path | None  # None for a name

    @property
    def runtime_cache(self) -> tuple[Path, str]:
        """Where graphs of this model for the runtimes are kept, and their file-name prefix (runtime/export.py)."""
        from ..engine.run import PUBLISHED_WEIGHTS, WEIGHT_NAMES
        from ..interop.hub import HF_HUB_PREFIX, cache_dir, fetch
        from ..runtime.export import run_cache

        # a run's own weights file (best, last, ema; a pushed run's model), or weights from elsewhere (--weights)
        own_weights = self.run_dir is not None and self.weights in (*WEIGHT_NAMES, PUBLISHED_WEIGHTS)
        pushed = self.run_dir is not None and self.name.startswith(HF_HUB_PREFIX)
        if self.run_dir is not None and not pushed:
            return run_cache(self.run_dir, self.weights, None if own_weights else fetch(self.weights))
        # a name's graphs (a pushed run's too: its snapshot in the hub cache is never written to); a pushed run with
        # weights from elsewhere keeps theirs apart, named by them
        folder = cache_dir() / GRAPH_CACHE / re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name.removeprefix("hf-hub:"))
        if pushed and not own_weights:
            return run_cache(folder, self.weights, fetch(self.weights))
        cache = run_cache(folder, self.name, fetch(self.name))
        if pushed:  # the graphs it was published with (--include-graphs), if any
            from .publish import seed_published_graphs

            seed_published_graphs(self.run_dir, *cache)
        return cache


def is_run_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder for `vitlab train`'s reader (its config.json names a task, or it holds no model
    weights of another library: the run reader then says what is wrong with it), not a checkpoint's folder (a
    Hugging Face model's config.json and weights)."""
    from ..interop.hub import HUB_WEIGHT_FILES

    folder = Path(path)
    if not folder.is_dir():
        return False
    try:
        names_task = "task" in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        names_task = False
    return names_task or not any((folder / name).is_file() for name in HUB_WEIGHT_FILES)


def keeps_results(path: str | os.PathLike) -> bool:
    """Whether a command may write what it computes (a confusion matrix, a detector's results file) into `path`: a
    run folder of the user's, never a model's folder it was given to read, nor a pushed run's snapshot in the hub
    cache (read as the run it is, written to by no command)."""
    from ..interop.hub import cache_dir

    if not is_run_folder(path):
        return False
    return cache_dir().resolve() not in Path(path).resolve().parents


def open_source(source: str | os.PathLike, *, task: str | None = None, weights: str | None = None,
                command: str | None = None) -> Source:
    """The run folder or named model `source`, for `command` (a task's own command refuses another task's model).

    `task`: for a name whose family trains several tasks, which one (else refused); for a run, checked against its
    own. `weights`: a run's `best`, `last`, `ema` or other weights for its model; a name is its own weights."""
    name = os.fspath(source)
    if is_run_folder(name):
        return _open_run(name, task, weights, command)
    pushed = _pushed_run(name)
    if pushed is not None:  # a run `vitlab push` sent to the Hub: read as the run it is, from its snapshot
        return dataclasses.replace(_open_run(str(pushed), task, weights, command), name=name)
    if weights is not None:
        raise ValueError(f"--weights picks the weights of a run folder; {name} is a model by name, its own weights "
                         f"(drop --weights, or give the weights as the model: vitlab ... {weights})")
    return _open_name(name, task, command)


def _pushed_run(name: str) -> Path | None:
    """The snapshot folder of the run pushed to the Hub (`vitlab push`) that `name` (hf-hub:org/name[@revision])
    stands for; None for any other name."""
    from ..interop.hub import HF_HUB_PREFIX, fetch

    if not name.startswith(HF_HUB_PREFIX):
        return None
    folder = fetch(name)
    try:
        record = json.loads((folder / "config.json").read_text()) if folder.is_dir() else {}
    except (OSError, ValueError):
        return None
    return folder if isinstance(record, dict) and "task" in record and "published" in record else None


def _open_run(name: str, task: str | None, weights: str | None, command: str | None) -> Source:
    from .launch import load_task_for

    run_task, saved = load_task_for(name, command) if command else load_task(name)
    if task is not None and task != run_task.name:
        raise ValueError(f"{name} is a {run_task.name} run; --task {task} does not apply to it (drop --task)")
    weights = RunDir(name).selected_weights(weights)
    return Source(name, run_task, load_run_model(name, weights), saved, weights, Path(name))


def _open_name(name: str, task: str | None, command: str | None) -> Source:
    from ..interop.convert import model_from_checkpoint
    from ..interop.hub import HF_HUB_PREFIX, WEIGHT_FILE_SUFFIXES, names_remote_weights
    from ..interop.preprocessing import preprocessing_for
    from .base import TASKS

    if not (Path(name).exists() or names_remote_weights(name) or name.startswith(HF_HUB_PREFIX)):
        from ..interop.hub import find_release

        if "." in name and "/" not in name and os.sep not in name and Path(name).suffix not in WEIGHT_FILE_SUFFIXES:
            find_release(name)  # an unknown tag: the error names the close ones
        raise FileNotFoundError(f"no run folder or model at {name}: give a folder written by `vitlab train`, a "
                                f"release tag (vitlab models --pretrained), hf-hub:org/name or a weights file")
    model = model_from_checkpoint(name).eval()
    config = family_config(model)
    task_name = _task_of(name, config, task, command, TASKS)
    cls = get_task(task_name)
    options = {"model": model.model_name} if model.model_name and "model" in {
        f.name for f in dataclasses.fields(cls.Config)} else {}
    named_task = cls(cls.Config(**options))
    record_for = getattr(named_task._inference(), "record_for", None) if cls.inference_module else None
    if record_for is None:
        raise ValueError(f"{name} is a {task_name} model; `vitlab {command or 'predict'}` takes a {task_name} run "
                         f"folder only (train one with `vitlab train --task {task_name} --weights {name}`)")
    record = record_for(named_task, model, preprocessing_for(name))
    # "config" holds a run's training options; a model by name was trained with none of vitlab's (no test-time flip)
    saved = {"task": task_name, "source": name, "config": options, "model_config": model_config(model),
             "data": record}
    return Source(name, named_task, model, saved, name, None)


def _task_of(name: str, config: Any, task: str | None, command: str | None, tasks: Any) -> str:
    """The task a named model is used for: its family's one, or `task` among its family's several."""
    trained = tuple(config.tasks)
    if command is not None and task is None:
        trained = tuple(t for t in trained if t not in tasks or command in tasks[t].commands) or trained
    if task is not None:
        if task not in trained:
            raise ValueError(f"{name} is a {config.title or config.family} model, which does {', '.join(trained)}; "
                             f"not --task {task}")
        return task
    if len(trained) != 1:
        raise ValueError(f"{name} is a {config.title or config.family} model, which does several tasks "
                         f"({', '.join(trained)}): say which with --task")
    return trained[0]
