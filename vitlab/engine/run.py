"""A run folder: the one place that knows its files, and writes each of them so that a kill cannot damage it.

    config.json        the task, its config, the loop's config and what the task records about its data
    metrics.jsonl      one JSON object per evaluation (step, epoch, learning rate, training and held-out metrics)
    last.safetensors   the weights after the latest evaluation, with the model's config
    best.safetensors   the weights of the best evaluation by the task's metric (what eval, predict and the loaders
                       read by default: selected_weights)
    ema.safetensors    the exponential moving average of the weights, when the run keeps one
    state.pt           what `--resume` needs: model, optimizers, schedules, scaler, EMA, step, RNG streams
    curves.png         the metrics against epochs (or steps)

Every write goes to a temporary file in the same folder, is fsynced, then renamed over the old file: a reader
sees the old file or the new one, never half of one. Metrics are appended (a line cut short by a kill is
skipped when read) and truncated back to a checkpoint atomically. A damaged file raises `RunFileError`, which
names the file, says what is wrong and what the user can do.
"""

from __future__ import annotations

import contextvars
import glob
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..atomic import atomic_write, replacing, write_json
from ..models.family import family_config

CONFIG_FILE, METRICS_FILE, STATE_FILE, CURVES_FILE = "config.json", "metrics.jsonl", "state.pt", "curves.png"
PREVIOUS_STATE_FILE = "state.prev.pt"  # the checkpoint before state.pt, kept whole while a new one is written
WEIGHT_NAMES = ("last", "best", "ema")
PUBLISHED_WEIGHTS = "model"  # model.safetensors: the weights of a run written for the Hub (vitlab push), its only ones
# the command line of the `vitlab` process (cli/main.py sets it): a run records what started it
COMMAND_LINE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("command_line", default=None)
RUN_FILES = (CONFIG_FILE, METRICS_FILE, STATE_FILE, PREVIOUS_STATE_FILE, CURVES_FILE,
             *(f"{name}.safetensors" for name in WEIGHT_NAMES))


class RunFileError(ValueError):
    """A file of a run folder that exists but cannot be read: truncated, or not written by vitlab."""


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a last line cut short by a kill (and anything after it) is left out."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def refuse_overlap(out: Path, inputs: list[tuple[str, Path]] | tuple = ()) -> None:
    """Refuse an output folder `out` that is, holds or lies in a path a command reads (`inputs`: (option name,
    path) pairs), before anything is written."""
    here = Path(out).resolve()
    for name, given in inputs:
        source = Path(given).resolve()
        if source == here or here in source.parents or source in here.parents:
            where = "is" if source == here else "holds" if source in here.parents else "lies in"
            raise ValueError(f"--{name.replace('_', '-')} {given} {where} the output folder --out {out}, and the "
                             f"command reads it: nothing was written. Give an --out folder apart from what it reads")


