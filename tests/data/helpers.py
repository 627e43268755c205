"""Constants and helpers shared by the vitlab.data tests (fixtures live in conftest.py)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

MINI_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
REAL_DIR = Path("/usr/share/datasets/fashion-mnist")
FILE_NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

requires_real_data = pytest.mark.skipif(
    not all((REAL_DIR / name).is_file() for name in FILE_NAMES),
    reason=f"real Fashion-MNIST not installed in {REAL_DIR} (apt-get install dataset-fashion-mnist)",
)


def md5_hex(path: Path) -> str:
    """Independent of vitlab's own md5 helper, so a bug there cannot hide."""
    return hashlib.md5(path.read_bytes()).hexdigest()


def copy_mini(dest: Path, names: tuple[str, ...] = FILE_NAMES) -> Path:
    """Copy (some of) the mini Fashion-MNIST files into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(MINI_DIR / name, dest / name)
    return dest
