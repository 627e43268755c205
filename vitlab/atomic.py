"""Files written so that a kill cannot damage them: into a temporary file beside the target, fsynced, then renamed
over it. A reader sees the old file or the new one, never half of one. The new file gets the mode a plain `open`
would give it (0666 less the umask), not the 0600 of a temporary file, so that a server running as another user
can read a run. Every layer may use this (run folders, generated data sets, exported graphs)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_UMASK = threading.Lock()


def user_file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0o666 less the process's umask (read by setting it and back:
    no call only reads it)."""
    with _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def replacing(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside `path` to write to (ending in `suffix`, for writers that look at it); when the block
    ends, the file is fsynced and renamed over `path` with the user's file mode. On an error it is removed and
    `path` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, user_file_mode())
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the file
        os.replace(tmp, path)  # atomic on POSIX
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise DiskFullError(path, Path(tmp)) from error
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class DiskFullError(OSError):
    """The disk filled up while a file was written: the file is as it was before (the partial one is removed)."""

    def __init__(self, path: Path, partial: Path) -> None:
        written = partial.stat().st_size if partial.exists() else 0
        before = path.stat().st_size if path.exists() else 0
        free = shutil.disk_usage(path.parent).free
        mib = 1 << 20
        need = f"about {before / mib:.0f} MiB (the size of the file it replaces)" if before else \
            f"more than the {written / mib:.0f} MiB written"
        kept = f"{path.name} is intact, as it was before" if before else f"no {path.name} was made"
        super().__init__(errno.ENOSPC, f"the disk filled up while writing {path} ({written / mib:.0f} MiB written, "
                                       f"{free / mib:.0f} MiB free now); {kept}. Free {need} on that disk and run "
                                       f"the command again")


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb") -> None:
    """write(f) into a temporary file beside `path`, fsync, rename over `path`."""
    with replacing(path) as tmp, open(tmp, mode) as f:
        write(f)


def write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, default=str)), mode="w")


def output_files(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *suffixes: str,
                 extension: str = ".png") -> list[tuple[Path, ...]]:
    """Where a command that makes files from each of its inputs writes them: OUT/STEM{suffix}{extension}, one
    tuple per input (one path per suffix; no suffix: OUT/STEM.png).

    Refused before anything is written, with the names: an output that is one of the inputs (a detector's
    predictions drawn into the images' own folder, a.png over a.png), and two inputs whose outputs share a name
    (a/x.png and b/x.png; x.jpg and x.png), where the second would replace the first. No command writes over a file
    it was given to read, or over what it has just written."""
    folder = Path(out)
    read = {Path(given).resolve(): given for given in inputs}
    made_from: dict[Path, str | os.PathLike] = {}
    targets = []
    for given in inputs:
        paths = tuple(folder / f"{Path(given).stem}{suffix}{extension}" for suffix in suffixes or ("",))
        for path in paths:
            resolved = path.resolve()
            if resolved in read:
                raise ValueError(f"writing {path} would replace {read[resolved]}, an input of this command: nothing "
                                 f"was written. Give --out a folder apart from the inputs")
            earlier = made_from.setdefault(resolved, given)
            if Path(earlier).resolve() != Path(given).resolve():
                raise ValueError(f"{earlier} and {given} would both be written to {path}: nothing was written. "
                                 f"Rename one, or give them in two commands with different --out folders")
        targets.append(paths)
    return targets
