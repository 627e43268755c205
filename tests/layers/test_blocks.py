from functools import partial

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from vitlab.layers.blocks import EncoderBlock, PostNormEncoderBlock
from vitlab.layers.drop import DropPath
from vitlab.layers.mlp import IN_PLACE_MIN_ELEMENTS


def test_encoder_block_is_the_pre_norm_formula():
    torch.manual_seed(0)
    block = EncoderBlock(32, 4, init_values=0.5).eval()
    x = torch.randn(2, 6, 32)
    # x + γ1·MSA(LN(x)), then + γ2·MLP(LN(·)), written out with the block's parameters
    attn = block.attn
    h = nn.functional.layer_norm(x, (32,), block.norm1.weight, block.norm1.bias, eps=1e-6)
    q, k, v = (h @ attn.qkv.weight.T + attn.qkv.bias).reshape(2, 6, 3, 4, 8).permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
    a = a.transpose(1, 2).reshape(2, 6, 32) @ attn.proj.weight.T + attn.proj.bias
    x1 = x + 0.5 * a
    h = nn.functional.layer_norm(x1, (32,), block.norm2.weight, block.norm2.bias, eps=1e-6)
    m = nn.functional.gelu(h @ block.mlp.fc1.weight.T + block.mlp.fc1.bias) @ block.mlp.fc2.weight.T
    expected = x1 + 0.5 * (m + block.mlp.fc2.bias)
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)
    assert block.mlp.fc1.out_features == 4 * 32


def test_encoder_block_matches_timm_block():
    timm_vit = pytest.importorskip("timm.models.vision_transformer")
    torch.manual_seed(0)
    ours = EncoderBlock(48, 3, qkv_bias=True, init_values=1e-2).eval()
    theirs = timm_vit.Block(48, 3, qkv_bias=True, init_values=1e-2, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    theirs.load_state_dict(ours.state_dict())  # same names, same layout
    x = torch.randn(2, 10, 48)
    torch.testing.assert_close(ours(x), theirs.eval()(x), atol=1e-5, rtol=1e-5)


def test_post_norm_block_matches_torch_transformer_encoder_layer():
    torch.manual_seed(0)
    ours = PostNormEncoderBlock(32, 4, mlp_ratio=2.0).eval()
    ref = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
        ref.self_attn.out_proj.weight.copy_(ours.attn.proj.weight)
        ref.self_attn.out_proj.bias.copy_(ours.attn.proj.bias)
        ref.linear1.load_state_dict(ours.mlp.fc1.state_dict())
        ref.linear2.load_state_dict(ours.mlp.fc2.state_dict())
        ref.norm1.load_state_dict(ours.norm1.state_dict())
        ref.norm2.load_state_dict(ours.norm2.state_dict())
    x = torch.randn(2, 7, 32)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    # torch's boolean masks mean "blocked" where ours mean "allowed"
    torch.testing.assert_close(ours(x, attn_mask=causal), ref(x, src_mask=~causal), atol=1e-5, rtol=1e-5)


def test_drop_path_drops_whole_samples_and_keeps_expectation():
    drop = DropPath(0.25)
    x = torch.ones(4000, 3, 2)
    drop.eval()
    assert drop(x) is x
    drop.train()
    torch.manual_seed(0)
    y = drop(x)
    per_sample = y.reshape(4000, -1)
    assert ((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1)).all()  # all or nothing per sample
    assert abs((per_sample[:, 0] == 0).float().mean().item() - 0.25) < 0.03
    assert abs(y.mean().item() - 1.0) < 0.05
    with pytest.raises(ValueError):
        DropPath(1.0)


def copy_attention(ours, theirs):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.proj.weight)
        theirs.out_proj.bias.copy_(ours.proj.bias)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_block_matches_torch_transformer_decoder_layer(pre_norm):
    from vitlab.layers.blocks import DecoderBlock, PreNormDecoderBlock

    torch.manual_seed(0)
    ours = (PreNormDecoderBlock if pre_norm else DecoderBlock)(32, 4, mlp_ratio=2.0).eval()
    ref = nn.TransformerDecoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                     norm_first=pre_norm).eval()
    copy_attention(ours.self_attn, ref.self_attn)
    copy_attention(ours.cross_attn, ref.multihead_attn)
    ref.linear1.load_state_dict(ours.mlp.fc1.state_dict())
    ref.linear2.load_state_dict(ours.mlp.fc2.state_dict())
    for i in (1, 2, 3):
        getattr(ref, f"norm{i}").load_state_dict(getattr(ours, f"norm{i}").state_dict())
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    memory_padding = torch.zeros(2, 7, dtype=torch.bool)
    memory_padding[1, 5:] = True  # the second sequence's last two encoder positions are padding
    expected = ref(x, memory, tgt_mask=~causal, memory_key_padding_mask=memory_padding)
    # ours: True = may attend, broadcast to (B, heads, N, M)
    got = ours(x, memory, self_mask=causal, memory_mask=~memory_padding[:, None, None, :])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


