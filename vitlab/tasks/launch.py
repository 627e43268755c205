"""From options to a trained run folder, and from a run folder back to its task and model.

    result = train(data="fashion-mnist", out="runs/fm")                 # the default recipe
    result = train(task="seq2seq", problem="reverse", out="runs/rev")
    resume("runs/fm", epochs=12)                                       # continue, or extend, a stopped run
    model, config = load_run("runs/fm")                                # its best weights, chosen on validation

Options are the fields of the task's config and of the loop's (`LoopConfig`); each is resolved once, in this
order: what the caller gave, the task's recipe for its data, the dataclass default.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..engine.config import LoopConfig
from ..engine.distributed import barrier, broadcast_object, init_distributed
from ..engine.loop import fit
from ..engine.options import FixedOptionsError, from_dict, split_options
from ..engine.run import PREVIOUS_STATE_FILE, STATE_FILE, RunDir, RunFileError
from .base import Task

# loop options a resumed run may change; the rest must stay what the run started with
RESUMABLE = ("epochs", "steps", "max_epochs_this_run", "max_steps_this_run", "device", "threads", "compile",
             "workers", "curves", "checkpoint_every", "checkpoint_every_steps")


def get_task(name: str) -> type[Task]:
    from .base import TASKS

    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def loop_config(task_cls: type[Task], config: Any, given: dict[str, Any]) -> LoopConfig:
    """The loop's options: the caller's, over the task's defaults. A run's length is epochs or steps: giving
    one replaces the default of the other."""
    defaults = dict(task_cls.loop_defaults(config))
    if "steps" in given:
        defaults.pop("epochs", None)
    if "epochs" in given:
        defaults.pop("steps", None)
    if "warmup_epochs" in given:
        defaults.pop("warmup_steps", None)
    return LoopConfig(**{**defaults, **given})


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA device here; use device cpu")
    return torch.device(device)


DEFAULT_TASK = "classification"  # what `vitlab train` trains without --task


def train(task: str = DEFAULT_TASK, *, out: str | None = None, overwrite: bool = False,
          **options: Any) -> dict[str, Any]:
    """Train a new run; returns the last metrics row plus `run_dir`. `options`: fields of the task's config and
    of LoopConfig (`train(epochs=2, model="vit_mini_patch7_28", lr=1e-3)`)."""
    cls = get_task(task)
    task_options, loop_options = split_options(options, cls.Config, LoopConfig)
    config = cls.Config(**task_options)
    return _run(cls, config, loop_config(cls, config, loop_options), out, overwrite=overwrite, saved=None)


def resolved_recipe(task: str = DEFAULT_TASK, **options: Any) -> tuple[Any, LoopConfig]:
    """(the task's config, the loop's) that `train(task, **options)` would run with: every default filled from the
    task's recipe and the model it builds where none is named. Nothing is read or trained."""
    cls = get_task(task)
    task_options, loop_options = split_options(options, cls.Config, LoopConfig)
    config = cls.Config(**task_options)
    loop = loop_config(cls, config, loop_options)
    return cls(config, loop).config, loop


def resume(run_dir: str | Path, **changes: Any) -> dict[str, Any]:
    """Continue a stopped run from its last checkpoint, with its own options; only the loop's RESUMABLE options
    and the task's `resumable` ones may change (None keeps the saved value). A larger `epochs` or `steps`
    extends the run: the schedule is stretched to the new end."""
    run = RunDir(run_dir)
    if not run.file("config.json").is_file():
        raise FileNotFoundError(f"nothing to resume in {run_dir}: it holds no run (no config.json); start a new run "
                                f"with `vitlab train --out {run_dir}`")
    saved = run_config(run)
    cls = get_task(saved["task"])
    changes = {key: value for key, value in changes.items() if value is not None}
    fixed = sorted(key for key in changes if key not in RESUMABLE + cls.resumable)
    if fixed:
        raise FixedOptionsError(fixed, RESUMABLE + cls.resumable)
    task_changes, loop_changes = split_options(changes, cls.Config, LoopConfig)
    config = dataclasses.replace(from_dict(cls.Config, saved["config"]), **task_changes)
    loop = from_dict(LoopConfig, saved["loop"])
    if "epochs" in loop_changes:
        loop = dataclasses.replace(loop, steps=None)
    if "steps" in loop_changes:
        loop = dataclasses.replace(loop, epochs=None)
    # this stop's limits apply to this stop only
    loop = dataclasses.replace(loop, max_epochs_this_run=None, max_steps_this_run=None, **loop_changes)
    return _run(cls, config, loop, str(run.path), overwrite=False, saved=saved)


