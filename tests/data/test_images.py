"""The one image reader (vitlab/data/images.py): each mode read as built, and each bad file refused by name.

Every expected pixel is known by construction: the files are written here with Pillow (or by hand, byte by byte,
for the bomb), never read back with the code under test to make the expectation.
"""

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitlab.data.folder import BadImageError as FolderBadImageError
from vitlab.data.images import BadImageError, image_size, read_image


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image)


def test_one_bit_reads_as_0_and_255(tmp_path):
    bits = np.zeros((4, 6), dtype=bool)
    bits[1, 2] = bits[3, 5] = True
    Image.fromarray(bits).save(tmp_path / "a.png")  # mode "1"
    assert Image.open(tmp_path / "a.png").mode == "1"
    grey = read_image(tmp_path / "a.png", channels=1)
    assert grey.mode == "L" and (pixels(grey) == bits * 255).all()
    assert (pixels(read_image(tmp_path / "a.png", channels=3)) == (bits * 255)[..., None]).all()


def test_palette_gives_its_colours_and_transparency_becomes_white(tmp_path):
    indices = np.array([[0, 1], [2, 0]], dtype=np.uint8)
    image = Image.fromarray(indices, mode="P")
    image.putpalette([10, 20, 30, 200, 0, 0, 0, 0, 250] + [0] * (256 * 3 - 9))
    image.save(tmp_path / "p.png")
    image.save(tmp_path / "p_transparent.png", transparency=1)  # index 1 is see-through
    assert (pixels(read_image(tmp_path / "p.png")) == [[[10, 20, 30], [200, 0, 0]], [[0, 0, 250], [10, 20, 30]]]).all()
    seen = pixels(read_image(tmp_path / "p_transparent.png"))
    assert (seen[0, 1] == 255).all() and (seen[1, 0] == [0, 0, 250]).all()


def test_16_bit_grey_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 1000], [32896, 65535, 600]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")  # a 16-bit grey PNG
    assert Image.open(tmp_path / "deep.png").mode in ("I;16", "I")
    grey = pixels(read_image(tmp_path / "deep.png", channels=1))
    assert grey.tolist() == [[0, 1, 4], [128, 255, 2]]  # round(v / 257); clipping would give 255 for most
    assert Image.open(tmp_path / "deep.png").convert("L").getpixel((2, 0)) == 255  # what plain Pillow would do


def test_cmyk_becomes_rgb(tmp_path):
    Image.new("CMYK", (3, 2), (0, 255, 255, 0)).save(tmp_path / "c.tif")  # no cyan, full magenta and yellow: red
    rgb = read_image(tmp_path / "c.tif")
    assert rgb.mode == "RGB" and (pixels(rgb) == [255, 0, 0]).all()


def test_rgba_and_la_are_composited_onto_white(tmp_path):
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[0, 0] = [200, 100, 0, 255]  # opaque
    rgba[0, 1] = [0, 0, 0, 0]  # transparent black: must read as white, not black
    rgba[1, :] = [0, 0, 0, 128]  # half-transparent black over white: about half grey
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "rgba.png")
    seen = pixels(read_image(tmp_path / "rgba.png")).astype(int)
    assert seen[0, 0].tolist() == [200, 100, 0] and seen[0, 1].tolist() == [255, 255, 255]
    assert (abs(seen[1] - 127) <= 1).all()
    la = Image.fromarray(np.array([[[50, 255], [0, 0]]], dtype=np.uint8), mode="LA")
    la.save(tmp_path / "la.png")
    assert pixels(read_image(tmp_path / "la.png", channels=1)).tolist() == [[50, 255]]


def test_an_exif_rotated_jpeg_is_read_upright(tmp_path):
    # stored 32 wide × 16 high, left half red, right half blue; EXIF orientation 6 says "turn 90° clockwise to
    # view", so the upright picture is 16 wide × 32 high, red on top, blue below
    stored = np.zeros((16, 32, 3), dtype=np.uint8)
    stored[:, :16] = [255, 0, 0]
    stored[:, 16:] = [0, 0, 255]
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(stored).save(tmp_path / "phone.jpg", quality=95, exif=exif.tobytes())
    upright = read_image(tmp_path / "phone.jpg")
    assert upright.size == (16, 32) and image_size(tmp_path / "phone.jpg") == (16, 32)
    seen = pixels(upright).astype(int)
    assert (abs(seen[2:14, 2:14] - [255, 0, 0]) < 24).all()  # the top (JPEG blurs only the seam)
    assert (abs(seen[18:30, 2:14] - [0, 0, 255]) < 24).all()  # the bottom


def test_a_file_that_is_not_an_image_is_named_with_its_first_bytes(tmp_path):
    (tmp_path / "scan.png").write_bytes(b"%PDF-1.7\n%binary rest of a PDF")
    with pytest.raises(BadImageError, match=r"scan\.png: it is not an image \(it starts with b'%PDF-1\.7'\)") as info:
        read_image(tmp_path / "scan.png")
    assert info.value.kind == "not an image" and info.value.path == tmp_path / "scan.png"


def test_a_truncated_file_says_so(tmp_path):
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buffer, "PNG")
    (tmp_path / "cut.png").write_bytes(buffer.getvalue()[:300])  # the header and a little of the pixels
    with pytest.raises(BadImageError, match=r"cut\.png: it (is truncated|could not be decoded)") as info:
        read_image(tmp_path / "cut.png")
    assert info.value.kind == "damaged"


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width × height 8-bit grey pixels but holds almost no data: a decompression bomb's
    header, written by hand so that nothing here ever allocates the pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [9000, 40000])  # under and over Pillow's own refusal (179 MP)
def test_a_huge_image_is_refused_from_its_header(tmp_path, side):
    (tmp_path / "bomb.png").write_bytes(png_header_only(side, side))
    with pytest.raises(BadImageError, match=r"bomb\.png: it is .*pixels, above the limit of 67,108,864") as info:
        read_image(tmp_path / "bomb.png")
    assert info.value.kind == "too large" and f"{side * side:,}" in str(info.value)
    if side == 9000:
        assert "9000×9000 = 81,000,000 (81.0 M) pixels" in str(info.value)


def test_a_smaller_limit_and_bytes_input(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (100, 80), (1, 2, 3)).save(buffer, "PNG")
    with pytest.raises(BadImageError, match=r"100×80 = 8,000 \(8\.0 k\) pixels, above the limit of 4,096"):
        read_image(buffer.getvalue(), max_pixels=64 * 64)
    image = read_image(buffer.getvalue(), channels=None, name="the upload `image`")
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (1, 2, 3)


def test_a_missing_file_and_the_old_names(tmp_path):
    with pytest.raises(BadImageError, match=r"nothing\.png: it does not exist") as info:
        read_image(tmp_path / "nothing.png")
    assert info.value.kind == "missing" and isinstance(info.value, ValueError)
    assert FolderBadImageError is BadImageError  # the class keeps its old import path
    Path(tmp_path / "ok.png").write_bytes(b"")
    with pytest.raises(BadImageError, match="is empty"):
        read_image(tmp_path / "ok.png")
