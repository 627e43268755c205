"""Sliding-window inference, the loss with its auxiliary terms, one batch overfitted, and a ViT checkpoint starting
the encoder."""

import pytest
import torch
import torch.nn.functional as F

import vitlab
from vitlab.models.setr import SegmentationOutput, SETRConfig
from vitlab.tasks.segmentation.sliding import sliding_window_logits, window_starts
from vitlab.tasks.segmentation.task import pixel_cross_entropy


class PerPixel(torch.nn.Module):
    """A model whose output at a pixel depends on that pixel only: windows must reproduce the whole image."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.calls = []

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        return SegmentationOutput(self.conv(x))


def test_windows_cover_every_pixel_and_average_to_the_whole_image():
    assert window_starts(100, 32, 20) == [0, 20, 40, 60, 68] and window_starts(30, 32, 20) == [0]
    model = PerPixel()
    images = torch.randn(2, 3, 45, 70)
    torch.testing.assert_close(sliding_window_logits(model, images, crop=32, stride=20, batch_size=3),
                               model.conv(images))
    assert all(shape[-2:] == (32, 32) and shape[0] <= 3 * 2 for shape in model.calls)


def test_an_image_that_fits_one_window_is_one_forward_at_its_own_size():
    torch.manual_seed(0)
    model = SETRConfig(decoder="pup", encoder="vit_tiny_patch16_224", img_size=64, patch_size=8, depth=2,
                       num_classes=5, channels=8).build().eval()
    images = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(sliding_window_logits(model, images, crop=64, stride=40), model(images).logits)
    # larger: the windows' average, each window a whole-model forward
    big = torch.randn(1, 3, 64, 96)
    expected = torch.zeros(1, 5, 64, 96)
    count = torch.zeros(1, 1, 64, 96)
    for x in (0, 32):
        expected[..., x:x + 64] += model(big[..., x:x + 64]).logits
        count[..., x:x + 64] += 1
    torch.testing.assert_close(sliding_window_logits(model, big, crop=64, stride=40), expected / count)


def test_pixel_loss_ignores_255_and_never_divides_by_zero():
    logits = torch.randn(2, 3, 4, 4)
    masks = torch.randint(0, 3, (2, 4, 4))
    masks[0, 0] = 255
    torch.testing.assert_close(pixel_cross_entropy(logits, masks),
                               F.cross_entropy(logits, masks, ignore_index=255))
    assert pixel_cross_entropy(logits, torch.full((2, 4, 4), 255)).item() == 0.0


@pytest.mark.parametrize("decoder", ["naive", "pup", "mla"])
def test_one_batch_overfits_to_near_perfect_masks(decoder):
    torch.manual_seed(0)
    model = SETRConfig(decoder=decoder, encoder="vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                       dim=64, num_heads=4, num_classes=3, channels=32, mla_channels=32,
                       mla_head_channels=16).build()
    images = torch.randn(4, 3, 32, 32)
    masks = torch.zeros(4, 32, 32, dtype=torch.long)
    masks[:, 8:24, 8:16] = 1  # on the 8-pixel patch grid: Naive's one bilinear 8× upsampling can draw it
    masks[:2, 16:, 24:] = 2
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for _ in range(150):
        out = model(images)
        loss = pixel_cross_entropy(out.logits, masks) + 0.4 * sum(pixel_cross_entropy(a, masks)
                                                                   for a in out.aux_logits)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    accuracy = (model(images).logits.argmax(1) == masks).float().mean()
    assert accuracy > 0.97, accuracy


def test_a_vit_checkpoint_starts_the_encoder(tmp_path):
    from vitlab.interop import save_weights
    from vitlab.tasks.segmentation.task import load_start

    torch.manual_seed(0)
    vit = vitlab.create_model("vit_tiny_patch16_224", depth=2, img_size=32, patch_size=8)  # 4×4 positions
    save_weights(vit, tmp_path / "vit.safetensors")
    model = SETRConfig(decoder="pup", encoder="vit_tiny_patch16_224", img_size=64, patch_size=8, depth=2,
                       num_classes=3, channels=8).build()
    load_start(model, str(tmp_path / "vit.safetensors"))
    torch.testing.assert_close(model.backbone.blocks[1].attn.qkv.weight, vit.blocks[1].attn.qkv.weight)
    assert model.backbone.pos_embed.shape == (1, 1 + 64, 192)  # resampled from 4×4 to the crop's 8×8
    mla = SETRConfig(decoder="mla", encoder="vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                     num_classes=3, channels=8, mla_layers=(0, 0, 1, 1)).build()
    load_start(mla, str(tmp_path / "vit.safetensors"))  # no class token there: its position entry is dropped
    torch.testing.assert_close(mla.backbone.pos_embed, vit.pos_embed[:, 1:])
