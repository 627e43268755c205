"""Per-sample v2 pipelines and the batched random_shift_crop_flip, checked against hand-computed values and a
straightforward pad-then-crop reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from vitlab.data import (
    ToChannels,
    build_eval_transform,
    build_train_transform,
    normalize_batch,
    random_shift_crop_flip,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def gradient_image(width: int = 12, height: int = 10) -> Image.Image:
    """An RGB image with no symmetry: R grows left to right, G top to bottom, B constant."""
    image = Image.new("RGB", (width, height))
    image.putdata([(20 * x, 25 * y, 7) for y in range(height) for x in range(width)])
    return image


def test_eval_normalises_a_constant_gray_image() -> None:
    out = build_eval_transform(16, mean=0.5, std=0.25, channels=1)(Image.new("L", (30, 20), 51))
    assert out.shape == (1, 16, 16) and out.dtype == torch.float32
    assert torch.allclose(out, torch.full_like(out, -1.2), atol=1e-6)  # (51/255 - 0.5) / 0.25


def test_eval_normalises_per_channel() -> None:
    out = build_eval_transform(8, IMAGENET_MEAN, IMAGENET_STD)(Image.new("RGB", (8, 8), (255, 0, 51)))
    expected = [(1.0 - 0.485) / 0.229, (0.0 - 0.456) / 0.224, (0.2 - 0.406) / 0.225]
    for c in range(3):
        assert torch.allclose(out[c], torch.full((8, 8), expected[c]), atol=1e-5)


def test_eval_takes_the_centre_of_a_wide_image() -> None:
    image = Image.new("L", (30, 10), 0)
    image.paste(255, (10, 0, 20, 10))  # only the middle third is white
    out = build_eval_transform(10, 0.0, 1.0, channels=1)(image)
    assert out.shape == (1, 10, 10) and torch.all(out == 1.0)


def test_eval_accepts_uint8_tensors_like_pil() -> None:
    image = gradient_image()
    tensor = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)  # (H, W, 3) -> (3, H, W)
    transform = build_eval_transform(10, IMAGENET_MEAN, IMAGENET_STD)
    assert torch.allclose(transform(image), transform(tensor), atol=1e-6)


def test_gray_to_three_channels_and_broadcast_stats() -> None:
    out = build_eval_transform(4, mean=(0.1,), std=(0.5,), channels=3)(torch.full((1, 4, 4), 102, dtype=torch.uint8))
    assert out.shape == (3, 4, 4)
    assert torch.allclose(out, torch.full((3, 4, 4), (0.4 - 0.1) / 0.5), atol=1e-6)


def test_to_channels_rgb_to_gray_tensor() -> None:
    gray = ToChannels(1)(torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1))
    assert gray.shape == (1, 1, 1) and gray.item() == pytest.approx(0.299, abs=2e-3)  # luma weight of red
    rgb = ToChannels(3)(torch.tensor([[[7]]], dtype=torch.uint8))
    assert rgb.shape == (3, 1, 1) and rgb.flatten().tolist() == [7, 7, 7]


def test_stats_length_checked() -> None:
    with pytest.raises(ValueError, match=r"mean needs 1 or 3 values for 3-channel images, got 2"):
        build_eval_transform(8, (0.5, 0.5), (0.2, 0.2, 0.2), channels=3)
    with pytest.raises(ValueError, match="std values must be positive"):
        build_eval_transform(8, 0.5, 0.0, channels=1)


def test_train_flip_only_equals_flipped_eval() -> None:
    image = gradient_image()
    train = build_train_transform(10, IMAGENET_MEAN, IMAGENET_STD, hflip=1.0, crop_padding=0)
    evaluate = build_eval_transform(10, IMAGENET_MEAN, IMAGENET_STD)
    reference = evaluate(image)
    assert not torch.equal(reference, reference.flip(-1))  # the test image is not symmetric
    assert torch.equal(train(image), reference.flip(-1))


def test_train_padding_crop_is_a_shift_of_eval() -> None:
    torch.manual_seed(0)
    image = gradient_image(10, 10)
    base = build_eval_transform(10, 0.0, 1.0)(image)
    train = build_train_transform(10, 0.0, 1.0, hflip=0.0, crop_padding=2)
    padded = F.pad(base, (2, 2, 2, 2))
    candidates = [padded[:, y : y + 10, x : x + 10] for y in range(5) for x in range(5)]
    seen = set()
    for _ in range(40):
        out = train(image)
        matches = [i for i, c in enumerate(candidates) if torch.equal(out, c)]
        assert matches, "output is not a zero-padded shift of the evaluation image"
        seen.add(matches[0])
    assert len(seen) > 5  # the shift really is random


def test_train_random_resized_crop_shape() -> None:
    out = build_train_transform(24, IMAGENET_MEAN, IMAGENET_STD)(gradient_image(50, 40))
    assert out.shape == (3, 24, 24) and out.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"hflip": 1.5}, "probability"), ({"crop_padding": -1}, "crop_padding"), ({"scale": (0.0, 1.0)}, "scale")],
)
def test_train_arguments_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_train_transform(8, 0.5, 0.5, channels=1, **kwargs)


def test_normalize_batch() -> None:
    images = torch.full((2, 1, 3, 3), 51, dtype=torch.uint8)
    assert torch.allclose(normalize_batch(images, 0.5, 0.25), torch.full((2, 1, 3, 3), -1.2), atol=1e-6)
    assert torch.allclose(normalize_batch(images.float() / 255, (0.5,), (0.25,)), torch.full((2, 1, 3, 3), -1.2))


# --- random_shift_crop_flip ---------------------------------------------------------------------------------


def reference_candidates(image: torch.Tensor, pad: int, mode: str) -> list[torch.Tensor]:
    """Every output the batch op may give for one image: pad with F.pad, crop each window, maybe flip."""
    padded = F.pad(image[None].float(), (pad,) * 4, mode="constant" if mode == "zeros" else mode)[0]
    h, w = image.shape[-2:]
    crops = [padded[:, y : y + h, x : x + w] for y in range(2 * pad + 1) for x in range(2 * pad + 1)]
    return crops + [c.flip(-1) for c in crops]


def test_known_image_flip() -> None:
    image = torch.arange(12.0).view(1, 1, 3, 4)
    batch = image.expand(64, 1, 3, 4)
    out = random_shift_crop_flip(batch, pad=0, hflip=True, generator=torch.Generator().manual_seed(0))
    flipped = torch.tensor([[3.0, 2, 1, 0], [7, 6, 5, 4], [11, 10, 9, 8]])
    is_flipped = [torch.equal(o[0], flipped) for o in out]
    is_same = [torch.equal(o[0], image[0, 0]) for o in out]
    assert all(f != s for f, s in zip(is_flipped, is_same, strict=True))  # each one exactly one of the two
    assert 10 < sum(is_flipped) < 54  # about half flipped
    assert torch.equal(flipped, torch.flip(image[0, 0], dims=[-1]))


def test_no_flip_no_pad_is_identity() -> None:
    images = torch.rand(5, 2, 6, 7)
    assert torch.equal(random_shift_crop_flip(images, pad=0, hflip=False), images)


def test_deterministic_under_a_seed() -> None:
    images = torch.rand(16, 3, 9, 9)
    a = random_shift_crop_flip(images, 3, generator=torch.Generator().manual_seed(5))
    b = random_shift_crop_flip(images, 3, generator=torch.Generator().manual_seed(5))
    c = random_shift_crop_flip(images, 3, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate"])
def test_matches_pad_then_crop_reference(mode: str) -> None:
    images = torch.rand(24, 2, 6, 8)
    out = random_shift_crop_flip(images, 3, generator=torch.Generator().manual_seed(1), padding_mode=mode)
    seen = set()
    for image, result in zip(images, out, strict=True):
        matches = [i for i, c in enumerate(reference_candidates(image, 3, mode)) if torch.equal(result, c)]
        assert matches, f"sample is not a {mode}-padded shift (optionally flipped) of its input"
        seen.add(matches[0])
    assert len(seen) > 10  # many different shifts/flips were drawn


def test_uint8_batches_keep_dtype() -> None:
    images = torch.randint(1, 256, (8, 1, 28, 28), dtype=torch.uint8)
    out = random_shift_crop_flip(images, 2, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == images.shape
    for image, result in zip(images, out, strict=True):
        assert any(torch.equal(result.float(), c) for c in reference_candidates(image, 2, "zeros"))


def test_shift_arguments_checked() -> None:
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        random_shift_crop_flip(torch.zeros(2, 28, 28), 2)
    with pytest.raises(ValueError, match=r"pad must be 0\.\.5 for reflect"):
        random_shift_crop_flip(torch.zeros(1, 1, 6, 6), 6, padding_mode="reflect")
    with pytest.raises(ValueError, match="padding_mode"):
        random_shift_crop_flip(torch.zeros(1, 1, 6, 6), 1, padding_mode="wrap")  # type: ignore[arg-type]
