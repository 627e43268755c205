import math

import pytest
import torch

from vitlab.layers.pos_embed import resample_pos_embed, sincos_1d, sincos_2d, sincos_pos_embed


def test_sincos_1d_is_the_paper_formula():
    pe = sincos_1d(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sincos_2d_rows_and_columns():
    pe = sincos_2d((3, 5), 16).reshape(3, 5, 16)
    rows, cols = sincos_1d(3, 8), sincos_1d(5, 8)
    for r in range(3):
        for c in range(5):
            torch.testing.assert_close(pe[r, c], torch.cat([rows[r], cols[c]]))
    full = sincos_pos_embed((3, 5), 16, num_prefix_tokens=1)
    assert full.shape == (1, 16, 16) and (full[0, 0] == 0).all()
    with pytest.raises(ValueError, match="divisible by 4"):
        sincos_2d((2, 2), 10)


def test_resample_to_same_grid_returns_input_unchanged():
    pe = torch.randn(1, 1 + 14 * 14, 32)
    assert resample_pos_embed(pe, (14, 14)) is pe


def test_resample_keeps_prefix_and_matches_timm():
    timm_layers = pytest.importorskip("timm.layers")
    pe = torch.randn(1, 1 + 14 * 14, 32)
    out = resample_pos_embed(pe, (24, 24), num_prefix_tokens=1)
    assert out.shape == (1, 1 + 24 * 24, 32)
    torch.testing.assert_close(out[:, :1], pe[:, :1])
    reference = timm_layers.resample_abs_pos_embed(pe, (24, 24), num_prefix_tokens=1)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


def test_resample_non_square_and_constant_stays_constant():
    pe = torch.full((1, 2 + 4 * 6, 8), 0.25)
    out = resample_pos_embed(pe, (8, 3), old_grid=(4, 6), num_prefix_tokens=2)
    assert out.shape == (1, 2 + 24, 8)
    torch.testing.assert_close(out, torch.full_like(out, 0.25))
    with pytest.raises(ValueError, match="not square"):
        resample_pos_embed(torch.randn(1, 1 + 24, 8), (5, 5))
