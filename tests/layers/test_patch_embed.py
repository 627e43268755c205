import pytest
import torch

from vitlab.layers.patch_embed import PatchEmbed, patchify, unpatchify


def test_patchify_matches_slicing_by_hand():
    images = torch.randn(2, 3, 12, 20)
    patches = patchify(images, (3, 5))  # grid 4 × 4
    assert patches.shape == (2, 16, 3 * 3 * 5)
    # patch at grid row 2, column 3 is pixels [6:9, 15:20], flattened channel-major
    torch.testing.assert_close(patches[1, 2 * 4 + 3], images[1, :, 6:9, 15:20].reshape(-1))
    torch.testing.assert_close(unpatchify(patches, (3, 5), (4, 4)), images)


@pytest.mark.parametrize("img_size,patch", [((28, 28), (4, 4)), ((12, 20), (3, 5)), ((32, 16), (8, 4))])
def test_conv_and_linear_projections_agree(img_size, patch):
    conv = PatchEmbed(img_size, patch, in_chans=3, embed_dim=24, projection="conv")
    linear = PatchEmbed(img_size, patch, in_chans=3, embed_dim=24, projection="linear")
    with torch.no_grad():  # the Linear's weight is the Conv2d kernel flattened
        linear.proj.weight.copy_(conv.proj.weight.reshape(24, -1))
        linear.proj.bias.copy_(conv.proj.bias)
    images = torch.randn(2, 3, *img_size)
    tokens = conv(images)
    h, w = img_size[0] // patch[0], img_size[1] // patch[1]
    assert tokens.shape == (2, h * w, 24)
    torch.testing.assert_close(tokens, linear(images), atol=1e-5, rtol=1e-5)


def test_token_is_the_projection_of_its_patch():
    embed = PatchEmbed((8, 12), (4, 6), in_chans=1, embed_dim=5)
    images = torch.randn(1, 1, 8, 12)
    expected = embed.proj.weight.reshape(5, -1) @ images[0, 0, 4:8, 6:12].reshape(-1) + embed.proj.bias
    torch.testing.assert_close(embed(images)[0, 3], expected, atol=1e-5, rtol=1e-5)  # grid (1, 1) = token 3


def test_size_not_multiple_of_patch():
    with pytest.raises(ValueError, match="not a multiple of the patch"):
        PatchEmbed(30, 4)
    embed = PatchEmbed(28, 4, in_chans=1, embed_dim=8, strict_img_size=False)
    with pytest.raises(ValueError, match=r"30×28 is not a multiple of the patch size 4×4"):
        embed(torch.randn(1, 1, 30, 28))


def test_wrong_channels_and_size_messages():
    embed = PatchEmbed(28, 4, in_chans=1, embed_dim=8)
    with pytest.raises(ValueError, match="expected 1 input channels, got 3"):
        embed(torch.randn(1, 3, 28, 28))
    with pytest.raises(ValueError, match="expected images of size 28×28, got 32×32"):
        embed(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match=r"shape \(B, C, H, W\)"):
        embed(torch.randn(1, 28, 28))


def test_conv_stem_tokens_cover_the_patch_grid():
    from vitlab.layers.patch_embed import ConvStemPatchEmbed

    stem = ConvStemPatchEmbed(28, 4, in_chans=1, embed_dim=16, stem_channels=(8, 12)).eval()
    assert stem.grid_size == (7, 7)
    images = torch.randn(2, 1, 28, 28)
    tokens = stem(images)
    assert tokens.shape == (2, 49, 16)
    # a token depends only on its own neighbourhood: changing the bottom-right corner leaves token 0 alone
    changed = images.clone()
    changed[:, :, 20:, 20:] += 5
    torch.testing.assert_close(stem(changed)[:, 0], tokens[:, 0])
    assert not torch.allclose(stem(changed)[:, -1], tokens[:, -1])
    three = ConvStemPatchEmbed(28, 7, in_chans=1, embed_dim=16, stem_channels=(8, 12, 16))
    assert three(images).shape == (2, 16, 16)  # 28 -> 14 -> 7 -> 4: the grid of 7×7 patches
    with pytest.raises(ValueError, match="into a 7×7 grid, but patch_size"):
        ConvStemPatchEmbed(28, 7, in_chans=1, embed_dim=16, stem_channels=(8, 12))