def train_or_resume(task: str, out: str | Path, **options: Any) -> dict[str, Any]:
    """`vitlab train --resume auto --out DIR`: resume the run in `out` where it holds a checkpoint of this same run
    (the same task and options, but for the RESUMABLE ones, which take the new values), start it there otherwise (a
    new or empty folder, or this run stopped before its first checkpoint). A folder holding another run is refused,
    naming what differs. What a torchrun job with --max-restarts runs: each restart comes back where the last
    checkpoint left it."""
    run = RunDir(out)
    if not run.file("config.json").is_file():
        return train(task, out=str(out), **options)
    saved = run_config(run)
    cls = get_task(task)
    if saved["task"] != task:
        raise ValueError(f"--resume auto: {out} holds a {saved['task']} run, not a {task} one; give another --out")
    task_options, loop_options = split_options(options, cls.Config, LoopConfig)
    config = cls.Config(**task_options)
    loop = loop_config(cls, config, loop_options)
    changeable = set(RESUMABLE + cls.resumable)
    mine = json.loads(json.dumps({**dataclasses.asdict(config), **dataclasses.asdict(loop)}))
    theirs = {**saved["config"], **saved.get("loop", {})}
    # None: the task's default, which the task resolved when the run started (config.json holds the value)
    differ = sorted(key for key in mine if key not in changeable and key in theirs and mine[key] is not None
                    and mine[key] != theirs[key])
    if differ:
        shown = "; ".join(f"{key}: {theirs[key]!r} there, {mine[key]!r} now" for key in differ)
        raise ValueError(f"--resume auto: {out} holds another run ({shown}); give another --out, or the same options")
    if not any(run.file(name).is_file() for name in (STATE_FILE, PREVIOUS_STATE_FILE)):
        # this run, stopped before its first checkpoint: start it again
        return train(task, out=str(out), overwrite=True, **options)
    return resume(out, **{key: value for key, value in options.items() if key in changeable})


def _run(cls: type[Task], config: Any, loop: LoopConfig, out: str | None, overwrite: bool,
         saved: dict[str, Any] | None) -> dict[str, Any]:
    threads_before = torch.get_num_threads()
    if loop.threads:
        torch.set_num_threads(loop.threads)  # same threads, same float reductions: a resume must keep them
    try:
        dist = init_distributed(resolve_device(loop.device))
        task = cls(config, loop, dist)
        # every process writes to the folder rank 0 names (a default name holds a timestamp)
        default = f"runs/{cls.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run = RunDir(broadcast_object(out or default, dist))
        made_here = saved is None and dist.is_main and not run.path.exists()
        try:
            if saved is None and dist.is_main:
                run.prepare(overwrite, cls.extra_files, inputs=paths_read(config, loop))
            barrier(dist)
            data = task.build_data(saved=saved.get("data") if saved else None)
            torch.manual_seed(loop.seed)
            model = task.build_model()
        except BaseException:
            if made_here and run.path.is_dir() and not any(run.path.iterdir()):
                run.path.rmdir()  # a start that failed (unreadable --weights, bad data) leaves no folder behind
            raise
        info = {"task": cls.name, "config": dataclasses.asdict(task.config), **task.run_info(),
                "model_config": model_config(model)}
        metrics = fit(task, model, data, loop, run, resume=saved is not None, run_info=info, dist=dist)
        return {**metrics, "run_dir": str(run.path)}
    finally:
        torch.set_num_threads(threads_before)  # leave the process as it was (a notebook, a test session)


