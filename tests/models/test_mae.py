"""MAE (models/mae.py) against transformers' ViTMAEForPreTraining with the same weights and the same masking noise,
and its pieces against what they must be by hand: the share of patches kept, the encoder blind to hidden patches,
the patch order, the loss's formula; then SETR started from it."""

import warnings

import pytest
import torch

import vitlab
from vitlab.interop.vit_formats import _from_huggingface
from vitlab.models.mae import MAEConfig

transformers = pytest.importorskip("transformers")


def tiny(**overrides) -> MAEConfig:
    return MAEConfig(**{"img_size": 32, "patch_size": 8, "dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 4.0,
                        "decoder_dim": 16, "decoder_depth": 1, "decoder_heads": 2, **overrides})


def reference(config: MAEConfig):
    hf = transformers.ViTMAEConfig(
        hidden_size=config.dim, num_hidden_layers=config.depth, num_attention_heads=config.num_heads,
        intermediate_size=int(config.dim * config.mlp_ratio), image_size=config.img_size,
        patch_size=config.patch_size, decoder_hidden_size=config.decoder_dim,
        decoder_num_hidden_layers=config.decoder_depth, decoder_num_attention_heads=config.decoder_heads,
        decoder_intermediate_size=int(config.decoder_dim * config.mlp_ratio), layer_norm_eps=config.norm_eps,
        mask_ratio=config.mask_ratio, norm_pix_loss=config.norm_pix_loss, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return transformers.ViTMAEForPreTraining(hf).eval()


def hf_to_vitlab(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face's ViTMAE names -> MAE's official ones: the encoder through vitlab's ViT converter, the decoder's
    blocks through the same (they are ViT blocks), its other tensors by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the converter warns that it drops the decoder, converted here
        out = _from_huggingface({k: v for k, v in state.items() if k.startswith("vit.")}, None)
        blocks = _from_huggingface({k.replace("decoder.decoder_layers.", "vit.layers."): v for k, v in state.items()
                                    if k.startswith("decoder.decoder_layers.")}, None)
    out.update({k.replace("blocks.", "decoder_blocks.", 1): v for k, v in blocks.items()})
    out.update({k.removeprefix("decoder."): v for k, v in state.items()
                if k.startswith("decoder.") and not k.startswith("decoder.decoder_layers.")})
    return out


@pytest.mark.parametrize("norm_pix_loss", [True, False])
def test_equal_to_transformers_vitmae_with_the_same_weights_and_noise(norm_pix_loss):
    config = tiny(norm_pix_loss=norm_pix_loss)
    theirs = reference(config)
    ours = config.build().eval()
    ours.load_state_dict(hf_to_vitlab(theirs.state_dict()), strict=True)
    images = torch.randn(3, 3, 32, 32)
    noise = torch.rand(3, 16)
    with torch.no_grad():
        expected = theirs(pixel_values=images, noise=noise)
        got = ours(images, noise=noise)
    torch.testing.assert_close(got.mask, expected.mask)
    torch.testing.assert_close(got.pred, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=1e-5)


def test_the_fixed_positions_are_the_papers_sine_cosine_table():
    """A fresh model's decoder positions (and its encoder's starting ones) equal the tables transformers' ViTMAE
    modules build for themselves (MAE's layout: the column's sines and cosines, then the row's)."""
    from transformers.models.vit_mae import modeling_vit_mae

    config = tiny()
    hf_config = reference(config).config
    embeddings = modeling_vit_mae.ViTMAEEmbeddings(hf_config)
    embeddings.initialize_weights()
    decoder = modeling_vit_mae.ViTMAEDecoder(hf_config, num_patches=16)
    decoder.initialize_weights(16)
    ours = config.build().state_dict()
    assert decoder.decoder_pos_embed.abs().sum() > 0 and embeddings.position_embeddings.abs().sum() > 0
    torch.testing.assert_close(ours["decoder_pos_embed"], decoder.decoder_pos_embed.detach())
    torch.testing.assert_close(ours["pos_embed"], embeddings.position_embeddings.detach())


def test_masking_keeps_the_stated_share_and_the_encoder_never_sees_a_hidden_patch():
    model = tiny(mask_ratio=0.75).build().eval()
    images = torch.randn(2, 3, 32, 32)
    keep, restore, mask = model.random_masking(2, 16, 0.75, generator=torch.Generator().manual_seed(1))
    assert keep.shape == (2, 4) and (mask.sum(1) == 12).all()  # ⌊16 · 0.25⌋ kept, the rest hidden
    for b in range(2):  # the kept patches are the ones the mask shows, and `restore` undoes the shuffle
        assert set(keep[b].tolist()) == set(torch.nonzero(mask[b] == 0).flatten().tolist())
    changed = images.clone()
    hidden = int(torch.nonzero(mask[0]).flatten()[0])
    row, col = divmod(hidden, 4)
    changed[0, :, row * 8:(row + 1) * 8, col * 8:(col + 1) * 8] += 5.0  # a hidden patch's pixels change
    with torch.no_grad():
        torch.testing.assert_close(model.forward_encoder(changed, keep), model.forward_encoder(images, keep))
        visible = int(keep[0, 0])
        row, col = divmod(visible, 4)
        changed[0, :, row * 8:(row + 1) * 8, col * 8:(col + 1) * 8] += 5.0  # a visible one's do
        assert not torch.allclose(model.forward_encoder(changed, keep), model.forward_encoder(images, keep))


def test_patches_are_cut_row_by_row_with_channels_last_and_put_back():
    model = tiny().build()
    images = torch.randn(2, 3, 32, 32)
    patches = model.patchify(images)
    assert patches.shape == (2, 16, 8 * 8 * 3)
    by_hand = images[1, :, 8:16, 16:24].permute(1, 2, 0).reshape(-1)  # patch (1, 2): row 1, column 2
    torch.testing.assert_close(patches[1, 1 * 4 + 2], by_hand)
    torch.testing.assert_close(model.unpatchify(patches, (4, 4)), images)


def test_the_loss_is_the_mean_squared_error_of_normalised_patches_over_the_hidden_ones():
    model = tiny(norm_pix_loss=True).build()
    images = torch.rand(2, 3, 32, 32)
    mask = torch.zeros(2, 16)
    mask[0, 3] = mask[1, 7] = mask[1, 8] = 1
    zero = torch.zeros(2, 16, 192)
    # a prediction of zeros against a patch normalised by its unbiased variance: the mean of its squares is
    # (n − 1)/n · var/(var + 1e-6), n = 192 values
    variances = [images[0, :, 0:8, 24:32].var(), images[1, :, 8:16, 24:32].var(), images[1, :, 16:24, 0:8].var()]
    expected = sum(191 / 192 * v / (v + 1e-6) for v in variances) / 3
    torch.testing.assert_close(model.reconstruction_loss(images, zero, mask), expected)
    plain = tiny(norm_pix_loss=False).build()
    pixels = plain.patchify(images)
    expected = (pixels[0, 3].square().mean() + pixels[1, 7].square().mean() + pixels[1, 8].square().mean()) / 3
    torch.testing.assert_close(plain.reconstruction_loss(images, zero, mask), expected)


def test_reconstruct_keeps_the_visible_patches_and_undoes_the_normalisation_of_the_hidden_ones():
    model = tiny().build().eval()
    images = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        out = model(images, generator=torch.Generator().manual_seed(0))
    perfect = type(out)(out.loss, model.reconstruction_target(images), out.mask)  # a decoder that is exactly right
    torch.testing.assert_close(model.reconstruct(images, perfect), images, atol=1e-4, rtol=1e-4)
    picture = model.reconstruct(images, out)
    visible = model.patchify(picture)[0][out.mask[0] == 0]
    torch.testing.assert_close(visible, model.patchify(images)[0][out.mask[0] == 0])


@pytest.mark.parametrize("setr", ["setr_mla_small", "setr_pup_small"])
def test_setr_starts_from_the_encoder_of_an_mae_and_leaves_its_decoder(setr, tmp_path):
    from vitlab.interop import save_weights
    from vitlab.tasks.segmentation.task import load_start

    torch.manual_seed(0)
    mae = vitlab.create_model("mae_small")
    path = save_weights(mae, tmp_path / "mae.safetensors")
    model = vitlab.create_model(setr)
    load_start(model, str(path))  # strict: every encoder key fits, nothing of the decoder is left over
    ours, theirs = model.backbone.state_dict(), mae.state_dict()
    for key in ("patch_embed.proj.weight", "blocks.5.mlp.fc2.weight", "blocks.0.attn.qkv.weight"):
        torch.testing.assert_close(ours[key], theirs[key])
    if model.backbone.num_prefix_tokens:  # PUP keeps the class token and its position
        torch.testing.assert_close(ours["pos_embed"], theirs["pos_embed"])
        torch.testing.assert_close(ours["cls_token"], theirs["cls_token"])
    else:  # MLA has none: the positions of the patches only
        torch.testing.assert_close(ours["pos_embed"], theirs["pos_embed"][:, 1:])


def test_bad_configs_say_what_is_expected():
    with pytest.raises(ValueError, match="mask_ratio must be in"):
        tiny(mask_ratio=1.0)
    with pytest.raises(ValueError, match="not divisible by decoder_heads"):
        tiny(decoder_dim=18, decoder_heads=4)
