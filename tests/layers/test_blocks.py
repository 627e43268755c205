from functools import partial

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from vitlab.layers.blocks import (
    DecoderBlock,
    EncoderBlock,
    KVCache,
    PostNormEncoderBlock,
    PreNormDecoderBlock,
)
from vitlab.layers.drop import DropPath


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
    # key padding has torch's meaning (True = padded key) and equals src_key_padding_mask, alone and with a mask
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 4:] = True
    torch.testing.assert_close(ours(x, key_padding_mask=padding), ref(x, src_key_padding_mask=padding),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours(x, attn_mask=causal, key_padding_mask=padding),
                               ref(x, src_mask=~causal, src_key_padding_mask=padding), atol=1e-5, rtol=1e-5)


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


class OpLog(TorchDispatchMode):
    """Records the aten ops a forward pass runs."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def test_the_block_computes_every_result_into_a_new_tensor():
    """layers/ is the paper's form: even under inference_mode and on a tensor as large as the inference path writes
    over (runtime/fast.py), GELU and the residual sums make new tensors."""
    torch.manual_seed(0)
    block = EncoderBlock(64, 4, init_values=0.5).eval()
    x = torch.randn(8, 512, 64)
    with torch.inference_mode(), OpLog() as log:
        block(x)
    assert {"gelu", "add"} <= log.ops
    assert not {"gelu_", "add_", "relu_"} & log.ops


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


# ---- position embeddings: added to queries and keys, never to values --------------------------------------------

def twin(attn):
    """torch.nn.MultiheadAttention with the weights of one of our attentions."""
    theirs = nn.MultiheadAttention(attn.dim, attn.num_heads, batch_first=True).eval()
    copy_attention(attn, theirs)
    return theirs


def padded_keys(B, M):
    padding = torch.zeros(B, M, dtype=torch.bool)
    padding[1, M - 2:] = True  # the second sample's last two tokens are padding
    return padding


@pytest.mark.parametrize("post_norm", [False, True])
def test_encoder_block_adds_pos_to_queries_and_keys_not_values(post_norm):
    """DETR's encoder layer: attention(q = k = h + pos, v = h), h = LN(x) (pre-norm) or x (post-norm), by hand
    with torch.nn.MultiheadAttention and the block's norms and MLP."""
    torch.manual_seed(0)
    block = (PostNormEncoderBlock(32, 4, mlp_ratio=2.0) if post_norm else EncoderBlock(32, 4, mlp_ratio=2.0)).eval()
    mha = twin(block.attn)
    x, pos = torch.randn(2, 6, 32), torch.randn(2, 6, 32)
    padding = padded_keys(2, 6)
    if post_norm:
        x1 = block.norm1(x + mha(x + pos, x + pos, x, key_padding_mask=padding)[0])
        expected = block.norm2(x1 + block.mlp(x1))
    else:
        h = block.norm1(x)
        x1 = x + mha(h + pos, h + pos, h, key_padding_mask=padding)[0]
        expected = x1 + block.mlp(block.norm2(x1))
    got = block(x, key_padding_mask=padding, pos=pos)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the positions matter, and they are not in the values: adding them to values too gives something else
    assert not torch.allclose(got, block(x, key_padding_mask=padding), atol=1e-3)
    h = x if post_norm else block.norm1(x)
    with_pos_in_values = mha(h + pos, h + pos, h + pos, key_padding_mask=padding)[0]
    assert not torch.allclose(mha(h + pos, h + pos, h, key_padding_mask=padding)[0], with_pos_in_values, atol=1e-3)
    # a (1, N, D) table broadcasts over the batch
    torch.testing.assert_close(block(x, pos=pos[:1]), block(x, pos=pos[:1].expand(2, -1, -1)))


def test_forward_with_attn_takes_the_same_positions_and_padding():
    torch.manual_seed(0)
    block = EncoderBlock(32, 4).eval()
    x, pos, padding = torch.randn(2, 6, 32), torch.randn(1, 6, 32), padded_keys(2, 6)
    out, probs = block.forward_with_attn(x, key_padding_mask=padding, pos=pos)
    torch.testing.assert_close(out, block(x, key_padding_mask=padding, pos=pos), atol=1e-5, rtol=1e-5)
    h = block.norm1(x)
    _, expected = twin(block.attn)(h + pos, h + pos, h, key_padding_mask=padding, average_attn_weights=False)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=1e-5)


