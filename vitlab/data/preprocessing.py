"""What a model expects of an image before its first layer: how it is resized, cropped and normalised, as one
record. It is kept with each release (the reference library's own values, `Release.preprocessing`), each run (its
data's) and vitlab's safetensors files, and applied the same way by `vitlab.pipeline`, `vitlab predict`, the
server and the runtimes.

    Preprocessing(resize=248, crop=224, interpolation="bicubic", mean=(.5,) * 3, std=(.5,) * 3, resampler="pil")
                                                      # timm's ViT at crop_pct 0.9: shorter side to 248, centre 224
    Preprocessing(resize=800, max_size=1333, mean=IMAGENET_MEAN, std=IMAGENET_STD)   # DETR: shorter side 800,
                                                                                     # longer at most 1333
    Preprocessing(resize=(224, 224), mean=(.5,) * 3, std=(.5,) * 3)                  # transformers' ViT: squashed
    Preprocessing(max_size=512, mean=..., std=...)                                   # a vitlab detector: longer 512
    Preprocessing(rescale=(2049, 1025), antialias=False, mean=..., std=...)         # SETR on Cityscapes: as mmseg
                                                                                     # rescales, within 2049 x 1025

Whose resampling (`resampler`) matters to the pixel: Pillow's ("pil": timm, the official repositories,
transformers' `...ImageProcessorPil`), torchvision's antialiased resize of uint8 tensors ("torch": transformers'
default image processors and vitlab's classification data) and torchvision's resize of the pixels as floats in
[0, 1], never rounded back to uint8 ("float": vitlab's detection data) round differently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from .channels import convert_pil, convert_tensor

INTERPOLATIONS = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR,
                  "bicubic": InterpolationMode.BICUBIC}
RESAMPLERS = ("torch", "pil", "float")
# the most pixels an image is resized to: a sliver (1 × 100,000) whose shorter side is brought to 224 would be 22
# gigapixels; refused with its size rather than left to exhaust the memory
MAX_RESIZED_PIXELS = 1 << 26

__all__ = ["INTERPOLATIONS", "RESAMPLERS", "Preprocessing"]


def _pair(value: int | Sequence[int] | None, name: str) -> tuple[int, int] | None:
    if value is None:
        return None
    pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"preprocessing {name} must be a positive int or (height, width), got {value!r}")
    return pair  # type: ignore[return-value]


@dataclass(frozen=True)
class Preprocessing:
    """An image (PIL, any mode, or a (C, H, W) uint8 tensor) to the model's input, (channels, H, W) float32."""

    resize: int | tuple[int, int] | None = None  # int: the shorter side to this; (H, W): exactly; None: kept
    max_size: int | None = None  # with an int resize: the longer side at most this; without: the longer side this
    crop: int | tuple[int, int] | None = None  # the centre (H, W) kept after resizing; None: all of it
    interpolation: str = "bilinear"  # one of INTERPOLATIONS
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)  # per channel, in [0, 1] units
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    channels: int = 3
    resampler: str = "torch"  # one of RESAMPLERS: whose resampling (see the module's doc)
    # (long, short): the ratio kept, at the largest scale whose longer side is at most `long` and shorter at most
    # `short`, each side rounded half up: mmcv's `imrescale`, the keep-ratio Resize of the mm* repositories' tests
    rescale: tuple[int, int] | None = None
    antialias: bool = True  # False: plain bilinear taps when shrinking, as OpenCV's INTER_LINEAR (mmcv) resizes
    # where an odd margin puts the centre crop: "round" (torchvision's CenterCrop: timm) or "floor" (transformers'
    # image processors)
    crop_offset: str = "round"

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            values = getattr(self, name)
            values = (float(values),) if isinstance(values, int | float) else tuple(float(v) for v in values)
            if len(values) == 1:
                values = values * self.channels
            if len(values) != self.channels:
                raise ValueError(f"preprocessing {name} needs 1 or {self.channels} values for {self.channels}-channel "
                                 f"images, got {list(values)}")
            object.__setattr__(self, name, values)
        if min(self.std) <= 0:
            raise ValueError(f"preprocessing std must be positive, got {list(self.std)}")
        if isinstance(self.resize, Sequence):
            object.__setattr__(self, "resize", _pair(self.resize, "resize"))
            if self.max_size is not None:
                raise ValueError("preprocessing max_size caps a resize of the shorter side; an exact (H, W) resize "
                                 "takes none")
        elif self.resize is not None and self.resize < 1:
            raise ValueError(f"preprocessing resize must be positive, got {self.resize}")
        object.__setattr__(self, "crop", _pair(self.crop, "crop"))
        object.__setattr__(self, "rescale", _pair(self.rescale, "rescale"))
        if self.rescale is not None and (self.resize is not None or self.max_size is not None):
            raise ValueError("preprocessing rescale bounds both sides itself; it takes no resize or max_size")
        if self.crop_offset not in ("round", "floor"):
            raise ValueError(f"preprocessing crop_offset must be round or floor, got {self.crop_offset!r}")
        if not self.antialias and self.resampler == "pil":
            raise ValueError("Pillow's resampling always filters when it shrinks: antialias=False needs "
                             "resampler='torch'")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"preprocessing interpolation must be one of {', '.join(INTERPOLATIONS)}, got "
                             f"{self.interpolation!r}")
        if self.resampler not in RESAMPLERS:
            raise ValueError(f"preprocessing resampler must be one of {', '.join(RESAMPLERS)}, got {self.resampler!r}")
        if self.channels not in (1, 3):
            raise ValueError(f"preprocessing channels must be 1 or 3, got {self.channels}")

    # ---- as data ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Preprocessing:
        """A record as `to_dict` writes it (a run's config.json, a file's metadata, `Release.preprocessing`);
        unknown keys are refused by name."""
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(record) - names)
        if unknown:
            raise ValueError(f"preprocessing has no {', '.join(map(repr, unknown))}; it records {', '.join(names)}")
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in record.items()})

    # ---- sizes -----------------------------------------------------------------------------------------------
    @property
    def input_size(self) -> tuple[int, int] | None:
        """(H, W) of every input the model sees, where it is fixed (a crop, or an exact resize); None: it varies."""
        return self.crop or (self.resize if isinstance(self.resize, tuple) else None)  # type: ignore[return-value]

    def resized_shape(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) an image of `height` × `width` is resized to, before the crop; an image whose resized form would
        be empty or larger than MAX_RESIZED_PIXELS (a sliver) is refused, with both sizes (one left at its own size
        is not: a sliding window reads a large image as it is)."""
        new_height, new_width = self._resized_shape(height, width)
        resized = (new_height, new_width) != (height, width)
        if resized and (min(new_height, new_width) < 1 or new_height * new_width > MAX_RESIZED_PIXELS):
            raise ValueError(f"an image of {width}×{height} pixels would be resized to {new_width}×{new_height} "
                             f"for this model: give one of a less extreme shape (crop it)")
        return new_height, new_width

    def _resized_shape(self, height: int, width: int) -> tuple[int, int]:
        if isinstance(self.resize, tuple):
            return self.resize
        short, long = min(height, width), max(height, width)
        if self.rescale is not None:
            scale = min(max(self.rescale) / long, min(self.rescale) / short)
            return int(height * scale + 0.5), int(width * scale + 0.5)
        if self.resize is None:
            if self.max_size is None:
                return height, width
            # torchvision's rule (Resize(size=None, max_size)): the longer side becomes max_size
            new_short, new_long = int(self.max_size * short / long), self.max_size
        else:
            new_short, new_long = self.resize, int(self.resize * long / short)
            if self.max_size is not None and long / short * self.resize > self.max_size:
                # the shorter side as large as the cap on the longer allows, rounded as transformers' DETR
                # processor rounds it
                exact = self.max_size * short / long
                new_short, new_long = round(exact), int(exact * long / short)
            if new_short == short:
                return height, width  # the shorter side is already the size asked for
        return (new_short, new_long) if height <= width else (new_long, new_short)

    # ---- the transform ---------------------------------------------------------------------------------------
    def __call__(self, image: Image.Image | torch.Tensor) -> torch.Tensor:
        """One image: PIL (any mode) or a (C, H, W) uint8 tensor -> (channels, H, W) float32, normalised."""
        if isinstance(image, Image.Image):
            image = convert_pil(image, self.channels)
            if self.resampler != "pil":
                image = TF.pil_to_tensor(image)
        elif isinstance(image, torch.Tensor):
            if image.dtype != torch.uint8 or image.ndim != 3:
                raise ValueError(f"an image tensor must be (C, H, W) uint8, got {tuple(image.shape)} {image.dtype}")
            image = convert_tensor(image, self.channels)
            if self.resampler == "pil":
                image = TF.to_pil_image(image)
        else:
            raise TypeError(f"an image is a PIL image or a (C, H, W) uint8 tensor, got {type(image).__name__}")
        if self.resampler == "float":
            image = TF.to_dtype(image, torch.float32, scale=True)
        height, width = (image.height, image.width) if isinstance(image, Image.Image) else image.shape[-2:]
        size = self.resized_shape(height, width)
        if size != (height, width):
            if self.antialias or self.resampler == "float":
                image = TF.resize(image, list(size), interpolation=INTERPOLATIONS[self.interpolation],
                                  antialias=self.antialias)
            else:  # in float, rounded once: torch's uint8 kernel rounds its weights to fixed point (±1 level)
                image = TF.resize(image.float(), list(size), interpolation=INTERPOLATIONS[self.interpolation],
                                  antialias=False).round_().clamp_(0, 255).to(torch.uint8)
        if self.crop is not None:
            height, width = (image.height, image.width) if isinstance(image, Image.Image) else image.shape[-2:]
            if self.crop_offset == "floor" and height >= self.crop[0] and width >= self.crop[1]:
                image = TF.crop(image, (height - self.crop[0]) // 2, (width - self.crop[1]) // 2, *self.crop)
            else:
                image = TF.center_crop(image, list(self.crop))
        if isinstance(image, Image.Image):
            image = TF.pil_to_tensor(image)
        pixels = image if image.is_floating_point() else TF.to_dtype(image, torch.float32, scale=True)
        return TF.normalize(pixels, list(self.mean), list(self.std))