class RunDir:
    """The files of one run. Only rank 0 of a distributed run writes (the loop sees to it)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def file(self, name: str) -> Path:
        return self.path / name

    def weights_file(self, which: str = "last") -> Path:
        return self.path / f"{which}.safetensors"

    def kept_weights(self, which: str = "best") -> str:
        """`which` if the run kept it, else "last" (a run that never evaluated keeps no best); weights from outside
        the run (a file, a release's name) as they are."""
        if which not in WEIGHT_NAMES:
            return which
        if self.weights_file(which).is_file():
            return which
        published = not self.weights_file("last").is_file() and self.weights_file(PUBLISHED_WEIGHTS).is_file()
        return PUBLISHED_WEIGHTS if published else "last"

    def selected_weights(self, which: str | None = None) -> str:
        """The weights to load: `which` as given, or for None the ones the run selected — best (chosen on
        validation data) where it kept them, else last. What the loaders and commands default to, and what the
        test data is scored with."""
        return which if which is not None else self.kept_weights("best")

    # -- starting and finding runs ----------------------------------------------------------------------------
    def holds_run(self) -> bool:
        return self.file(CONFIG_FILE).is_file() or self.file(STATE_FILE).is_file()

    def prepare(self, overwrite: bool, extra_files: tuple[str, ...] = (),
                inputs: list[tuple[str, Path]] | None = None) -> None:
        """Make the folder ready for a new run, never mixing with an old one and never losing what a user put there.

        Refused, before anything is written: an `inputs` path ((option name, a file or folder the run reads)) that
        is the folder, lies in it or holds it; a folder that holds a run, unless told to start over (`overwrite`);
        files with a run's names (`extra_files`: the task's own, such as confusion.png) that a user put there,
        named, unless `overwrite`. Then exactly those files are removed; any other file stays."""
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"--out {self.path} is a file; give a folder for the run (it is created if missing)")
        refuse_overlap(self.path, inputs or ())
        owned = [self.file(name) for name in (*RUN_FILES, *extra_files) if self.file(name).exists()]
        if self.holds_run() and not overwrite:
            resumable = self.file(STATE_FILE).is_file()
            how = (f"continue it with --resume {self.path}, start it over with --overwrite" if resumable else
                   "it stopped before its first checkpoint, so there is nothing to resume: start it over with "
                   "--overwrite")
            raise ValueError(f"{self.path} already holds a run; {how}, or give another --out")
        if owned and not overwrite:
            raise ValueError(f"{self.path} holds no run, but files a run writes: "
                             f"{', '.join(p.name for p in owned)}; a new run would replace them. Move them away, "
                             f"replace them with --overwrite, or give another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        for path in owned:
            path.unlink()
        for name in (*RUN_FILES, *extra_files):  # temporary files of a run's write that was killed (atomic.replacing)
            for leftover in self.path.glob(f".{glob.escape(name)}.*.tmp"):
                leftover.unlink(missing_ok=True)

    # -- config.json -------------------------------------------------------------------------------------------
    def write_config(self, config: dict[str, Any]) -> None:
        write_json(self.file(CONFIG_FILE), config)

    def read_config(self) -> dict[str, Any]:
        path = self.file(CONFIG_FILE)
        if not path.is_file():
            raise FileNotFoundError(f"{self.path} is not a vitlab run folder (no {CONFIG_FILE}); give the folder "
                                    f"that `vitlab train --out` wrote")
        try:
            config = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RunFileError(f"{path} is damaged: it is not valid JSON ({error}); it was edited or cut short. "
                               f"Restore it, or start a new run from the weights with `vitlab train --weights "
                               f"{self.weights_file()}`") from error
        if not isinstance(config, dict):
            raise RunFileError(f"{path} is damaged: expected a JSON object, found {type(config).__name__}")
        return config

    # -- metrics.jsonl -----------------------------------------------------------------------------------------
    def append_metrics(self, row: dict[str, Any]) -> None:
        with self.file(METRICS_FILE).open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.file(METRICS_FILE)
        return read_jsonl(path) if path.is_file() else []

    def keep_metrics(self, until_step: int) -> None:
        """Drop the rows after step `until_step` (a run killed after writing metrics but before its checkpoint)."""
        rows = [row for row in self.read_metrics() if row["step"] <= until_step]
        atomic_write(self.file(METRICS_FILE), lambda f: f.write("".join(json.dumps(r) + "\n" for r in rows)), "w")

    # -- weights -----------------------------------------------------------------------------------------------
    def save_weights(self, which: str, model: nn.Module, metadata: dict[str, str] | None = None) -> Path:
        """A registered model's weights with its config (so `load_model` rebuilds it); any other module's weights
        alone."""
        from ..checkpoint import save_weights

        path = self.weights_file(which)
        if family_config(model) is not None:
            return save_weights(model, path, metadata)
        from safetensors.torch import save

        tensors = {key: value.detach().contiguous().cpu() for key, value in model.state_dict().items()}
        atomic_write(path, lambda f: f.write(save(tensors, metadata=metadata)))
        return path

    def load_model(self, which: str = "last") -> nn.Module:
        """The model of `which` weights, rebuilt from the config stored in the file, in eval mode."""
        from ..checkpoint import CheckpointMismatchError, load_model

        path = self._existing_weights(which)
        try:
            return load_model(path).eval()
        except (FileNotFoundError, RunFileError, CheckpointMismatchError):
            raise  # a readable file whose keys do not fit says so itself: it is not damaged
        except Exception as error:
            raise self._damaged_weights(path, error) from error

    def read_weights(self, which: str = "last") -> dict[str, torch.Tensor]:
        from ..checkpoint import read_state_dict

        path = self._existing_weights(which)
        try:
            return read_state_dict(path)[0]
        except Exception as error:
            raise self._damaged_weights(path, error) from error

    def _existing_weights(self, which: str) -> Path:
        if which not in WEIGHT_NAMES and which != PUBLISHED_WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_NAMES)}, got {which!r}")
        path = self.weights_file(which)
        if not path.is_file():
            kept = [name for name in WEIGHT_NAMES if self.weights_file(name).is_file()]
            hint = f"this run has {', '.join(kept)}" if kept else "the run has not reached its first evaluation yet"
            raise FileNotFoundError(f"{path} is missing: {hint}")
        return path

    def _damaged_weights(self, path: Path, error: Exception) -> RunFileError:
        others = [name for name in WEIGHT_NAMES if name != path.stem and self.weights_file(name).is_file()]
        hint = (f"use the run's {' or '.join(others)} weights instead (--weights {others[0]})" if others
                else "train again, or resume from state.pt with `vitlab train --resume`")
        return RunFileError(f"{path} is damaged: it cannot be read as safetensors ({type(error).__name__}: "
                            f"{error}); it was probably cut short by a full disk or a copy. {hint}")

    # -- state.pt ----------------------------------------------------------------------------------------------
    def save_state(self, state: dict[str, Any]) -> None:
        """state.pt, the one before it kept as state.prev.pt: the new file is written and fsynced beside them, the
        current one becomes the previous, then the new one the current, so that at every instant the folder holds
        a complete checkpoint (a disk that fills up mid-write leaves both as they were, and says so)."""
        path, previous = self.file(STATE_FILE), self.file(PREVIOUS_STATE_FILE)
        with replacing(path) as tmp:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            if path.is_file():
                os.replace(path, previous)

    def load_state(self) -> dict[str, Any]:
        """state.pt; where it is missing or damaged (a machine that died while an older vitlab wrote it, a copied
        folder) and the previous checkpoint is whole, that one, with a warning naming it."""
        path, previous = self.file(STATE_FILE), self.file(PREVIOUS_STATE_FILE)
        if not path.is_file() and not previous.is_file():
            raise FileNotFoundError(f"nothing to resume in {self.path}: {STATE_FILE} is missing (the run stopped "
                                    f"before its first checkpoint); start it again without --resume")
        try:
            return self._read_state(path)
        except (FileNotFoundError, RunFileError) as error:
            if not previous.is_file():
                raise
            try:
                state = self._read_state(previous)
            except RunFileError:
                raise error from None
            warnings.warn(f"{error}; resuming from the checkpoint before it, {previous.name} (step "
                          f"{state['step']}): the steps after it are trained again", stacklevel=2)
            return state

    def _read_state(self, path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise RunFileError(
                f"{path} is damaged: it cannot be loaded ({type(error).__name__}: {error}), so the run cannot be "
                f"resumed exactly. Start a new run from its weights instead: `vitlab train --weights "
                f"{self.weights_file()} --out NEW_RUN_DIR`") from error
        if not isinstance(state, dict) or "step" not in state:
            raise RunFileError(f"{path} is damaged: it does not hold a vitlab training state (no 'step'); start a "
                               f"new run from {self.weights_file()} with --weights")
        return state

    # -- curves.png --------------------------------------------------------------------------------------------
    def plot_curves(self) -> Path | None:
        from .curves import plot_metrics

        rows = self.read_metrics()
        if not rows:
            return None
        path = self.file(CURVES_FILE)
        atomic_write(path, lambda f: plot_metrics(rows, f))
        return path


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The metrics rows of a run folder (`RunDir(run_dir).read_metrics()`)."""
    return RunDir(run_dir).read_metrics()


def weights_file(path: str) -> str:
    """A weights file, or a run folder, which stands for its best weights (its last if it kept no best)."""
    folder = Path(path)
    if folder.is_dir() and (folder / CONFIG_FILE).is_file():
        run = RunDir(folder)
        selected = run.weights_file(run.selected_weights())
        if selected.is_file():
            return str(selected)
        raise FileNotFoundError(f"{folder} is a run folder without weights yet: it has not finished an epoch")
    return path
