"""Image transforms: per-sample torchvision v2 pipelines, and augmentation of whole batches with tensor ops.

The per-sample pipelines take a PIL image (any mode) or an image tensor ``(C, H, W)`` uint8 and return a
normalised ``(channels, img_size, img_size) float32`` tensor.

The batch functions exist because per-sample Python transforms dominate the cost of training a small model
on a few CPU cores. For an in-memory data set such as Fashion-MNIST, index a batch of uint8 images and call
:func:`random_shift_crop_flip` and :func:`normalize_batch` on it, on the CPU or the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from PIL import Image
from torchvision.transforms import v2

from vitlab.data.channels import convert_pil, convert_tensor
from vitlab.data.preprocessing import Preprocessing

__all__ = [
    "ToChannels",
    "build_eval_transform",
    "build_train_transform",
    "normalize_batch",
    "random_shift_crop_flip",
]


class ToChannels:
    """Convert a PIL image or an image tensor ``(C, H, W)`` to ``channels`` channels (1 or 3)."""

    def __init__(self, channels: int) -> None:
        convert_tensor(torch.zeros(1, 1, 1), channels)  # validates ``channels`` early, at build time
        self.channels = channels

    def __call__(self, image: Image.Image | torch.Tensor) -> Image.Image | torch.Tensor:
        if isinstance(image, Image.Image):
            return convert_pil(image, self.channels)
        return convert_tensor(image, self.channels)

    def __repr__(self) -> str:
        return f"ToChannels(channels={self.channels})"


def _stats(values: Sequence[float] | float, channels: int, name: str) -> list[float]:
    """Per-channel statistic; a single value is repeated for every channel."""
    values = [float(values)] if isinstance(values, (int, float)) else [float(v) for v in values]
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise ValueError(
            f"{name} needs 1 or {channels} values for {channels}-channel images, got {len(values)}: {values}. "
            f"Pass the data set's per-channel {name}."
        )
    if name == "std" and any(v <= 0 for v in values):
        raise ValueError(f"std values must be positive, got {values}.")
    return values


def _check_size(img_size: int) -> None:
    if not isinstance(img_size, int) or img_size < 1:
        raise ValueError(f"img_size must be a positive int (pixels per side), got {img_size!r}.")


def build_eval_transform(
    img_size: int, mean: Sequence[float] | float, std: Sequence[float] | float, channels: int = 3
) -> Preprocessing:
    """Deterministic pipeline: resize the shorter side to ``img_size``, centre-crop a square, normalise (a run's
    `Preprocessing`, the one its predictions and exported graphs are fed through too).

    Input: PIL image or ``(C, H, W) uint8`` tensor. Output: ``(channels, img_size, img_size) float32``.
    """
    _check_size(img_size)
    return Preprocessing(resize=img_size, crop=img_size, mean=tuple(_stats(mean, channels, "mean")),
                         std=tuple(_stats(std, channels, "std")), channels=channels)


def build_train_transform(
    img_size: int,
    mean: Sequence[float] | float,
    std: Sequence[float] | float,
    channels: int = 3,
    *,
    hflip: float = 0.5,
    crop_padding: int | None = None,
    scale: tuple[float, float] = (0.25, 1.0),
    randaugment: tuple[int, int] | None = None,
    random_erasing: float = 0.0,
) -> v2.Compose:
    """Random-augmentation pipeline.

    With ``crop_padding=None`` the geometry is a random-resized crop (area fraction in ``scale``) to
    ``img_size``. With ``crop_padding=p`` it is the evaluation geometry (resize + centre crop) followed by a
    random crop from the image padded by ``p`` zero pixels, i.e. a shift of up to ``p`` pixels: the usual
    choice for small, centred images such as Fashion-MNIST. Then a horizontal flip with probability ``hflip``,
    ``randaugment=(num_ops, magnitude)`` RandAugment on the uint8 image, and after normalisation random erasing
    of a box with probability ``random_erasing`` (DeiT's recipe).

    Input: PIL image or ``(C, H, W) uint8`` tensor. Output: ``(channels, img_size, img_size) float32``.
    """
    _check_size(img_size)
    if not 0.0 <= hflip <= 1.0:
        raise ValueError(f"hflip is a probability in [0, 1], got {hflip!r}.")
    if crop_padding is not None and crop_padding < 0:
        raise ValueError(f"crop_padding must be >= 0 pixels (or None for random-resized crops), got {crop_padding}.")
    if not 0.0 < scale[0] <= scale[1] <= 1.0:
        raise ValueError(f"scale must be (min, max) area fractions with 0 < min <= max <= 1, got {scale!r}.")

    steps: list = [ToChannels(channels), v2.ToImage()]
    if crop_padding is None:
        # ImageNet's default scale (0.08, 1) crops the object away too often on small data sets.
        steps.append(v2.RandomResizedCrop(img_size, scale=scale, antialias=True))
    else:
        steps += [v2.Resize(img_size, antialias=True), v2.CenterCrop(img_size)]
        if crop_padding > 0:
            steps.append(v2.RandomCrop(img_size, padding=crop_padding, fill=0))
    if hflip > 0:
        steps.append(v2.RandomHorizontalFlip(hflip))
    if randaugment is not None:
        steps.append(v2.RandAugment(num_ops=randaugment[0], magnitude=randaugment[1]))
    steps += [
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(_stats(mean, channels, "mean"), _stats(std, channels, "std")),
    ]
    if random_erasing > 0:
        steps.append(v2.RandomErasing(p=random_erasing, value="random"))
    return v2.Compose(steps)


def normalize_batch(images: torch.Tensor, mean: Sequence[float] | float, std: Sequence[float] | float) -> torch.Tensor:
    """Scale and normalise a batch: ``images: (B, C, H, W)`` uint8 (0..255) or float (0..1) -> float32.

    ``mean`` and ``std`` are per channel in [0, 1] units, as in :func:`build_eval_transform`.
    """
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (B, C, H, W), got {tuple(images.shape)}; add dims with unsqueeze.")
    channels = images.shape[1]
    x = images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()
    m = torch.tensor(_stats(mean, channels, "mean"), device=x.device).view(1, channels, 1, 1)
    s = torch.tensor(_stats(std, channels, "std"), device=x.device).view(1, channels, 1, 1)
    return (x - m) / s


def _source_index(offset: torch.Tensor, size: int, pad: int, mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Input row (or column) read by each output position, for a window starting at ``offset`` in padded space.

    Returns ``index: (B, size)`` into the unpadded image and, for zero padding, ``inside: (B, size) bool``
    marking positions that fall on the image rather than on the padding.
    """
    index = offset[:, None] + torch.arange(size, device=offset.device) - pad
    if mode == "reflect":
        # Mirror about the first and last pixel without repeating them, as torch.nn.functional.pad does.
        return (size - 1) - ((size - 1) - index.abs()).abs(), None
    if mode == "replicate":
        return index.clamp(0, size - 1), None
    inside = (index >= 0) & (index < size)
    return index.clamp(0, size - 1), inside


def random_shift_crop_flip(
    images: torch.Tensor,
    pad: int,
    hflip: bool = True,
    generator: torch.Generator | None = None,
    padding_mode: Literal["zeros", "reflect", "replicate"] = "zeros",
) -> torch.Tensor:
    """Randomly translate each image by up to ``pad`` pixels and flip it horizontally with probability 1/2.

    Equivalent to padding every image by ``pad`` on each side, cropping a random ``H x W`` window and flipping
    half of them, but done for the whole batch with one gather and no padded copy.

    Args:
        images: ``(B, C, H, W)``, any dtype (uint8 or float), on any device.
        pad: largest shift in pixels, ``0 <= pad``; ``pad < min(H, W)`` for reflect padding.
        hflip: whether to flip a random half of the batch.
        generator: source of randomness; the same seed gives the same output. Its device is where the random
            numbers are drawn (a CPU generator works for a CUDA batch).
        padding_mode: what the shift exposes: ``"zeros"``, ``"reflect"`` or ``"replicate"`` (edge pixels).

    Returns:
        ``(B, C, H, W)``, same dtype and device as ``images``.
    """
    if images.ndim != 4:
        raise ValueError(
            f"expected images of shape (B, C, H, W), got {tuple(images.shape)}; add a channel dim with unsqueeze(1)."
        )
    if padding_mode not in ("zeros", "reflect", "replicate"):
        raise ValueError(f"padding_mode must be 'zeros', 'reflect' or 'replicate', got {padding_mode!r}.")
    b, c, h, w = images.shape
    if pad < 0 or (padding_mode == "reflect" and pad >= min(h, w)):
        limit = f"0..{min(h, w) - 1} for reflect padding" if padding_mode == "reflect" else ">= 0"
        raise ValueError(f"pad must be {limit} for {h}x{w} images, got {pad}.")

    rng_device = generator.device if generator is not None else images.device
    shifts = torch.randint(0, 2 * pad + 1, (2, b), generator=generator, device=rng_device).to(images.device)
    rows, row_inside = _source_index(shifts[0], h, pad, padding_mode)
    cols, col_inside = _source_index(shifts[1], w, pad, padding_mode)
    if hflip:
        flip = (torch.rand(b, generator=generator, device=rng_device) < 0.5).to(images.device)[:, None]
        # Flipping the cropped window is reading its columns right to left.
        cols = torch.where(flip, cols.flip(1), cols)
        if col_inside is not None:
            col_inside = torch.where(flip, col_inside.flip(1), col_inside)

    batch = torch.arange(b, device=images.device).view(b, 1, 1, 1)
    channel = torch.arange(c, device=images.device).view(1, c, 1, 1)
    out = images[batch, channel, rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]
    if row_inside is not None and col_inside is not None:
        inside = row_inside.view(b, 1, h, 1) & col_inside.view(b, 1, 1, w)
        out = out.masked_fill(~inside, 0)
    return out
