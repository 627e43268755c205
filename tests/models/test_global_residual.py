"""The global residual of IPT and EDSR: an untrained model gives the baseline exactly (bicubic upsampling for
super-resolution, the input for denoising), tiled inference adds the whole image's baseline, training moves the
model from there, and the official structure (whose releases load unchanged) has none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitlab.layers.resample import bicubic_upsample
from vitlab.models import create_model
from vitlab.models.registry import config_from_dict, config_to_dict, get_config

TINY = {"ipt_small": {"channels": 4, "patch_size": 12, "num_heads": 2, "num_layers": 1},
        "edsr_baseline": {"channels": 8, "num_blocks": 2}}


def tiny(name: str, **overrides):
    torch.manual_seed(0)
    return create_model(name, degradations=("sr2", "sr3", "denoise30"), **TINY[name], **overrides).eval()


@pytest.mark.parametrize("name", TINY)
def test_an_untrained_model_gives_the_baseline(name):
    model = tiny(name)
    assert model.global_residual
    x = torch.rand(2, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(x, "sr2"), bicubic_upsample(x, 2))
        torch.testing.assert_close(model(x, "sr3"), bicubic_upsample(x, 3))
        torch.testing.assert_close(model(x, "denoise30"), x)
        big = torch.rand(1, 3, 40, 31)  # several tiles: the baseline is the whole image's, not the tiles'
        tile = {"tile": 16} if name == "edsr_baseline" else {}
        torch.testing.assert_close(model.forward_chop(big, "sr2", overlap=4, **tile), bicubic_upsample(big, 2))


@pytest.mark.parametrize("name", TINY)
def test_without_it_the_tails_are_not_zero_and_the_output_is_not_the_baseline(name):
    model = tiny(name, global_residual=False)
    x = torch.rand(2, 3, 12, 12)
    with torch.no_grad():
        assert (model(x, "sr2") - bicubic_upsample(x, 2)).abs().mean() > 1e-2
    assert all(tail[-1].weight.abs().sum() > 0 for tail in model.tail)


@pytest.mark.parametrize("name", TINY)
def test_training_moves_it_from_the_baseline_towards_the_target(name):
    model = tiny(name).train()
    torch.manual_seed(1)
    x, target = torch.rand(4, 3, 12, 12), torch.rand(4, 3, 24, 24)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    losses = []
    for _ in range(5):
        loss = F.l1_loss(model(x, "sr2"), target)
        optimizer.zero_grad()
        loss.backward()
        if not losses:  # the zeroed last convolution is what the first step reaches
            assert model.tail[0][-1].weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(F.l1_loss(bicubic_upsample(x, 2), target).item(), abs=1e-6)
    assert losses[-1] < losses[0]
    assert model.tail[0][-1].weight.abs().sum() > 0


def test_the_official_structure_has_none_and_older_saved_configs_read_as_without():
    assert not get_config("ipt_base").global_residual
    assert get_config("ipt_small").global_residual and get_config("edsr_baseline").global_residual
    for name in ("ipt_small", "edsr_baseline"):
        saved = config_to_dict(get_config(name))
        del saved["global_residual"]  # a run saved before the option existed
        assert not config_from_dict(saved).global_residual
