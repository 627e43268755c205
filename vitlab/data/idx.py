"""Read and write IDX files, the format of MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number followed by one big-endian uint32 per dimension and then the raw
values in C order. The magic number is ``00 00 <dtype code> <ndim>``: for example ``0x00000803`` is a
3-d uint8 array (a stack of images) and ``0x00000801`` a 1-d uint8 array (labels). Files may be
gzip-compressed; the reader recognises gzip by its leading bytes rather than by the file name.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..atomic import atomic_write

__all__ = ["IDX_DTYPES", "read_idx", "write_idx"]

# dtype code (third magic byte) -> element type, as defined by the IDX format. Multi-byte types are
# stored big-endian.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _read_exactly(f: BinaryIO, buffer: memoryview) -> int:
    """Fill ``buffer`` from ``f``; return how many bytes arrived (fewer only at end of file)."""
    filled = 0
    while filled < len(buffer):
        n = f.readinto(buffer[filled:])
        if not n:
            break
        filled += n
    return filled


def _parse_header(f: BinaryIO, path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """Return (dtype, shape, header size in bytes) after checking the magic number."""
    magic = f.read(4)
    if len(magic) < 4:
        raise ValueError(
            f"{path}: file is {len(magic)} bytes long, too short for an IDX header (expected at least 4 bytes). "
            "The file is empty or truncated; delete it and download it again."
        )
    zero0, zero1, code, ndim = magic
    if zero0 != 0 or zero1 != 0 or code not in IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise ValueError(
            f"{path}: not an IDX file: magic number is 0x{magic.hex().upper()}, expected 0x0000TTNN with "
            f"type code TT in ({known}) and NN the number of dimensions (e.g. 0x00000803 for images, "
            "0x00000801 for labels). Check that the path points at an IDX file such as "
            "train-images-idx3-ubyte.gz and that the download is complete."
        )
    if ndim == 0:
        raise ValueError(
            f"{path}: IDX header declares 0 dimensions (magic 0x{magic.hex().upper()}); expected at least 1. "
            "The file is corrupt; delete it and download it again."
        )
    dims_raw = f.read(4 * ndim)
    if len(dims_raw) < 4 * ndim:
        raise ValueError(
            f"{path}: IDX header declares {ndim} dimensions but the file ends after {len(dims_raw) // 4} of them. "
            "The file is truncated; delete it and download it again."
        )
    shape = struct.unpack(f">{ndim}I", dims_raw)
    return IDX_DTYPES[code], shape, 4 + 4 * ndim


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzip-compressed or plain) into a numpy array.

    Args:
        path: the file, e.g. ``train-images-idx3-ubyte.gz``.

    Returns:
        An array with the shape stored in the header, e.g. images ``(N, 28, 28) uint8`` or labels ``(N,) uint8``.
        Multi-byte types come back in native byte order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the magic number is wrong, or the data is shorter or longer than the header's shape says, or
            the gzip stream is damaged. The message names the file.
    """
    path = Path(path)
    compressed = _is_gzip(path)
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as f:
            dtype, shape, header_size = _parse_header(f, path)
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if not compressed:
                # Plain files: compare sizes before allocating, so a corrupt header cannot ask for terabytes.
                actual = os.path.getsize(path) - header_size
                if actual != expected:
                    raise _length_error(path, shape, dtype, expected, actual)
            try:
                array = np.empty(shape, dtype=dtype)
            except MemoryError as exc:
                raise ValueError(
                    f"{path}: header shape {tuple(shape)} of {dtype.name} needs {expected} bytes, more than this "
                    "machine can allocate; the header is probably corrupt. Delete the file and download it again."
                ) from exc
            got = _read_exactly(f, memoryview(array.reshape(-1).view(np.uint8)))
            if got != expected:
                raise _length_error(path, shape, dtype, expected, got)
            if f.read(1):
                raise _length_error(path, shape, dtype, expected, expected + 1 + len(f.read()))
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(
            f"{path}: the gzip stream is damaged ({exc}); expected a complete gzip-compressed IDX file. "
            "Delete the file and download it again."
        ) from exc
    return array.astype(dtype.newbyteorder("="), copy=False)


def _length_error(path: Path, shape: tuple[int, ...], dtype: np.dtype, expected: int, actual: int) -> ValueError:
    problem = "truncated" if actual < expected else "longer than its header says"
    return ValueError(
        f"{path}: file is {problem}: header shape {tuple(shape)} of {dtype.name} needs {expected} data bytes, "
        f"found {actual}. Delete the file and download it again."
    )


def write_idx(path: str | os.PathLike[str], array: np.ndarray, compress: bool | None = None) -> Path:
    """Write ``array`` as an IDX file (used to build test fixtures and small subsets).

    Args:
        path: destination; with ``compress=None`` a name ending in ``.gz`` selects gzip.
        array: any shape with 1 to 255 dimensions, of a dtype the IDX format has (uint8, int8, int16, int32,
            float32, float64).
        compress: force gzip on or off.

    Returns:
        The path written. Gzip output carries no timestamp or file name, so the same array always gives the same
        bytes.
    """
    path = Path(path)
    array = np.asarray(array)
    codes = {dt.newbyteorder("="): code for code, dt in IDX_DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise ValueError(
            f"cannot write dtype {array.dtype} to IDX; expected one of {sorted(str(d) for d in codes)}. "
            "Convert the array with .astype() first."
        )
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"IDX stores 1 to 255 dimensions, got an array with {array.ndim}; reshape it first.")
    code = codes[native]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = np.ascontiguousarray(array, dtype=IDX_DTYPES[code]).tobytes()
    if compress is None:
        compress = path.suffix == ".gz"
    def write(raw: BinaryIO) -> None:
        if compress:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
                f.write(header + payload)
        else:
            raw.write(header + payload)

    atomic_write(path, write)
    return path
