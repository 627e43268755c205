import math

import pytest
import torch

from vitlab.layers.attention import MultiHeadAttention, explicit_attention


def make_pair(dim=32, heads=4, qkv_bias=True, seed=0):
    torch.manual_seed(seed)
    fused = MultiHeadAttention(dim, heads, qkv_bias=qkv_bias, fused=True).eval()
    explicit = MultiHeadAttention(dim, heads, qkv_bias=qkv_bias, fused=False).eval()
    explicit.load_state_dict(fused.state_dict())
    return fused, explicit


def masks(B, heads, N, M):
    g = torch.Generator().manual_seed(1)
    bool_mask = torch.rand(B, 1, N, M, generator=g) > 0.3
    bool_mask[..., 0] = True  # every query keeps at least one key, so no row is all -inf
    additive = torch.randn(B, heads, N, M, generator=g)
    additive = additive.masked_fill(~bool_mask, float("-inf"))
    causal = torch.ones(N, M, dtype=torch.bool).tril()
    return {"none": None, "bool": bool_mask, "additive": additive, "causal": causal}


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive", "causal"])
def test_fused_equals_explicit_self_attention(mask_kind):
    fused, explicit = make_pair()
    x = torch.randn(3, 7, 32)
    mask = masks(3, 4, 7, 7)[mask_kind]
    torch.testing.assert_close(fused(x, attn_mask=mask), explicit(x, attn_mask=mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_fused_equals_explicit_cross_attention(mask_kind):
    fused, explicit = make_pair(qkv_bias=True)
    x, context = torch.randn(2, 5, 32), torch.randn(2, 9, 32)
    mask = masks(2, 4, 5, 9)[mask_kind]
    out = fused(x, context=context, attn_mask=mask)
    assert out.shape == (2, 5, 32)
    torch.testing.assert_close(out, explicit(x, context=context, attn_mask=mask), atol=1e-5, rtol=1e-5)


def test_cross_attention_uses_the_qkv_slices():
    """Queries from x through W_q, keys and values from the context through W_k and W_v."""
    attn = MultiHeadAttention(8, 2, qkv_bias=True).eval()
    x, context = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    W, b = attn.qkv.weight, attn.qkv.bias
    q, k, v = x @ W[:8].T + b[:8], context @ W[8:16].T + b[8:16], context @ W[16:].T + b[16:]
    heads = []
    for h in range(2):
        s = slice(4 * h, 4 * h + 4)
        p = torch.softmax(q[0, :, s] @ k[0, :, s].T / 2.0, dim=-1)  # √d_k = √4
        heads.append(p @ v[0, :, s])
    expected = torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias
    torch.testing.assert_close(attn(x, context=context)[0], expected, atol=1e-6, rtol=1e-5)


def test_tiny_case_equals_formula_by_hand():
    """2 tokens, width 2, 1 head, hand-picked weights; the expected numbers are worked out with math.exp."""
    attn = MultiHeadAttention(dim=2, num_heads=1, qkv_bias=False, fused=False)
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.tensor([
            [1.0, 0.0], [0.0, 2.0],   # W_q
            [1.0, 1.0], [0.0, 1.0],   # W_k
            [0.0, 1.0], [1.0, 0.0],   # W_v (swaps the two features)
        ]))
        attn.proj.weight.copy_(torch.eye(2))
        attn.proj.bias.zero_()
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    # q1 = (1, 0), q2 = (0, 2); k1 = (1, 0), k2 = (1, 1); v1 = (0, 1), v2 = (1, 0); √d_k = √2
    s = math.sqrt(2)
    scores = [[1 / s, 1 / s], [0 / s, 2 / s]]
    probs = [[math.exp(a) / (math.exp(row[0]) + math.exp(row[1])) for a in row] for row in scores]
    v = [[0.0, 1.0], [1.0, 0.0]]
    expected = [[p[0] * v[0][j] + p[1] * v[1][j] for j in range(2)] for p in probs]
    out, attn_probs = attn(x, return_attn=True)
    torch.testing.assert_close(attn_probs[0, 0], torch.tensor(probs), atol=1e-6, rtol=0)
    torch.testing.assert_close(out[0], torch.tensor(expected), atol=1e-6, rtol=0)
    assert abs(probs[0][0] - 0.5) < 1e-12 and abs(expected[0][0] - 0.5) < 1e-12  # equal keys, equal weights
    # the fused path gives the same output
    attn.fused = True
    torch.testing.assert_close(attn(x)[0], torch.tensor(expected), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "causal"])
def test_probabilities_are_distributions(mask_kind):
    _, explicit = make_pair()
    x = torch.randn(2, 6, 32)
    mask = masks(2, 4, 6, 6)[mask_kind]
    _, probs = explicit(x, attn_mask=mask, return_attn=True)
    assert probs.shape == (2, 4, 6, 6)
    assert (probs >= 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 6))
    if mask is not None:  # blocked keys get exactly zero weight
        assert (probs.masked_select(~mask.expand_as(probs)) == 0).all()


@pytest.mark.parametrize("d_k", [64, 256])
def test_sqrt_dk_scaling_keeps_score_variance_near_one(d_k):
    """For unit-variance q and k, q·k has variance d_k; dividing by √d_k brings it back to 1.

    The scores are read back from the implementation: log-probabilities differ from the scores only by a
    per-row constant, so their variance within a row is the scores' variance.
    """
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 512, d_k, generator=g)
    k = torch.randn(1, 1, 512, d_k, generator=g)
    v = torch.zeros(1, 1, 512, d_k)
    _, probs = explicit_attention(q, k, v)
    scaled_var = probs.double().log().var(dim=-1).mean().item()
    assert 0.85 < scaled_var < 1.15
    unscaled_var = (q @ k.transpose(-2, -1)).var(dim=-1).mean().item()
    assert 0.85 * d_k < unscaled_var < 1.15 * d_k  # without the scaling the variance grows with d_k


def test_dim_not_divisible_by_heads_is_a_clear_error():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(10, 3)


def test_attention_dropout_only_in_training():
    attn = MultiHeadAttention(16, 2, attn_drop=0.5, fused=False)
    x = torch.randn(2, 5, 16)
    attn.eval()
    torch.testing.assert_close(attn(x), attn(x))
    attn.train()
    torch.manual_seed(0)
    a = attn(x)
    torch.manual_seed(1)
    assert not torch.allclose(a, attn(x))
