"""find_fashion_mnist: search order, and downloads from a local HTTP server into the cache."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

import vitlab.data.fashion_mnist as fm
from tests.data.helpers import FILE_NAMES, MINI_DIR, copy_mini, md5_hex
from vitlab.data import ChecksumError, DownloadError, find_fashion_mnist

Serve = Callable[[Path], str]


def leftovers(folder: Path) -> list[str]:
    """Names in ``folder`` that are not one of the four data files (temp files, partial downloads)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in FILE_NAMES) if folder.exists() else []


def test_download_lands_in_cache_verified(isolated: Path, serve: Serve, mini_md5s: dict[str, str]) -> None:
    url = serve(MINI_DIR)
    found = find_fashion_mnist(base_url=url, md5s=mini_md5s, progress=False)
    assert found == isolated  # $VITLAB_CACHE/fashion-mnist
    for name in FILE_NAMES:
        assert md5_hex(found / name) == mini_md5s[name]
    assert leftovers(found) == []


def test_download_url_from_environment(
    isolated: Path, serve: Serve, mini_md5s: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fm.URL_ENV, serve(MINI_DIR).rstrip("/"))  # no trailing slash on purpose
    assert find_fashion_mnist(md5s=mini_md5s, progress=False) == isolated
    assert sorted(p.name for p in isolated.iterdir()) == sorted(FILE_NAMES)


def test_explicit_cache_dir_and_reuse_without_server(
    isolated: Path, serve: Serve, mini_md5s: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "my-cache"
    assert find_fashion_mnist(cache_dir=cache, base_url=serve(MINI_DIR), md5s=mini_md5s, progress=False) == cache
    # Second call: the cache is searched before any download, so no server or network is needed.
    assert find_fashion_mnist(cache_dir=cache, download=False) == cache


def test_only_missing_files_are_downloaded(isolated: Path, serve: Serve, mini_md5s: dict[str, str]) -> None:
    copy_mini(isolated, FILE_NAMES[:3])
    marker = isolated / FILE_NAMES[0]
    marker.write_bytes(b"kept as is")  # would be replaced if the file were downloaded again
    find_fashion_mnist(base_url=serve(MINI_DIR), md5s=mini_md5s, progress=False)
    assert marker.read_bytes() == b"kept as is"
    assert md5_hex(isolated / FILE_NAMES[3]) == mini_md5s[FILE_NAMES[3]]


def test_corrupted_download_is_rejected_and_removed(
    isolated: Path, serve: Serve, mini_md5s: dict[str, str], tmp_path: Path
) -> None:
    served = copy_mini(tmp_path / "served")
    bad = served / "train-labels-idx1-ubyte.gz"
    data = bytearray(bad.read_bytes())
    data[40] ^= 0xFF  # one flipped byte inside the compressed stream
    bad.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as info:
        find_fashion_mnist(base_url=serve(served), md5s=mini_md5s, progress=False)
    message = str(info.value)
    assert "train-labels-idx1-ubyte.gz" in message
    assert mini_md5s["train-labels-idx1-ubyte.gz"] in message  # expected
    assert md5_hex(bad) in message  # got
    assert "retry" in message  # what to do
    assert not (isolated / "train-labels-idx1-ubyte.gz").exists()
    assert leftovers(isolated) == []  # no temporary files either


def test_official_md5s_apply_by_default(isolated: Path, serve: Serve) -> None:
    # The fixture files are not the official ones, so the official table must reject the first of them.
    with pytest.raises(ChecksumError, match="8d4fb7e6c68d591d4c3dfef9ec88bf0d"):
        find_fashion_mnist(base_url=serve(MINI_DIR), progress=False)
    assert leftovers(isolated) == [] and not any(isolated.glob("*.gz"))


def test_http_error_is_a_download_error(isolated: Path, serve: Serve, tmp_path: Path) -> None:
    empty = tmp_path / "empty-server"
    empty.mkdir()
    url = serve(empty)
    with pytest.raises(DownloadError, match=rf"{url}train-images-idx3-ubyte\.gz.*404"):
        find_fashion_mnist(base_url=url, progress=False)
    assert leftovers(isolated) == []


def test_nothing_found_without_download_lists_places(isolated: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        find_fashion_mnist(tmp_path / "mine", download=False)
    message = str(info.value)
    for place in (tmp_path / "mine", fm.SYSTEM_DIR, isolated):
        assert str(place) in message
    assert "apt-get install dataset-fashion-mnist" in message


def test_search_order(isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = copy_mini(tmp_path / "explicit")
    env_root = tmp_path / "env"
    copy_mini(env_root / "fashion-mnist")
    system = copy_mini(tmp_path / "system")
    monkeypatch.setattr(fm, "SYSTEM_DIR", system)
    monkeypatch.setenv(fm.DATA_ENV, str(env_root))

    assert find_fashion_mnist(explicit, download=False) == explicit
    assert find_fashion_mnist(None, download=False) == env_root / "fashion-mnist"
    monkeypatch.delenv(fm.DATA_ENV)
    assert find_fashion_mnist(None, download=False) == system


def test_incomplete_folder_is_skipped(isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partial = copy_mini(tmp_path / "partial", FILE_NAMES[:3])
    system = copy_mini(tmp_path / "system")
    monkeypatch.setattr(fm, "SYSTEM_DIR", system)
    assert find_fashion_mnist(partial, download=False) == system


def test_data_dir_may_be_the_parent_folder(isolated: Path, tmp_path: Path) -> None:
    copy_mini(tmp_path / "datasets" / "fashion-mnist")
    assert find_fashion_mnist(tmp_path / "datasets", download=False) == tmp_path / "datasets" / "fashion-mnist"


def test_decompressed_files_count(isolated: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in FILE_NAMES:
        (plain / name.removesuffix(".gz")).write_bytes(gzip.decompress((MINI_DIR / name).read_bytes()))
    assert find_fashion_mnist(plain, download=False) == plain
