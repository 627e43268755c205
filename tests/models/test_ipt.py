"""IPT: shapes at each step, the token layout, the paper's parameter count, and forward_chop against the direct
forward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitlab.models import create_model
from vitlab.models.ipt import IPT, IPTConfig


def tiny(**overrides) -> IPT:
    torch.manual_seed(0)
    config = IPTConfig(**{"degradations": ("sr2", "sr3", "sr4", "denoise30"), "channels": 4, "patch_size": 12,
                          "num_heads": 4, "num_layers": 1, **overrides})
    return config.build().eval()


def test_heads_body_and_tails_have_the_papers_shapes_at_each_step():
    model = tiny()
    x = torch.rand(2, 3, 12, 12)
    for t, (name, scale) in enumerate(zip(model.degradations, (2, 3, 4, 1))):
        features = model.head[t](model.sub_mean(x * 255))
        assert features.shape == (2, 4, 12, 12)
        assert model.body(features, t).shape == (2, 4, 12, 12)
        assert model.tail[t](features).shape == (2, 3, 12 * scale, 12 * scale)
        assert model(x, name).shape == (2, 3, 12 * scale, 12 * scale)
    assert model.body.num_tokens == 16 and model.body.dim == 36  # (12 / 3)² tokens of 4 · 3 · 3


def test_tokens_are_3x3_patches_channel_major_and_fold_undoes_unfold():
    x = torch.randn(2, 5, 12, 12)
    tokens = F.unfold(x, 3, stride=3).transpose(1, 2)  # what the body does: (B, N, C·9)
    by_hand = x.view(2, 5, 4, 3, 4, 3).permute(0, 2, 4, 1, 3, 5).reshape(2, 16, 45)  # row-major grid, c·9 + ky·3 + kx
    assert torch.equal(tokens, by_hand)
    assert torch.equal(F.fold(tokens.transpose(1, 2), (12, 12), 3, stride=3), x)


def test_attention_has_no_biases_and_the_mean_shift_is_not_trained():
    model = tiny()
    block = model.body.encoder[0]
    assert block.attn.qkv.bias is None and block.attn.proj.bias is None
    assert model.body.decoder[0].cross_attn.proj.bias is None
    names = {name for name, _ in model.named_parameters()}
    assert not any(name.startswith(("sub_mean", "add_mean")) for name in names)
    x = torch.rand(1, 3, 5, 5) * 255
    torch.testing.assert_close(model.add_mean(model.sub_mean(x)), x)


def test_the_single_task_x2_model_has_the_papers_115_5_million_parameters():
    config = IPTConfig(degradations=("sr2",))
    with torch.device("meta"):
        model = config.build()
    count = sum(p.numel() for p in model.parameters())
    assert round(count / 1e6, 1) == 115.5  # IPT's size as published (e.g. SwinIR, Liang et al. 2021, Table 3)


def test_forward_chop_equals_the_direct_forward_on_one_tile():
    model = tiny(patch_size=48, channels=2, num_heads=2)
    x = torch.rand(2, 3, 48, 48)
    with torch.no_grad():
        for task in ("sr2", "denoise30"):
            torch.testing.assert_close(model.forward_chop(x, task), model(x, task))


class PointwiseIPT(IPT):
    """An IPT whose forward is a pointwise function (each output pixel from its own input pixel), so that tiles must
    reassemble the whole-image answer exactly."""

    def forward(self, x, task=0):
        scale = self.scale_of(task)
        y = torch.sigmoid(3 * x - 1) + 0.1 * x
        return y.repeat_interleave(scale, -2).repeat_interleave(scale, -1)


@pytest.mark.parametrize("size", [(48, 48), (50, 97), (131, 61), (30, 77), (7, 9)])
@pytest.mark.parametrize("task", ["sr3", "denoise30"])
def test_forward_chop_of_a_pointwise_model_equals_it_at_any_size(size, task):
    model = PointwiseIPT(("sr3", "denoise30"), channels=2, num_heads=2, num_layers=1)
    x = torch.rand(2, 3, *size)
    torch.testing.assert_close(model.forward_chop(x, task, overlap=10, batch_size=3), model(x, task))


def test_wrong_sizes_and_tasks_say_what_to_do():
    model = tiny()
    with pytest.raises(ValueError, match="forward_chop"):
        model(torch.rand(1, 3, 24, 24))
    with pytest.raises(ValueError, match="restores sr2, sr3, sr4, denoise30"):
        model(torch.rand(1, 3, 12, 12), "derain")
    with pytest.raises(ValueError, match="unknown degradation"):
        IPTConfig(degradations=("deblur",))


def test_registered_presets_build():
    model = create_model("ipt_small")
    assert model.degradations == ("sr2", "sr3", "sr4", "derain", "denoise30", "denoise50")
    assert create_model("ipt_small", degradations=("sr2",)).scales == (2,)


def test_a_task_trains_its_head_tail_and_query_and_the_shared_body_only():
    model = tiny().train()
    model(torch.rand(2, 3, 12, 12), "sr3").square().mean().backward()
    reached = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    expected = {name for name, _ in model.named_parameters()
                if not name.startswith(("head.", "tail.")) or name.startswith(("head.1.", "tail.1."))}
    assert reached == expected  # every shared weight, task 1's head and tail, nothing of the other tasks'
    assert model.body.query_embed.grad[[0, 2, 3]].abs().sum() == 0 and model.body.query_embed.grad[1].abs().sum() > 0