def paths_read(*configs: Any) -> list[tuple[str, Path]]:
    """The options of `configs` (dataclasses) that name a file or folder on disk, which the run reads: --weights,
    --teacher, --vqgan, --data, ... (a release's name or the built-in data set's is not a path)."""
    found = []
    for config in configs:
        for field in dataclasses.fields(config):
            value = getattr(config, field.name)
            for item in value if isinstance(value, list | tuple) else [value]:
                if isinstance(item, str | Path) and str(item) and Path(item).exists():
                    found.append((field.name, Path(item)))
    return found


def model_config(model: nn.Module) -> dict[str, Any]:
    from ..models.registry import config_to_dict

    return {"name": model.model_name, **config_to_dict(model.config)}


def run_config(run: RunDir) -> dict[str, Any]:
    """A run's config.json, refused where it names no task: a layout `vitlab train` has not written since runs
    recorded their task, before any release."""
    saved = run.read_config()
    if not isinstance(saved.get("task"), str):
        raise RunFileError(f"{run.file('config.json')} names no task: it was not written by this vitlab's `vitlab "
                           f"train`; train the run again (its weights can start one: `vitlab train --weights "
                           f"{run.weights_file(run.selected_weights())}`)")
    return saved


def load_task(run_dir: str | Path) -> tuple[Task, dict[str, Any]]:
    """The task of a run folder, rebuilt from its config.json (no data is read), and that config."""
    saved = run_config(RunDir(run_dir))
    cls = get_task(saved["task"])
    loop = from_dict(LoopConfig, saved.get("loop", {}))
    return cls(from_dict(cls.Config, saved.get("config", {})), loop), saved


def load_task_for(run_dir: str | Path, command: str) -> tuple[Task, dict[str, Any]]:
    """`load_task`, for a task's own command (`vitlab restore`, ...): a run of another task is refused, naming the
    tasks whose runs the command takes."""
    from .base import TASKS

    task, saved = load_task(run_dir)
    if command not in task.commands:
        takes = " or ".join(name for name, cls in TASKS.items() if command in cls.commands)
        raise ValueError(f"{run_dir} is a {task.name} run; `vitlab {command}` takes a {takes} run")
    return task, saved


def load_for_command(run_dir: str | Path, which: str | None, command: str) -> tuple[Task, nn.Module, dict[str, Any]]:
    """A task's own command's run (`load_task_for`): its task, its model with `which` weights (None: the ones it
    selected) and its config.json."""
    task, saved = load_task_for(run_dir, command)
    return task, load_run_model(run_dir, RunDir(run_dir).selected_weights(which)), saved


def load_run(run_dir: str | Path, which: str | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """The trained model of a run folder, in eval mode, and its config.json. `which` weights as `load_run_model`
    takes them; by default the ones the run selected: best (chosen on validation data) where it kept them, else
    last."""
    saved = RunDir(run_dir).read_config()
    return load_run_model(run_dir, which), saved


def load_run_model(run_dir: str | Path, which: str | None = None) -> nn.Module:
    """A run's model in eval mode with `which` weights: its own `last`, `best` or `ema` (None: the ones it
    selected, best where it kept them, else last: RunDir.selected_weights), or any other weights for the same
    model (a file vitlab reads, a release tag, hf-hub:org/name[@revision]), loaded strictly. Weights for another
    class count or grid are refused here: inference with a fresh head would answer at random."""
    import warnings

    from ..engine.run import PUBLISHED_WEIGHTS, WEIGHT_NAMES
    from ..interop import load_weights

    run = RunDir(run_dir)
    which = run.selected_weights(which)
    if which in (*WEIGHT_NAMES, PUBLISHED_WEIGHTS):
        return run.load_model(which)
    model = run.load_model(run.kept_weights("last"))  # the run's architecture, its config
    with warnings.catch_warnings(record=True) as adapted:
        warnings.simplefilter("always")
        load_weights(model, which)
    changes = [str(w.message) for w in adapted if "fine-tuning case" in str(w.message) or "resampled" in
               str(w.message) or ("fresh" in str(w.message) and "matched by name" in str(w.message))]
    if changes:
        raise ValueError(f"{which} does not fit {run_dir}'s model as it is ({'; '.join(changes)}): to use these "
                         f"weights on this run's data, fine-tune them: vitlab train --weights {which} ...")
    return model.eval()
