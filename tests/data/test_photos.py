"""The photograph manifest, and fetching through apt-get download + dpkg-deb, against a stand-in apt-get that
serves a real .deb built here (no network)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import numpy as np
import pytest

from vitlab.data import photos
from vitlab.data.photos import Photo, fetch_photos, manifest, photo_paths


def test_the_manifest_holds_whole_photographs_out_for_testing():
    entries = manifest()
    assert len(entries) == 49
    test = [p for p in entries if p.split == "test"]
    assert len(test) == 10 and len({p.package for p in test}) >= 4  # held out across the packages
    assert len({p.name for p in entries}) == 49 and len({p.sha256 for p in entries}) == 49  # no photo twice
    assert all(len(p.sha256) == 64 and p.licence and p.author for p in entries)


def test_missing_photographs_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr(photos, "locate", lambda photo, root: None)
    with pytest.raises(FileNotFoundError, match="vitlab fetch-photos"):
        photo_paths("test", tmp_path)
    with pytest.raises(ValueError, match="split"):
        photo_paths("val", tmp_path)


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs Debian's dpkg-deb")
def test_fetch_downloads_extracts_checks_and_keeps_only_the_listed_files(tmp_path, monkeypatch):
    tree = tmp_path / "pkgtree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text("Package: fake-wallpapers\nVersion: 1.0\nArchitecture: all\n"
                                              "Maintainer: test <t@example.org>\nDescription: test\n")
    picture = tree / "usr/share/backgrounds/fake/lake.jpg"
    picture.parent.mkdir(parents=True)
    picture.write_bytes(b"\xff\xd8 a photograph")
    (picture.parent / "drawing.png").write_bytes(b"not listed")
    deb = tmp_path / "fake-wallpapers_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)], check=True, capture_output=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    apt = bin_dir / "apt-get"  # `apt-get download -q PKG` copies the .deb into the working directory
    apt.write_text(f"#!/bin/sh\ncp {tmp_path}/$3_1.0_all.deb .\n")
    apt.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    sha = hashlib.sha256(picture.read_bytes()).hexdigest()
    entry = Photo("lake", "fake-wallpapers", "usr/share/backgrounds/fake/lake.jpg", sha, "test", "CC0", "me")
    monkeypatch.setattr(photos, "manifest", lambda: (entry,))
    out = tmp_path / "photos"
    assert fetch_photos(out) == [out / "fake-wallpapers/usr/share/backgrounds/fake/lake.jpg"]
    assert (out / "fake-wallpapers/usr/share/backgrounds/fake/lake.jpg").read_bytes() == picture.read_bytes()
    assert not list(out.rglob("drawing.png")) and not list(out.rglob("*.partial"))
    assert photo_paths("test", out) == [out / "fake-wallpapers/usr/share/backgrounds/fake/lake.jpg"]

    bad = Photo("lake", "fake-wallpapers", entry.path, "0" * 64, "test", "CC0", "me")
    monkeypatch.setattr(photos, "manifest", lambda: (bad,))
    with pytest.raises(ValueError, match="SHA-256 differs"):
        fetch_photos(tmp_path / "again")


def test_the_scikit_image_photographs_are_colour_scenes():
    pictures = photos.skimage_photos()
    assert sorted(pictures) == sorted(photos.SKIMAGE_PHOTOS)
    for image in pictures.values():
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and min(image.shape[:2]) >= 300
