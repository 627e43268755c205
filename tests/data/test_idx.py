"""read_idx / write_idx on the committed Fashion-MNIST slice, hand-built files and damaged files."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets.mnist import read_sn3_pascalvincent_tensor

from tests.data.helpers import MINI_DIR, REAL_DIR, requires_real_data
from vitlab.data.idx import read_idx, write_idx


def test_mini_fixture_shapes_and_dtypes() -> None:
    assert read_idx(MINI_DIR / "train-images-idx3-ubyte.gz").shape == (200, 28, 28)
    assert read_idx(MINI_DIR / "t10k-images-idx3-ubyte.gz").shape == (100, 28, 28)
    labels = read_idx(MINI_DIR / "train-labels-idx1-ubyte.gz")
    assert labels.shape == (200,) and labels.dtype == np.uint8


def test_mini_fixture_agrees_with_torchvision_reader(tmp_path: Path) -> None:
    # torchvision's MNIST reader is an independent implementation; it needs the decompressed file.
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        plain = tmp_path / name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress((MINI_DIR / name).read_bytes()))
        expected = read_sn3_pascalvincent_tensor(str(plain), strict=True)
        assert torch.equal(torch.from_numpy(read_idx(MINI_DIR / name)), expected)
        assert torch.equal(torch.from_numpy(read_idx(plain)), expected)  # the plain (non-gzip) path too


def test_first_labels_are_the_published_ones() -> None:
    # The first ten labels of each split as published with Fashion-MNIST (ankle boot, T-shirt, T-shirt, dress, ...).
    assert read_idx(MINI_DIR / "train-labels-idx1-ubyte.gz")[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert read_idx(MINI_DIR / "t10k-labels-idx1-ubyte.gz")[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]


@requires_real_data
@pytest.mark.parametrize(("prefix", "count"), [("train", 200), ("t10k", 100)])
def test_mini_fixture_is_the_start_of_the_real_files(prefix: str, count: int) -> None:
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{prefix}-{kind}-ubyte.gz"
        real = read_idx(REAL_DIR / name)
        assert real.shape[0] == (60000 if prefix == "train" else 10000)
        np.testing.assert_array_equal(read_idx(MINI_DIR / name), real[:count])


def test_hand_built_plain_files(tmp_path: Path) -> None:
    path = tmp_path / "u8"
    path.write_bytes(b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3) + bytes([1, 2, 3, 250, 251, 252]))
    np.testing.assert_array_equal(read_idx(path), np.array([[1, 2, 3], [250, 251, 252]], dtype=np.uint8))

    path = tmp_path / "i32"
    path.write_bytes(b"\x00\x00\x0c\x01" + struct.pack(">I", 2) + struct.pack(">ii", -5, 70000))
    array = read_idx(path)
    assert array.dtype == np.int32 and array.dtype.isnative
    assert array.tolist() == [-5, 70000]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_write_then_read_round_trip(tmp_path: Path, dtype: type) -> None:
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    for name in ("a.idx", "a.idx.gz"):
        np.testing.assert_array_equal(read_idx(write_idx(tmp_path / name, array)), array)
    assert (tmp_path / "a.idx.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert (tmp_path / "a.idx").read_bytes()[:2] == b"\x00\x00"


@pytest.mark.parametrize(
    ("magic", "why"),
    [(b"\x01\x00\x08\x01", "nonzero first byte"), (b"\x00\x00\x07\x01", "unknown type code"), (b"PK\x03\x04", "zip")],
)
def test_bad_magic_number_names_the_file(tmp_path: Path, magic: bytes, why: str) -> None:
    path = tmp_path / "labels.idx"
    path.write_bytes(magic + struct.pack(">I", 3) + b"abc")
    with pytest.raises(ValueError, match=r"labels\.idx.*magic number") as info:
        read_idx(path)
    assert "0x00000801" in str(info.value), why  # says what was expected


def test_zero_dimensions_rejected(tmp_path: Path) -> None:
    path = tmp_path / "zero.idx"
    path.write_bytes(b"\x00\x00\x08\x00")
    with pytest.raises(ValueError, match=r"zero\.idx.*0 dimensions"):
        read_idx(path)


@pytest.mark.parametrize(("payload", "word"), [(bytes(5), "truncated"), (bytes(7), "longer")])
def test_plain_file_length_must_match_header(tmp_path: Path, payload: bytes, word: str) -> None:
    path = tmp_path / "short.idx"
    path.write_bytes(b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3) + payload)
    with pytest.raises(ValueError, match=rf"short\.idx.*{word}.*needs 6 data bytes, found {len(payload)}"):
        read_idx(path)


@pytest.mark.parametrize(("extra", "word", "found"), [(-774, "truncated", 794), (3, "longer", 1571)])
def test_gzip_file_length_must_match_header(tmp_path: Path, extra: int, word: str, found: int) -> None:
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x03" + struct.pack(">III", 2, 28, 28) + bytes(2 * 28 * 28 + extra)))
    with pytest.raises(ValueError, match=rf"images\.gz.*{word}.*needs 1568 data bytes, found {found}"):
        read_idx(path)


def test_header_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "cut.idx"
    path.write_bytes(b"\x00\x00\x08\x03" + struct.pack(">I", 2))
    with pytest.raises(ValueError, match=r"cut\.idx.*3 dimensions"):
        read_idx(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"cut\.idx.*too short"):
        read_idx(path)


def test_cut_gzip_stream_names_the_file(tmp_path: Path) -> None:
    data = (MINI_DIR / "t10k-images-idx3-ubyte.gz").read_bytes()
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"t10k-images-idx3-ubyte\.gz.*gzip stream is damaged"):
        read_idx(path)


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        read_idx(Path("/nonexistent/train-images-idx3-ubyte.gz"))


def test_write_rejects_unsupported_dtype(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint16"):
        write_idx(tmp_path / "x.idx", np.zeros(3, dtype=np.uint16))
