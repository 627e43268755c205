"""VQGAN's autoencoder: shapes, the paper's configuration counted against taming-transformers' own modules, the
interface (encode / decode / decode_indices / forward), and errors that say what was expected."""

import pytest
import torch

from vitlab.models import create_model, get_config
from vitlab.models.vqgan import VQGANConfig


def count(module):
    return sum(p.numel() for p in module.parameters())


def test_paper_configuration_has_taming_parameter_count():
    model_module = pytest.importorskip("taming.modules.diffusionmodules.model")
    discriminator_module = pytest.importorskip("taming.modules.discriminator.model")
    # taming's configs/imagenet_vqgan.yaml (f = 16, 1024 codes)
    ddconfig = dict(double_z=False, z_channels=256, resolution=256, in_channels=3, out_ch=3, ch=128,
                    ch_mult=[1, 1, 2, 2, 4], num_res_blocks=2, attn_resolutions=[16], dropout=0.0)
    with torch.device("meta"):
        mine = create_model("vqgan_f16_1024")
        encoder, decoder = model_module.Encoder(**ddconfig), model_module.Decoder(**ddconfig)
        disc = discriminator_module.NLayerDiscriminator(input_nc=3, ndf=64, n_layers=3)
    assert count(mine.encoder) == count(encoder)
    assert count(mine.decoder) == count(decoder)
    assert count(mine.discriminator) == count(disc)
    assert mine.quantize.embedding.weight.shape == (1024, 256) and mine.downsample_factor == 16
    codes_and_convs = 1024 * 256 + 2 * (256 * 256 + 256)
    assert count(mine) == count(encoder) + count(decoder) + count(disc) + codes_and_convs


def test_interface_shapes():
    torch.manual_seed(0)
    model = create_model("vqgan_small").eval()
    x = torch.rand(3, 1, 32, 32) * 2 - 1
    with torch.no_grad():
        z = model.encode(x)
        out = model(x)
    assert z.shape == (3, 32, 8, 8)
    assert out.reconstruction.shape == x.shape and out.indices.shape == (3, 8, 8)
    assert out.quantizer_loss.ndim == 0 and 0 < out.usage <= 1 and 1 <= out.perplexity <= 256
    with torch.no_grad():
        assert torch.allclose(model.decode_indices(out.indices), out.reconstruction, atol=1e-5)
        assert torch.allclose(model.decode(model.quantize.lookup(out.indices)), out.reconstruction, atol=1e-5)
    assert model.discriminator(x).shape[:2] == (3, 1)
    assert model.last_layer is model.decoder.conv_out.weight
    names = {id(p) for p in model.autoencoder_parameters()}
    assert not any(id(p) in names for p in model.discriminator.parameters())
    assert len(names) + len(list(model.discriminator.parameters())) == len(list(model.parameters()))


def test_wrong_inputs_say_what_was_expected():
    model = create_model("vqgan_small")
    with pytest.raises(ValueError, match="multiples of 4"):
        model.encode(torch.zeros(1, 1, 30, 32))
    with pytest.raises(ValueError, match=r"\(B, 1, H, W\)"):
        model.encode(torch.zeros(1, 3, 32, 32))
    with pytest.raises(ValueError, match="num_groups"):
        VQGANConfig(ch=24, num_groups=32)
    assert get_config("vqgan_small", num_codes=64).num_codes == 64
