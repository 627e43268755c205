"""The one image reader: a file on disk (or an upload's bytes) -> a decoded Pillow image, or a `BadImageError` that
names the file and says what it is.

    image = read_image("photo.jpg", channels=3)         # mode RGB, EXIF orientation applied, at most 64 MP
    image = read_image(data, name="the upload `image`", channels=None, max_pixels=16 * 2**20)   # its own mode

What happens, in order, and why:

1. `open_image`: Pillow reads the header only. A file that is no image is refused here, with its first bytes shown
   (`b'%PDF-1.7'` says more than "cannot identify image file").
2. The header's width × height is checked against `max_pixels` *before* any pixel is decoded: a 40000×40000 PNG
   takes a few hundred bytes on disk and 4.8 GB in memory (a decompression bomb). Files on disk get
   `DEFAULT_MAX_PIXELS`; the server passes its own configurable limit (serve/uploads.py, `ImageLimits`).
3. `decode`: the pixels are decoded now, so a truncated or damaged file fails here, with its name, and not inside a
   transform or a DataLoader worker.
4. The EXIF orientation is applied (`ImageOps.exif_transpose`): a phone's portrait JPEG is stored landscape with a
   tag saying "rotate me", and every viewer shows it upright; so must training and prediction.
5. `to_channels`: any mode -> `L` (channels=1) or `RGB` (channels=3). 1-bit becomes 0/255; palette images give
   their colours; 16-bit grey (`I;16`, `I`: PNG and TIFF store 0…65535) is scaled by 1/257 to 0…255 rather than
   clipped (clipping turns a typical 16-bit scan white); CMYK is converted by Pillow; images with transparency
   (RGBA, LA, PA, a palette or grey with a transparent colour) are composited onto white first
   (vitlab.data.channels explains why white).
"""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vitlab.data.channels import convert_pil

__all__ = ["DEFAULT_MAX_PIXELS", "INPUT_HINT", "SKIP_HINT", "BadImageError", "decode", "image_size", "open_image",
           "read_image", "to_channels", "warn_skipped"]

# 64 MP: above any camera's photograph (a 61 MP full-frame sensor), below Pillow's own bomb warning (89 MP)
DEFAULT_MAX_PIXELS = 64 * 2**20
SKIP_HINT = "replace or delete it, or pass skip_bad_images=True (--skip-bad-images) to leave unreadable images out"
INPUT_HINT = "give an image file (PNG, JPEG, WebP, BMP, GIF or TIFF)"  # for a file given to predict, not a data set

Source = str | os.PathLike[str] | bytes

# What Pillow raises for data it cannot decode: OSError (UnidentifiedImageError is one), SyntaxError, ValueError,
# EOFError, struct.error (a ValueError's sibling, an Exception); the bomb checks raise their own two.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, Image.DecompressionBombError,
                  Image.DecompressionBombWarning)


class BadImageError(ValueError):
    """An image that cannot be used. `path` is the file (or the upload's name); `kind` is what is wrong with it:
    "missing", "not an image", "too large" or "damaged"."""

    def __init__(self, path: str | os.PathLike[str], reason: str, kind: str = "damaged", hint: str = SKIP_HINT
                 ) -> None:
        self.path = Path(path)
        self.kind, self.reason = kind, reason
        super().__init__(f"cannot read image {path}: it {reason}; {hint}")


