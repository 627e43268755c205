"""Bicubic upsampling in torch against PIL's own `Image.resize(..., BICUBIC)`, the baseline every super-resolution
paper reports: PIL rounds to 8 bits between its width and height passes, so with the same rounding the two agree to
the grey level, and without it (vitlab's, in floats) they stay within a level on a photograph but where PIL clipped
between its passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.layers.resample import _upsample_last_axis, bicubic_upsample, cubic_kernel, phase_weights


def pil_upscale(image: torch.Tensor, scale: int) -> torch.Tensor:
    """(3, h, w) uint8 -> (3, h·s, w·s) float, by PIL."""
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    big = pil.resize((image.shape[2] * scale, image.shape[1] * scale), Image.BICUBIC)
    return torch.from_numpy(np.asarray(big).copy()).permute(2, 0, 1).float()


def test_the_kernel_is_keys_cubic_with_a_half_and_each_phase_sums_to_one():
    t = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 2.5], dtype=torch.float64)
    # by hand from the formula with a = −0.5: 1; 1.5·⅛ − 2.5·¼ + 1; 0; −0.5·3.375 + 2.5·2.25 − 4·1.5 + 2; 0; 0
    expected = torch.tensor([1.0, 0.5625, 0.0, -0.0625, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(cubic_kernel(t), expected)
    for scale in (2, 3, 4):
        torch.testing.assert_close(phase_weights(scale).sum(dim=1), torch.ones(scale, dtype=torch.float64))


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_with_pils_rounding_between_the_passes_it_is_pils_resize(scale):
    torch.manual_seed(scale)
    image = torch.randint(0, 256, (3, 17, 23), dtype=torch.uint8)  # noise: overshoots, clipped between the passes
    weights = phase_weights(scale)
    wide = _upsample_last_axis(image.double()[None], weights).clamp(0, 255).round()
    ours = _upsample_last_axis(wide.transpose(-1, -2), weights).transpose(-1, -2)[0].clamp(0, 255).round()
    difference = (ours - pil_upscale(image, scale)).abs()
    # PIL's fixed-point weights round a tie the other way now and then, and the second pass can carry it one further
    assert difference.max() <= 2
    assert (difference > 0).float().mean() < 0.01


@pytest.mark.parametrize("scale", [2, 3])
def test_in_floats_it_stays_within_a_grey_level_of_pil_on_a_photograph(scale):
    from skimage import data

    photo = torch.from_numpy(data.astronaut()[100:164, 180:260].copy()).permute(2, 0, 1)
    ours = bicubic_upsample(photo.float()[None], scale)[0].clamp(0, 255)
    assert ours.shape == (3, 64 * scale, 80 * scale)
    difference = (ours - pil_upscale(photo, scale)).abs()
    # within half a level on average; beyond a level only where PIL clipped an overshoot between its passes (the
    # suit's black-on-white edges), a pixel in a thousand
    assert difference.mean() < 0.5
    assert (difference > 1).float().mean() < 0.001
    assert 10 * torch.log10(255 ** 2 / difference.square().mean()) > 50


def test_scale_one_is_the_identity_and_a_fraction_is_refused():
    x = torch.rand(1, 3, 5, 6)
    assert bicubic_upsample(x, 1) is x
    with pytest.raises(ValueError, match="whole factor"):
        bicubic_upsample(x, 1.5)
