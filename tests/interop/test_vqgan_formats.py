"""VQGANs of diffusers (`VQModel.save_pretrained`) and of taming-transformers (its `Encoder`, `Decoder`,
`VectorQuantizer2` and `NLayerDiscriminator`, from the PyPI package installed without its dependencies), all with
random weights, load into vitlab's VQGAN through `model_from_checkpoint` and compute the same latents, code indices,
reconstructions and discriminator logits."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from vitlab.interop import model_from_checkpoint
from vitlab.interop.formats import read_checkpoint


def randomise(module: nn.Module, seed: int = 0) -> None:
    """Every weight random, norms included: a zero-initialised layer would hide a wrong mapping."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name and
                                                                             name.endswith("weight") else 0.0))


def small_vqmodel():
    diffusers = pytest.importorskip("diffusers")
    model = diffusers.VQModel(
        in_channels=3, out_channels=3,
        down_block_types=("DownEncoderBlock2D", "AttnDownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "AttnUpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(32, 64, 64), layers_per_block=1, latent_channels=8, num_vq_embeddings=64,
        norm_num_groups=8, vq_embed_dim=16, sample_size=32)
    randomise(model)
    with torch.no_grad():  # codes on the scale of the latents, so that the nearest codes are spread out
        model.quantize.embedding.weight.normal_()
    return model.eval()


def compare_with_diffusers(theirs, mine, x):
    with torch.no_grad():
        latents = theirs.encode(x).latents
        _, their_loss, (_, _, their_indices) = theirs.quantize(latents)
        reconstruction = theirs(x).sample
        out = mine(x)
        assert torch.allclose(mine.encode(x), latents, atol=1e-5)
        assert torch.equal(out.indices.flatten(), their_indices.flatten())
        assert torch.allclose(out.reconstruction, reconstruction, atol=1e-5)
        assert torch.allclose(out.quantizer_loss, their_loss, atol=1e-6)  # legacy: their placement of β
        assert torch.allclose(mine.decode_indices(out.indices), reconstruction, atol=1e-5)


def test_diffusers_vqmodel_loads_with_equal_outputs(tmp_path):
    theirs = small_vqmodel()
    theirs.save_pretrained(tmp_path / "vq")
    mine = model_from_checkpoint(tmp_path / "vq").eval()
    c = mine.config
    assert (c.ch, c.ch_mult, c.num_res_blocks, c.z_channels, c.embed_dim, c.num_codes, c.num_groups) == \
        (32, (1, 2, 2), 1, 8, 16, 64, 8)
    assert c.attn_resolutions == (16,) and c.legacy and mine.discriminator is None
    torch.manual_seed(1)
    compare_with_diffusers(theirs, mine, torch.randn(2, 3, 32, 32))
    compare_with_diffusers(theirs, mine, torch.randn(1, 3, 48, 32))  # any multiple of f


def test_old_diffusers_attention_names_are_accepted(tmp_path):
    theirs = small_vqmodel()
    theirs.save_pretrained(tmp_path / "vq")
    weights = tmp_path / "vq" / "diffusion_pytorch_model.safetensors"
    old = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
    state = {}
    for key, value in load_file(weights).items():
        for new, former in old.items():
            key = key.replace(f".{new}.", f".{former}.")
        state[key] = value
    assert any(".proj_attn." in k for k in state) and not any(".to_q." in k for k in state)
    save_file(state, weights)
    mine = model_from_checkpoint(tmp_path / "vq").eval()
    torch.manual_seed(2)
    compare_with_diffusers(theirs, mine, torch.randn(2, 3, 32, 32))


class TamingVQGAN(nn.Module):
    """taming's VQModel without its Lightning and loss code: the same module names, so its state dict is what a
    taming checkpoint's `state_dict` holds."""

    def __init__(self, ddconfig, n_embed, embed_dim, discriminator=None):
        super().__init__()
        model = pytest.importorskip("taming.modules.diffusionmodules.model")
        quantize = pytest.importorskip("taming.modules.vqvae.quantize")
        self.encoder = model.Encoder(**ddconfig)
        self.decoder = model.Decoder(**ddconfig)
        self.quantize = quantize.VectorQuantizer2(n_embed, embed_dim, beta=0.25, sane_index_shape=True)
        self.quant_conv = nn.Conv2d(ddconfig["z_channels"], embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(embed_dim, ddconfig["z_channels"], 1)
        if discriminator is not None:
            self.loss = nn.Module()
            self.loss.discriminator = discriminator

    def forward(self, x):
        h = self.quant_conv(self.encoder(x))
        z_q, loss, (_, _, indices) = self.quantize(h)
        return h, indices, self.decoder(self.post_quant_conv(z_q)), loss


def test_taming_modules_load_with_equal_outputs(tmp_path):
    pytest.importorskip("einops")  # taming's quantize.py imports it
    discriminator_module = pytest.importorskip("taming.modules.discriminator.model")
    ddconfig = dict(double_z=False, z_channels=8, resolution=32, in_channels=3, out_ch=3, ch=32, ch_mult=(1, 1, 2),
                    num_res_blocks=2, attn_resolutions=(16,), dropout=0.0)
    disc = discriminator_module.NLayerDiscriminator(input_nc=3, ndf=16, n_layers=2)
    theirs = TamingVQGAN(ddconfig, n_embed=32, embed_dim=8, discriminator=disc)
    randomise(theirs)
    with torch.no_grad():
        theirs.quantize.embedding.weight.normal_()
    theirs.eval()
    state = theirs.state_dict()
    state["loss.perceptual_loss.net.slice1.0.weight"] = torch.zeros(1)  # a training checkpoint's VGG: dropped
    assert any(k.startswith("encoder.down.1.block.0.nin_shortcut") for k in state) is False
    assert any(".nin_shortcut." in k for k in state), "the taming layout has width changes with 1×1 shortcuts"
    torch.save({"state_dict": state}, tmp_path / "last.ckpt")
    mine = model_from_checkpoint(tmp_path / "last.ckpt").eval()
    assert read_checkpoint(tmp_path / "last.ckpt")[1].format == "taming"
    c = mine.config
    assert (c.ch_mult, c.num_res_blocks, c.disc_layers, c.disc_channels) == ((1, 1, 2), 2, 2, 16)
    # a state dict does not say the training size: attention is placed by level, at the second one (f = 2)
    assert c.attn_resolutions == (c.resolution // 2,)
    torch.manual_seed(3)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        latents, indices, reconstruction, loss = theirs(x)
        out = mine(x)
        assert torch.allclose(mine.encode(x), latents, atol=1e-5)
        assert torch.equal(out.indices, indices)
        assert torch.allclose(out.reconstruction, reconstruction, atol=1e-5)
        assert torch.allclose(out.quantizer_loss, loss, atol=1e-6)
        assert torch.allclose(mine.discriminator(x), disc(x), atol=1e-5)
