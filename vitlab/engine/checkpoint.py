"""Checkpoints that survive a kill at any moment: write to a temporary file in the same folder, then rename.

A run folder holds
    last.safetensors, best.safetensors   model weights + config (what `vitlab eval`/`predict` read)
    state.pt                             everything needed to resume: model, optimizer, scheduler, epoch, step,
                                         RNG states, best accuracy (tensors and plain values only, so it loads
                                         with weights_only=True)
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "state.pt"


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the checkpoint
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one, never half of one
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value


def save_training_state(run_dir: Path, **state: Any) -> None:
    atomic_torch_save({**state, "rng": rng_state()}, Path(run_dir) / STATE_FILE)


def load_training_state(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"nothing to resume in {run_dir}: {STATE_FILE} is missing (the run stopped before its first epoch "
            f"ended); start it again without --resume"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a metrics file (one JSON object per line); a last line cut short by a kill is left out."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows
