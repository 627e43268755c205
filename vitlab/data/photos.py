"""Real photographs that install offline, for training and testing restoration.

- 49 camera photographs from four Debian wallpaper packages (mate-backgrounds, lomiri-wallpapers-16.04 and -20.04,
  plasma-workspace-wallpapers, lxqt-themes), each at least 1024 pixels on its short side, checked one by one to be
  photographs (not drawings or renders). `photos.json` lists each with its package, path, SHA-256, licence, author
  and split: 10 whole photographs are held out for testing, chosen across packages, photographers and content; the
  other 39 train. `fetch_photos(out)` gets them with `apt-get download` (no root needed, nothing installed) and
  keeps only the listed files, checked against their hashes; packages installed system-wide are found in place.
- The scene photographs inside the scikit-image wheel (astronaut, chelsea, coffee, rocket, the left motorcycle
  view), small (300–741 pixels): a second, quick test set. Its drawings, textures, charts and grey images are left out.

Licences: GPL-2+, LGPL-3, CC-BY(-SA) 3.0/4.0 and CC0 (per photograph in photos.json; authors credited there); the
scikit-image photographs are public domain or CC0 by its documentation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle")
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Photo:
    name: str
    package: str
    path: str  # inside the package, e.g. usr/share/backgrounds/mate/nature/Dune.jpg
    sha256: str
    split: str
    licence: str
    author: str


@cache
def manifest() -> tuple[Photo, ...]:
    data = json.loads(Path(__file__).with_name("photos.json").read_text())
    return tuple(Photo(**entry) for entry in data["photos"])


def packages() -> list[str]:
    return sorted({photo.package for photo in manifest()})


def locate(photo: Photo, root: Path | None) -> Path | None:
    """Where the photograph is: under root/PACKAGE/ (fetch_photos' layout) or installed at /PATH."""
    for candidate in ((root / photo.package / photo.path) if root else None, Path("/") / photo.path):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def photo_paths(split: str, root: str | os.PathLike | None = "data/photos") -> list[Path]:
    """The files of one split's photographs, in manifest order. Any missing is an error that says how to get it."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(root) if root else None
    chosen = [photo for photo in manifest() if photo.split == split]
    found = [(photo, locate(photo, root)) for photo in chosen]
    missing = [photo for photo, path in found if path is None]
    if missing:
        names = ", ".join(sorted({photo.package for photo in missing}))
        raise FileNotFoundError(
            f"{len(missing)} of the {len(chosen)} {split} photographs are missing (from {names}); get them with "
            f"`vitlab fetch-photos --out {root or 'data/photos'}` (apt-get download, about 195 MB, no root "
            f"needed) or install those Debian packages")
    return [path for _, path in found]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_photos(out: str | os.PathLike = "data/photos") -> list[Path]:
    """Download the wallpaper packages with `apt-get download`, keep the listed photographs under
    out/PACKAGE/PATH (each checked against its SHA-256 and moved into place whole), delete the rest. Photographs
    already there are kept. Returns every photograph's path."""
    out = Path(out)
    todo = [photo for photo in manifest() if not (out / photo.package / photo.path).is_file()]
    if todo and shutil.which("apt-get") is None:
        raise RuntimeError("fetching the photographs needs Debian's apt-get (and dpkg-deb); on another system copy "
                           f"the packages' files into {out}/PACKAGE/ (photos.json lists them)")
    for package in sorted({photo.package for photo in todo}):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["apt-get", "download", "-q", package], cwd=tmp, check=True)
            deb = next(Path(tmp).glob(f"{package}_*.deb"))
            tree = Path(tmp) / "tree"
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
            for photo in (p for p in todo if p.package == package):
                source = tree / photo.path
                if source.is_symlink():
                    source = source.resolve()
                if not source.is_file():
                    raise FileNotFoundError(f"{package} has no {photo.path} (another version of the package?)")
                if sha256_of(source) != photo.sha256:
                    raise ValueError(f"{package}'s {photo.path} is not the photograph listed (SHA-256 differs): "
                                     f"another version of the package; its test figures would not compare")
                target = out / photo.package / photo.path
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(target.name + ".partial")
                shutil.copyfile(source, partial)
                partial.replace(target)
    return [out / photo.package / photo.path for photo in manifest()]


def skimage_photos() -> dict[str, np.ndarray]:
    """The colour scene photographs inside scikit-image's wheel, by name: (H, W, 3) uint8."""
    try:
        from skimage import data
    except ImportError as error:
        raise ImportError("the scikit-image photographs need scikit-image: pip install scikit-image") from error
    photos = {name: getattr(data, name)() for name in SKIMAGE_PHOTOS if name != "motorcycle"}
    photos["motorcycle"] = data.stereo_motorcycle()[0]
    return photos