def _pixels(count: int) -> str:
    """1600000000 -> '1,600,000,000 (1.6 G)': exact, and readable at a glance."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count:,} ({count / size:.1f} {unit})"
    return f"{count:,}"


def _first_bytes(source: Source) -> bytes:
    if isinstance(source, bytes):
        return source[:8]
    with open(source, "rb") as file:
        return file.read(8)


def _too_large(name, width: int | None, height: int | None, pixels: int, max_pixels: int, hint: str
               ) -> BadImageError:
    size = f"{width}×{height} = " if width else ""
    return BadImageError(name, f"is {size}{_pixels(pixels)} pixels, above the limit of {_pixels(max_pixels)} that "
                         f"guards memory against decompression bombs; downscale it", "too large", hint)


def open_image(source: Source, name: str | os.PathLike[str] | None = None, max_pixels: int = DEFAULT_MAX_PIXELS,
               hint: str = SKIP_HINT, refuse_oversize: bool = True) -> Image.Image:
    """The image's header read (no pixels decoded yet) and its size checked against `max_pixels`.

    `name` is what the errors call it (default: the path). `refuse_oversize=False` leaves the size check to the
    caller (the server may downscale instead). Raises BadImageError: "missing", "not an image", "too large".
    """
    name = name if name is not None else source if not isinstance(source, bytes) else "the upload"
    if not isinstance(source, bytes) and not Path(source).is_file():
        raise BadImageError(name, "does not exist" if not Path(source).exists() else "is not a file", "missing", hint)
    try:
        with warnings.catch_warnings():
            # Pillow's own bomb warning (above 89 MP) becomes an error: the limit below is the one that counts
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        # Pillow refuses before handing back the image; its message holds the pixel count
        found = re.search(r"\((\d+) pixels\)", str(error))
        pixels = int(found.group(1)) if found else max_pixels + 1
        raise _too_large(name, None, None, pixels, max_pixels, hint) from error
    except UnidentifiedImageError as error:
        start = _first_bytes(source)
        what = "is empty" if not start else f"is not an image (it starts with {start!r})"
        raise BadImageError(name, f"{what}; expected a PNG, JPEG, WebP, BMP, GIF or TIFF file", "not an image",
                            hint) from error
    except _DECODE_ERRORS as error:  # a header Pillow recognised but could not parse
        raise BadImageError(name, f"has a damaged header ({type(error).__name__}: {error})", "damaged",
                            hint) from error
    width, height = image.size
    if refuse_oversize and width * height > max_pixels:
        image.close()
        raise _too_large(name, width, height, width * height, max_pixels, hint)
    return image


def decode(image: Image.Image, name: str | os.PathLike[str], hint: str = SKIP_HINT) -> Image.Image:
    """Decode the pixels of an opened image now (Image.open is lazy), with the EXIF orientation applied."""
    try:
        image.load()
        return ImageOps.exif_transpose(image)
    except _DECODE_ERRORS as error:
        what = "is truncated" if "truncated" in str(error) else "could not be decoded"
        raise BadImageError(name, f"{what} ({type(error).__name__}: {error})", "damaged", hint) from error


def to_channels(image: Image.Image, channels: int) -> Image.Image:
    """Any Pillow mode -> `L` (channels=1) or `RGB` (channels=3); see the module docstring for each mode."""
    if image.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N"):
        # 16-bit values 0…65535 -> 0…255 (÷257 maps 65535 to 255 exactly); Pillow's own conversion would clip
        values = np.asarray(image, dtype=np.float64) / 257.0
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")
    return convert_pil(image, channels)


def read_image(source: Source, channels: int | None = 3, max_pixels: int = DEFAULT_MAX_PIXELS,
               name: str | os.PathLike[str] | None = None, hint: str = SKIP_HINT) -> Image.Image:
    """Open, check, decode and orient an image; converted to `L` or `RGB` (channels 1 or 3), or left in its own
    mode (channels=None). Raises BadImageError, naming the file and what is wrong with it."""
    name = name if name is not None else source if not isinstance(source, bytes) else "the upload"
    with open_image(source, name, max_pixels, hint) as image:
        decoded = decode(image, name, hint)
        if channels is None:
            return decoded if decoded is not image else decoded.copy()  # still usable after the file is closed
        return to_channels(decoded, channels)


def image_size(path: str | os.PathLike[str], max_pixels: int = DEFAULT_MAX_PIXELS, hint: str = SKIP_HINT
               ) -> tuple[int, int]:
    """(width, height) of an image file from its header alone (nothing decoded), after its EXIF orientation: what
    `read_image` will return. Raises BadImageError as `open_image` does."""
    with open_image(path, max_pixels=max_pixels, hint=hint) as image:
        width, height = image.size
        try:
            orientation = image.getexif().get(0x0112, 1)  # EXIF Orientation; 5-8 swap the sides
        except _DECODE_ERRORS:
            orientation = 1
        return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def warn_skipped(where: str, reasons: dict[str, list[str]], first: int = 3) -> None:
    """One warning for the images (or entries) left out of `where`: how many of each kind, and the first names.
    `reasons`: kind -> the names left out for it."""
    total = sum(len(names) for names in reasons.values())
    if not total:
        return
    parts = [f"{len(names)} {kind} ({', '.join(map(str, names[:first]))}{', …' if len(names) > first else ''})"
             for kind, names in reasons.items() if names]
    warnings.warn(f"{where}: left out {total}: {'; '.join(parts)}", stacklevel=3)
