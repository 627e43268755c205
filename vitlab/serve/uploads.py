"""What the server accepts as an image, and the answer it gives to what it does not.

Every refusal is a `BadInput` with the HTTP status to answer and a message that says what was expected; the API
turns it into a 4xx answer and the page into an error box, and the server goes on serving.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from ..data.images import BadImageError, decode, open_image


class BadInput(ValueError):
    """A request the server refuses: `status` is the HTTP status to answer (4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ImageLimits:
    """max_bytes: the largest upload read; max_pixels: the largest width × height; oversize: what to do with a
    larger image, "refuse" (answer 413) or "downscale" (keep the aspect ratio, to at most max_pixels)."""

    max_bytes: int = 20 * 2**20
    max_pixels: int = 16 * 2**20
    oversize: str = "refuse"

    def __post_init__(self) -> None:
        if self.oversize not in ("refuse", "downscale"):
            raise ValueError(f"oversize must be 'refuse' or 'downscale', got {self.oversize!r}")
        if self.max_bytes < 1 or self.max_pixels < 1:
            raise ValueError(f"the limits must be positive, got {self.max_bytes} bytes and {self.max_pixels} pixels")


def read_image(data: bytes, field: str, limits: ImageLimits) -> Image.Image:
    """An upload's bytes -> a decoded PIL image within the limits, in its own mode (the task converts it), its EXIF
    orientation applied: vitlab.data.images' reader, with this server's limits and HTTP statuses."""
    if not data:
        raise BadInput(400, f"the upload `{field}` is empty: send an image file (PNG, JPEG, WebP, ...) in the "
                            f"multipart form field `{field}`")
    if len(data) > limits.max_bytes:
        raise BadInput(413, f"the upload `{field}` is {len(data):,} bytes, above this server's limit of "
                            f"{limits.max_bytes:,}; send a smaller file (or start the server with a larger "
                            f"--max-upload-mb)")
    name = f"the upload `{field}`"
    try:  # the header only, through the one reader; the size is checked below, where the limits may downscale
        image = open_image(data, name, limits.max_pixels, refuse_oversize=False)
    except BadImageError as error:
        if error.kind == "too large":  # Pillow's own refusal, before the header could be handed back
            raise BadInput(413, f"the upload `{field}` declares a huge image ({error.reason}); send a smaller "
                                f"one") from error
        raise BadInput(415, f"the upload `{field}` is not an image Pillow can read ({len(data):,} bytes starting "
                            f"{data[:8]!r}); send a PNG, JPEG, WebP, BMP, GIF or TIFF file") from error
    return checked(image, field, limits)


def checked(image: Image.Image, field: str, limits: ImageLimits) -> Image.Image:
    """An opened image (its header read: an upload's, or the page's) within the limits, then decoded: refused (413)
    or downscaled as the limits say, and a truncated or damaged file refused (415) with the reason."""
    image = within_limits(image, field, limits)
    try:
        return decode(image, f"the upload `{field}`")  # a truncated or damaged file: its header read, its pixels not
    except BadImageError as error:
        raise BadInput(415, f"the image `{field}` could not be decoded: it {error.reason}; send a complete image "
                            f"file") from error


def within_limits(image: Image.Image, field: str, limits: ImageLimits) -> Image.Image:
    """The image if it has at most `limits.max_pixels` pixels; else refused (413) or downscaled, as the limits
    say. Only the header need have been read: a refused image is never decoded."""
    width, height = image.size
    if width * height <= limits.max_pixels:
        return image
    if limits.oversize == "refuse":
        raise BadInput(413, f"the image `{field}` is {width}×{height} = {width * height:,} pixels, above this "
                            f"server's limit of {limits.max_pixels:,}; send a smaller image (or start the server "
                            f"with --oversize downscale, or a larger --max-pixels)")
    if image.format == "JPEG":
        image.draft("RGB", (width // 2, height // 2))  # decode at a reduced scale, where the codec can
    scale = (limits.max_pixels / (image.size[0] * image.size[1])) ** 0.5
    size = (max(1, int(image.size[0] * scale)), max(1, int(image.size[1] * scale)))
    try:
        return image.resize(size, Image.Resampling.LANCZOS)
    except (OSError, ValueError) as error:
        raise BadInput(415, f"the image `{field}` could not be decoded ({error}); send a complete image file") \
            from error


def png_safe(image: Image.Image) -> Image.Image:
    """The image in a mode PNG stores without change of pixels (CMYK, YCbCr, LAB, HSV and floats become RGB; 16-bit
    grey of either byte order becomes I;16, whose values vitlab scales as it does any 16-bit grey)."""
    if image.mode in ("I;16L", "I;16B", "I;16N"):  # Pillow's RGB conversion would clip them to 255
        import numpy as np

        return Image.fromarray(np.asarray(image).astype(np.uint16))
    return image if image.mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16") else image.convert("RGB")