class _OpLog(TorchDispatchMode):
    """Records the aten ops a forward pass runs."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("init_values", [None, 0.5])
def test_inference_writes_in_place_only_into_its_own_fresh_outputs(init_values):
    """Under inference_mode the block writes GELU and the residual sums into buffers it just made (for tensors of
    at least IN_PLACE_MIN_ELEMENTS): the result is bit-identical to the out-of-place formula, its input is left as
    it was, and a hook that keeps an output sees the value it was given."""
    torch.manual_seed(0)
    block = EncoderBlock(64, 4, init_values=init_values).eval()
    x = torch.randn(8, 512, 64)  # (B, N, D): 2^18 elements, as large as IN_PLACE_MIN_ELEMENTS
    assert x.numel() >= IN_PLACE_MIN_ELEMENTS
    x_before = x.clone()

    def out_of_place(x):  # the same sub-modules, every step into a new tensor
        scale1 = block.ls1 if init_values else (lambda t: t)
        scale2 = block.ls2 if init_values else (lambda t: t)
        x = x + scale1(block.attn(block.norm1(x)))
        h = nn.functional.gelu(block.mlp.fc1(block.norm2(x)))
        return x + scale2(block.mlp.fc2(h))

    with torch.no_grad():
        expected = out_of_place(x)
    log = _OpLog()
    with torch.inference_mode(), log:
        got = block(x)
    assert {"gelu_", "add_"} <= log.ops  # it did write in place
    assert torch.equal(got, expected)
    assert torch.equal(x, x_before)
    with torch.inference_mode(), _OpLog() as small:
        block(x[:1, :8])  # a small input: new tensors are cheap, nothing is overwritten
    assert "gelu_" not in small.ops and "add_" not in small.ops

    with torch.inference_mode():  # what the hooks below must be given, computed before they exist
        attn_out = block.attn(block.norm1(x))
        x1 = x + (block.ls1(attn_out) if init_values else attn_out)
        fc1_out = block.mlp.fc1(block.norm2(x1))
    kept = {}
    block.attn.register_forward_hook(lambda m, i, o: kept.__setitem__("attn", o))
    block.mlp.fc1.register_forward_hook(lambda m, i, o: kept.__setitem__("fc1", o))
    with torch.inference_mode():
        got_hooked = block(x)
    assert torch.equal(got_hooked, expected)
    assert torch.equal(kept["attn"], attn_out)  # not attn_out + x
    assert torch.equal(kept["fc1"], fc1_out)  # not GELU(fc1_out)


def test_training_keeps_every_tensor_autograd_saved():
    """With gradients on nothing is overwritten: gradients equal those of the out-of-place formula."""
    torch.manual_seed(0)
    block = EncoderBlock(16, 2, init_values=0.1).train()
    x = torch.randn(2, 5, 16, requires_grad=True)
    block(x).square().sum().backward()
    got = [p.grad.clone() for p in block.parameters()] + [x.grad.clone()]
    block.zero_grad()
    x.grad = None
    x1 = x + block.ls1(block.attn(block.norm1(x)))
    (x1 + block.ls2(block.mlp.fc2(nn.functional.gelu(block.mlp.fc1(block.norm2(x1)))))).square().sum().backward()
    expected = [p.grad for p in block.parameters()] + [x.grad]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-6)
