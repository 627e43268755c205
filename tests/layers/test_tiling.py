"""Tiled inference: for a pointwise function the tiles must reassemble the whole-image result exactly, at any
size (odd ones, ones shorter than a tile), any stride, any output scale and any blend; where tiles disagree, each
blend gives the values worked out by hand."""

from __future__ import annotations

import itertools

import pytest
import torch

from vitlab.layers.tiling import BLENDS, tiled_apply, window_starts


def pointwise(x: torch.Tensor, scale: int = 1) -> torch.Tensor:
    y = torch.tanh(2 * x - 1) * 3 + x ** 2
    return y.repeat_interleave(scale, dim=-2).repeat_interleave(scale, dim=-1)


@pytest.mark.parametrize("size", [(48, 48), (49, 97), (101, 53), (20, 70), (13, 11)])
@pytest.mark.parametrize("scale", [1, 2, 3])
@pytest.mark.parametrize("blend", BLENDS)
def test_pointwise_tiles_reassemble_the_whole_image(size, scale, blend):
    images = torch.rand(2, 3, *size)
    tiled = tiled_apply(lambda t: pointwise(t, scale), images, tile=16, stride=11, batch_size=5, scale=scale,
                        pad_mode="reflect", blend=blend)
    torch.testing.assert_close(tiled, pointwise(images, scale))


def test_windows_cover_every_pixel_and_end_at_the_edge():
    for length in (16, 17, 40, 99):
        starts = window_starts(length, 16, 12)
        assert starts[0] == 0 and starts[-1] == max(0, length - 16)
        assert all(b - a <= 12 for a, b in itertools.pairwise(starts))


def numbered_tiles(tiles, scale=1):
    """Each tile's output (scale times its side) is its own position in the call order, plus one."""
    side = tiles.shape[-1] * scale
    return torch.arange(tiles.shape[0], dtype=torch.float32).view(-1, 1, 1, 1).expand(-1, 1, side, side) + 1


def test_overlaps_are_averaged():
    images = torch.zeros(1, 1, 10, 16)
    out = tiled_apply(numbered_tiles, images, tile=10, stride=6, batch_size=8)
    assert window_starts(16, 10, 6) == [0, 6]
    assert out[0, 0, 0, :6].unique().tolist() == [1.0]
    assert out[0, 0, 0, 6:10].unique().tolist() == [1.5]  # tiles 1 and 2 overlap here
    assert out[0, 0, 0, 10:].unique().tolist() == [2.0]


@pytest.mark.parametrize("scale", [1, 2])
def test_the_window_blend_fades_one_tile_into_the_next_across_the_overlap(scale):
    # tiles at columns 0 and 6 of 16, 10 wide: they share columns 6..9 (the ramp, 4·scale output pixels). In that
    # band tile 1 weighs (distance to its right edge) / ramp, tile 2 (distance to its left edge) / ramp, distances
    # to pixel centres: at output pixel 6·s + k, (4s − k − ½) / 4s and (k + ½) / 4s, which sum to one
    out = tiled_apply(lambda tiles: numbered_tiles(tiles, scale), torch.zeros(1, 1, 10, 16), tile=10, stride=6,
                      scale=scale, blend="window")
    ramp = 4 * scale
    expected = [((ramp - k - 0.5) * 1 + (k + 0.5) * 2) / ramp for k in range(ramp)]
    torch.testing.assert_close(out[0, 0, 0, 6 * scale:10 * scale], torch.tensor(expected))
    assert out[0, 0, :, :6 * scale].unique().tolist() == [1.0]  # the image's border is not ramped
    assert out[0, 0, :, 10 * scale:].unique().tolist() == [2.0]


def test_the_centre_blend_keeps_each_pixel_from_the_tile_it_is_deepest_in():
    out = tiled_apply(numbered_tiles, torch.zeros(1, 1, 16, 16), tile=10, stride=6, blend="centre")
    # columns 6..9 lie 3.5, 2.5, 1.5, 0.5 px inside tile 1's right edge and 0.5, 1.5, 2.5, 3.5 inside tile 2's
    # left edge: the first two from tile 1, the last two from tile 2; rows likewise (tiles 1, 2 above; 3, 4 below)
    by_column = [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert out[0, 0, 0].tolist() == by_column
    assert out[0, 0, 15].tolist() == [c + 2 for c in by_column]
    assert out[0, 0, :, 0].tolist() == [1.0] * 8 + [3.0] * 8


def test_an_unknown_blend_is_refused():
    with pytest.raises(ValueError, match="blend must be one of mean, window, centre"):
        tiled_apply(lambda t: t, torch.rand(1, 1, 30, 30), tile=10, stride=6, blend="gauss")


def test_a_stride_larger_than_the_tile_is_refused():
    with pytest.raises(ValueError, match="stride"):
        tiled_apply(lambda t: t, torch.rand(1, 1, 30, 30), tile=10, stride=11)
