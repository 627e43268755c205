"""Restoration metrics against scikit-image's on the same arrays, and the Y conversion against the official
coefficients written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from vitlab.tasks.restoration.metrics import psnr, quantize, restoration_scores, rgb_to_y, ssim


def pair(seed=0, size=(2, 3, 40, 52)):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, 256, size, generator=g).double()
    clean = torch.nn.functional.avg_pool2d(clean, 3, stride=1, padding=1)  # some structure for SSIM to see
    noisy = (clean + 20 * torch.randn(size, generator=g, dtype=torch.float64)).clamp(0, 255)
    return clean.round(), noisy.round()


def test_y_is_the_official_luma():
    rgb = torch.tensor([[[[255.0]], [[0.0]], [[0.0]]], [[[10.0]], [[200.0]], [[30.0]]]])  # (2, 3, 1, 1)
    expected = [16 + 65.738 * 255 / 256, 16 + (65.738 * 10 + 129.057 * 200 + 25.064 * 30) / 256]
    assert rgb_to_y(rgb).flatten().tolist() == pytest.approx(expected, abs=1e-4)
    assert rgb_to_y(torch.full((1, 3, 1, 1), 255.0)).item() == pytest.approx(235.0, abs=0.01)  # white: 16 + 219


def test_psnr_and_ssim_equal_scikit_image_on_the_same_y_arrays():
    clean, noisy = pair()
    y_clean, y_noisy = rgb_to_y(clean), rgb_to_y(noisy)
    ours_psnr, ours_ssim = psnr(y_noisy, y_clean), ssim(y_noisy, y_clean)
    for i in range(2):
        a, b = y_noisy[i, 0].numpy(), y_clean[i, 0].numpy()
        assert ours_psnr[i].item() == pytest.approx(peak_signal_noise_ratio(b, a, data_range=255), abs=1e-9)
        reference = structural_similarity(b, a, data_range=255, gaussian_weights=True, sigma=1.5,
                                          use_sample_covariance=False)
        assert ours_ssim[i].item() == pytest.approx(reference, abs=1e-7)


def test_rgb_ssim_averages_the_channels_as_scikit_image():
    clean, noisy = pair(1, (1, 3, 30, 30))
    reference = structural_similarity(clean[0].numpy(), noisy[0].numpy(), data_range=255, gaussian_weights=True,
                                      sigma=1.5, use_sample_covariance=False, channel_axis=0)
    assert ssim(noisy, clean).item() == pytest.approx(reference, abs=1e-7)


def test_scores_quantise_the_output_and_shave_the_scale():
    clean, noisy = pair(2, (1, 3, 24, 24))
    target = clean / 255
    output = noisy / 255 + 0.3 / 255  # quantised back to noisy's integers
    scores = restoration_scores(output.float(), target.float(), scale=2)
    y_ref = rgb_to_y(clean)[..., 2:-2, 2:-2][0, 0].numpy()
    y_out = rgb_to_y(noisy)[..., 2:-2, 2:-2][0, 0].numpy()
    assert scores["psnr_y"].item() == pytest.approx(peak_signal_noise_ratio(y_ref, y_out, data_range=255), abs=1e-4)
    rgb = peak_signal_noise_ratio(clean[0, :, 2:-2, 2:-2].numpy(), noisy[0, :, 2:-2, 2:-2].numpy(), data_range=255)
    assert scores["psnr_rgb"].item() == pytest.approx(rgb, abs=1e-4)
    assert torch.equal(quantize(torch.tensor([-0.1, 0.5, 1.2])), torch.tensor([0.0, 128.0, 255.0]))
    assert np.isfinite(scores["ssim_y"].item())
