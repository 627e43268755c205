"""The degradations against their definitions: noise statistics and quantisation, PIL's bicubic, rain's range,
and reproducibility under a seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.data.degradations import add_gaussian_noise, bicubic_downscale, degrade, generator_for, line_kernel, modcrop


def photo(H=60, W=90, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    smooth = torch.nn.functional.interpolate(torch.rand(1, 3, H // 6, W // 6, generator=g), size=(H, W),
                                             mode="bilinear")
    return (smooth[0] * 200 + 28).round().to(torch.uint8)


@pytest.mark.parametrize("sigma", [30.0, 50.0])
def test_noise_has_the_asked_spread_and_is_8_bit(sigma):
    clean = torch.full((3, 200, 200), 128, dtype=torch.uint8)  # mid-grey: clamping barely touches σ 30 and 50
    noisy = add_gaussian_noise(clean, sigma, torch.Generator().manual_seed(0))
    assert noisy.dtype == torch.uint8
    residual = noisy.double() - 128
    assert residual.std().item() == pytest.approx(sigma, rel=0.04)
    assert abs(residual.mean().item()) < 0.6


def test_bicubic_is_pils_antialiased_resize():
    clean = modcrop(photo(61, 91), 3)
    assert clean.shape == (3, 60, 90)
    small = bicubic_downscale(clean, 3)
    reference = Image.fromarray(clean.permute(1, 2, 0).numpy()).resize((30, 20), Image.BICUBIC)
    assert np.array_equal(small.permute(1, 2, 0).numpy(), np.asarray(reference))
    with pytest.raises(ValueError, match="modcrop"):
        bicubic_downscale(photo(61, 90), 2)


def test_degrade_returns_inputs_and_targets_of_the_right_sizes():
    clean = photo(61, 91)
    for name, scale in (("sr2", 2), ("sr3", 3), ("sr4", 4), ("denoise30", 1), ("denoise50", 1), ("derain", 1)):
        lq, target = degrade(clean, name, generator_for(0, 0, name))
        assert target.shape == (3, 61 - 61 % scale, 91 - 91 % scale)
        assert lq.shape == (3, target.shape[1] // scale, target.shape[2] // scale)
        assert lq.dtype == target.dtype == torch.uint8


def test_rain_only_brightens_along_one_direction():
    clean = photo(120, 120)
    rainy, _ = degrade(clean, "derain", generator_for(0, 3, "derain"))
    added = rainy.int() - clean.int()
    assert added.min() >= 0 and added.max() > 60  # streaks add light; nothing darkens
    assert torch.equal(added[0] > 0, added[1] > 0)  # the same streaks on every channel (where not clipped)
    assert 0.005 < (added[0] > 0).float().mean() < 0.6


def test_the_line_kernel_is_a_normalised_line():
    kernel = line_kernel(9, 0.0)
    assert kernel.sum().item() == pytest.approx(1.0)
    assert kernel[:, 4].sum().item() == pytest.approx(1.0)  # vertical: all weight in the middle column


def test_evaluation_degradations_are_reproducible_and_differ_per_image():
    clean = photo()
    a, _ = degrade(clean, "denoise30", generator_for(7, 1, "denoise30"))
    b, _ = degrade(clean, "denoise30", generator_for(7, 1, "denoise30"))
    c, _ = degrade(clean, "denoise30", generator_for(7, 2, "denoise30"))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="unknown degradation"):
        degrade(clean, "deblur", generator_for(0, 0, "deblur"))