def decoder_by_hand(block, pre_norm, x, memory, causal, padding, pos, query_pos):
    """DETR's decoder layer (forward_post / forward_pre) with torch.nn.MultiheadAttention and the block's norms
    and MLP: self-attention q = k = t + query_pos, v = t; cross-attention q = t + query_pos, k = memory + pos,
    v = memory."""
    self_mha, cross_mha = twin(block.self_attn), twin(block.cross_attn)

    def self_attn(t):
        return self_mha(t + query_pos, t + query_pos, t, attn_mask=~causal)[0]

    def cross_attn(t):
        return cross_mha(t + query_pos, memory + pos, memory, key_padding_mask=padding)[0]

    if pre_norm:
        x = x + self_attn(block.norm1(x))
        x = x + cross_attn(block.norm2(x))
        return x + block.mlp(block.norm3(x))
    x = block.norm1(x + self_attn(x))
    x = block.norm2(x + cross_attn(x))
    return block.norm3(x + block.mlp(x))


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_block_adds_query_pos_and_memory_pos_as_detr(pre_norm):
    torch.manual_seed(0)
    block = (PreNormDecoderBlock if pre_norm else DecoderBlock)(32, 4, mlp_ratio=2.0).eval()
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    pos, query_pos = torch.randn(2, 7, 32), torch.randn(1, 5, 32)  # object queries: one table for the batch
    causal, padding = torch.ones(5, 5, dtype=torch.bool).tril(), padded_keys(2, 7)
    expected = decoder_by_hand(block, pre_norm, x, memory, causal, padding, pos, query_pos)
    got = block(x, memory, causal, None, None, memory_key_padding_mask=padding, pos=pos, query_pos=query_pos)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the padding mask equals the same padding written as a memory_mask, True = may attend
    torch.testing.assert_close(
        block(x, memory, causal, ~padding[:, None, None, :], pos=pos, query_pos=query_pos), got, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, block(x, memory, causal, memory_key_padding_mask=padding), atol=1e-3)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_cached_decoding_with_positions_equals_the_full_pass(pre_norm):
    """One token at a time through a KVCache (query_pos of the new token only; the memory's keys with pos cached
    on the first step) gives the outputs of the whole causal pass."""
    torch.manual_seed(0)
    block = (PreNormDecoderBlock if pre_norm else DecoderBlock)(32, 4, mlp_ratio=2.0).eval()
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    pos, query_pos, padding = torch.randn(2, 7, 32), torch.randn(2, 5, 32), padded_keys(2, 7)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        full = block(x, memory, causal, memory_key_padding_mask=padding, pos=pos, query_pos=query_pos)
        cache = KVCache()
        steps = [block(x[:, t:t + 1], memory, cache=cache, memory_key_padding_mask=padding, pos=pos,
                       query_pos=query_pos[:, t:t + 1]) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 5 and cache.cross_k.shape == (2, 4, 7, 8)


@pytest.mark.parametrize("cls", [EncoderBlock, PostNormEncoderBlock, DecoderBlock, PreNormDecoderBlock])
def test_every_block_takes_the_same_dropout_and_drop_path_options(cls):
    block = cls(32, 4, proj_drop=0.1, attn_drop=0.2, drop_path=0.3)
    attentions = [m for m in block.modules() if hasattr(m, "qkv")]
    assert attentions and all(a.attn_drop == 0.2 and a.proj_drop.p == 0.1 for a in attentions)
    assert block.mlp.drop1.p == 0.1 and block.mlp.drop2.p == 0.1
    drop_paths = [m for name, m in block.named_children() if name.startswith("drop_path")]
    assert len(drop_paths) == len(attentions) + 1 and all(isinstance(d, DropPath) and d.drop_prob == 0.3
                                                          for d in drop_paths)
    torch.manual_seed(0)
    x = torch.randn(4, 3, 32)
    args = (x,) if "Encoder" in cls.__name__ else (x, torch.randn(4, 2, 32))
    block.eval()
    torch.testing.assert_close(block(*args), block(*args))  # no randomness in evaluation
    block.train()
    assert not torch.allclose(block(*args), block(*args))


@pytest.mark.parametrize("cls", [PostNormEncoderBlock, DecoderBlock, PreNormDecoderBlock])
def test_dropout_is_the_old_name_of_proj_drop(cls):
    block = cls(32, 4, dropout=0.25)
    assert block.mlp.drop1.p == 0.25 and all(m.proj_drop.p == 0.25 for m in block.modules() if hasattr(m, "qkv"))
    with pytest.raises(TypeError, match="one option"):
        cls(32, 4, dropout=0.25, proj_drop=0.1)
