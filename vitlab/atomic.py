"""Files written so that a kill cannot damage them: into a temporary file beside the target, fsynced, then renamed
over it. A reader sees the old file or the new one, never half of one. Every layer may use this (run folders,
generated data sets)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb") -> None:
    """write(f) into a temporary file beside `path`, fsync, rename over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the file
        os.replace(tmp, path)  # atomic on POSIX
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, default=str)), mode="w")
