"""Tiled inference: for a pointwise function the tiles must reassemble the whole-image result exactly, at any
size (odd ones, ones shorter than a tile), any stride, and any output scale."""

from __future__ import annotations

import itertools

import pytest
import torch

from vitlab.layers.tiling import tiled_apply, window_starts


def pointwise(x: torch.Tensor, scale: int = 1) -> torch.Tensor:
    y = torch.tanh(2 * x - 1) * 3 + x ** 2
    return y.repeat_interleave(scale, dim=-2).repeat_interleave(scale, dim=-1)


@pytest.mark.parametrize("size", [(48, 48), (49, 97), (101, 53), (20, 70), (13, 11)])
@pytest.mark.parametrize("scale", [1, 2, 3])
def test_pointwise_tiles_reassemble_the_whole_image(size, scale):
    images = torch.rand(2, 3, *size)
    tiled = tiled_apply(lambda t: pointwise(t, scale), images, tile=16, stride=11, batch_size=5, scale=scale,
                        pad_mode="reflect")
    torch.testing.assert_close(tiled, pointwise(images, scale))


def test_windows_cover_every_pixel_and_end_at_the_edge():
    for length in (16, 17, 40, 99):
        starts = window_starts(length, 16, 12)
        assert starts[0] == 0 and starts[-1] == max(0, length - 16)
        assert all(b - a <= 12 for a, b in itertools.pairwise(starts))


def test_overlaps_are_averaged():
    images = torch.zeros(1, 1, 10, 16)

    def fn(tiles):  # each tile's output is its own position in the call order: overlaps must show the mean
        return torch.arange(tiles.shape[0], dtype=torch.float32).view(-1, 1, 1, 1).expand(-1, 1, 10, 10) + 1
    out = tiled_apply(fn, images, tile=10, stride=6, batch_size=8)
    assert window_starts(16, 10, 6) == [0, 6]
    assert out[0, 0, 0, :6].unique().tolist() == [1.0]
    assert out[0, 0, 0, 6:10].unique().tolist() == [1.5]  # tiles 1 and 2 overlap here
    assert out[0, 0, 0, 10:].unique().tolist() == [2.0]


def test_a_stride_larger_than_the_tile_is_refused():
    with pytest.raises(ValueError, match="stride"):
        tiled_apply(lambda t: t, torch.rand(1, 1, 30, 30), tile=10, stride=11)
