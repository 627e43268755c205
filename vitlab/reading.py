"""Reading a file someone gave vitlab: one that exists but cannot be read as what it should be raises
`DamagedFileError`, whose message names the file, what it should have been, what is wrong with it, and what to do
(for a download in the Hugging Face cache: delete it, and the next use fetches it again). Every layer may use this.

    with reading(path, "safetensors"):
        tensors = load_file(path)
    config = read_json(path, "a Hugging Face config.json")

Errors of the operating system (a missing file, a refused permission) pass through as they are: they are not
damage, and the command line says each in its own words (cli/main.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class DamagedFileError(ValueError):
    """A file that exists but cannot be read as what it should be: truncated, empty, or of another format."""


def in_hub_cache(path: str | os.PathLike) -> bool:
    """Whether `path` lies in the Hugging Face cache (a download, which can be fetched again)."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return False
    try:
        Path(path).resolve().relative_to(Path(HF_HUB_CACHE).resolve())
    except ValueError:
        return False
    return True


def damaged(path: str | os.PathLike, what: str, error: BaseException, hint: str | None = None) -> DamagedFileError:
    """The error for `path`, which should be `what` ("safetensors", "an ONNX graph") but cannot be read as it."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        size = None
    reason = (str(error).strip().splitlines() or [""])[0][:200]
    found = "empty: 0 bytes" if size == 0 else f"{type(error).__name__}{': ' + reason if reason else ''}"
    if hint is None:
        if in_hub_cache(path):
            hint = (f"it is a download in the Hugging Face cache, probably cut short: delete {path} and run the "
                    f"command again (or `vitlab download`), which fetches it again")
        else:
            hint = ("it was probably cut short by a full disk, a killed copy or an interrupted download; copy it "
                    "again from where it came from")
    return DamagedFileError(f"{path} is damaged: it cannot be read as {what} ({found}); {hint}")


@contextmanager
def reading(path: str | os.PathLike, what: str, hint: str | None = None) -> Iterator[None]:
    """Any error of reading `path` inside the block, other than the operating system's and vitlab's own, as a
    `DamagedFileError`."""
    try:
        yield
    except (OSError, DamagedFileError):
        raise
    except Exception as error:  # each format's reader raises its own types (SafetensorError, DecodeError, ...)
        raise damaged(path, what, error, hint) from error


def read_json(path: str | os.PathLike, what: str = "JSON") -> Any:
    """The JSON in `path`; a file that is not JSON is a DamagedFileError."""
    with reading(path, what):
        return json.loads(Path(path).read_text())
