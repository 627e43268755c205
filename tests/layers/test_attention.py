import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

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
    out = fused(x, context, attn_mask=mask)  # keys and values from the context
    assert out.shape == (2, 5, 32)
    torch.testing.assert_close(out, explicit(x, context, attn_mask=mask), atol=1e-5, rtol=1e-5)


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
    torch.testing.assert_close(attn(x, context)[0], expected, atol=1e-6, rtol=1e-5)


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


# ---- against torch.nn.MultiheadAttention with the same weights ------------------------------------------------

def torch_twin(ours):
    """torch.nn.MultiheadAttention (batch_first) holding our weights: qkv -> in_proj, proj -> out_proj."""
    theirs = nn.MultiheadAttention(ours.dim, ours.num_heads, bias=True, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.proj.weight)
        theirs.out_proj.bias.copy_(ours.proj.bias)
    return theirs


def inputs(kind, B=3, N=5, M=7, D=32, seed=2):
    """query, key, value as `kind` says: "self" (key = value = None), "kv" (one tensor for both), "qkv" (three)."""
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(B, N, D, generator=g)
    if kind == "self":
        return query, None, None
    key = torch.randn(B, M, D, generator=g)
    return query, key, (key if kind == "kv" else torch.randn(B, M, D, generator=g))


def torch_masks(mask_kind, padded, B, heads, N, M):
    """Ours (True = may attend, (B, heads, N, M); padding (B, M), True = padded) and torch's equivalents
    (attn_mask True = blocked, (B·heads, N, M)). Key 0 is never masked nor padded, so no row is empty (torch would
    give NaN)."""
    g = torch.Generator().manual_seed(3)
    allowed = torch.rand(B, heads, N, M, generator=g) > 0.4
    allowed[..., 0] = True
    if mask_kind == "none":
        ours = theirs = None
    elif mask_kind == "bool":
        ours, theirs = allowed, ~allowed.reshape(B * heads, N, M)
    else:  # additive: random finite biases, -inf where blocked
        ours = torch.randn(B, heads, N, M, generator=g).masked_fill(~allowed, float("-inf"))
        theirs = ours.reshape(B * heads, N, M)
    padding = torch_padding = None
    if padded:
        padding = torch.zeros(B, M, dtype=torch.bool)
        padding[1, M - 3:] = True  # the second sample's last three keys are padding
        padding[2, 1] = True
        # torch wants both masks of one type: with a float attn_mask, the padding as -inf to add
        torch_padding = padding if mask_kind != "float" else torch.zeros(B, M).masked_fill(padding, float("-inf"))
    return ours, theirs, padding, torch_padding


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kind", ["self", "kv", "qkv"])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("padded", [False, True])
def test_equals_torch_multihead_attention(fused, kind, mask_kind, padded):
    torch.manual_seed(0)
    ours = MultiHeadAttention(32, 4, qkv_bias=True, fused=fused).eval()
    theirs = torch_twin(ours)
    query, key, value = inputs(kind)
    B, N, _ = query.shape
    M = N if key is None else key.shape[1]
    mask, torch_mask, padding, torch_padding = torch_masks(mask_kind, padded, B, 4, N, M)
    got = ours(query, key, value, attn_mask=mask, key_padding_mask=padding)
    expected, expected_probs = theirs(query, query if key is None else key, query if value is None else value,
                                      attn_mask=torch_mask, key_padding_mask=torch_padding,
                                      average_attn_weights=False)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    if not fused:  # the explicit path hands back the probabilities torch computes
        _, probs = ours(query, key, value, attn_mask=mask, key_padding_mask=padding, return_attn=True)
        torch.testing.assert_close(probs, expected_probs, atol=1e-6, rtol=1e-5)
        if padding is not None:
            assert (probs.masked_select(padding[:, None, None, :].expand_as(probs)) == 0).all()


@pytest.mark.parametrize("fused", [True, False])
def test_gradients_equal_torch_for_three_sources(fused):
    """Queries, keys and values from three tensors of two lengths: every input and every weight slice gets
    torch's gradient."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(32, 4, qkv_bias=True, fused=fused).train()
    theirs = torch_twin(ours).train()
    q1, k1, v1 = (t.requires_grad_() for t in inputs("qkv", N=4, M=6))
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q1, k1, v1))
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[0, 4:] = True
    ours(q1, k1, v1, key_padding_mask=padding).square().sum().backward()
    theirs(q2, k2, v2, key_padding_mask=padding, need_weights=False)[0].square().sum().backward()
    for got, expected in ((q1, q2), (k1, k2), (v1, v2)):
        assert got.grad.abs().sum() > 0
        torch.testing.assert_close(got.grad, expected.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.qkv.weight.grad, theirs.in_proj_weight.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.qkv.bias.grad, theirs.in_proj_bias.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.proj.weight.grad, theirs.out_proj.weight.grad, atol=1e-5, rtol=1e-4)
    assert (k1.grad[0, 4:] == 0).all() and (v1.grad[0, 4:] == 0).all()  # padded keys and values learn nothing


def test_separate_values_are_not_the_keys():
    """Values from a third tensor really replace the keys' tokens as values (DETR: keys carry positions)."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, qkv_bias=True).eval()
    query, key, value = inputs("qkv", D=16)
    assert not torch.allclose(attn(query, key, value), attn(query, key))
    torch.testing.assert_close(attn(query, key, key), attn(query, key))


class _MatmulCount(TorchDispatchMode):
    """Counts the matrix products (linear layers) a call runs."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in ("addmm", "mm"):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_projections_share_a_matmul_when_sources_are_the_same_tensor():
    """Self-attention: one matmul for q, k, v plus the output projection; keys = values: two plus one; q = k
    (DETR's x + pos) with other values: two plus one; three different tensors: three plus one."""
    attn = MultiHeadAttention(16, 2, qkv_bias=True).eval()
    x, y, z = torch.randn(2, 3, 16), torch.randn(2, 4, 16), torch.randn(2, 4, 16)
    for args, expected in (((x,), 2), ((x, x, x), 2), ((x, y), 3), ((x, y, y), 3), ((y, y, z), 3), ((x, y, z), 4)):
        with torch.no_grad(), _MatmulCount() as counter:
            attn(*args)
        assert counter.count == expected, (len(args), counter.count)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("how", ["padding", "bool", "float"])
def test_a_query_with_no_key_gets_zero_attention_and_no_nan(fused, how):
    """Sample 1 has every key padded (or every key masked for query 2): those rows' attention is zero, so their
    output is the output projection's bias; the other rows are unchanged, and gradients stay finite."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, qkv_bias=True, fused=fused).train()
    query, key, value = (t.requires_grad_() for t in inputs("qkv", B=2, N=3, M=5))
    padding, mask = torch.zeros(2, 5, dtype=torch.bool), None
    allowed = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    if how == "padding":
        padding[1] = True
        empty = (1, slice(None))  # (sample, queries) with nothing to attend to
    else:
        allowed[1, :, 2] = False
        mask = allowed if how == "bool" else torch.zeros(2, 1, 3, 5).masked_fill(~allowed, float("-inf"))
        padding[0, 3:] = True  # padding elsewhere combines with the mask
        empty = (1, 2)
    out = attn(query, key, value, attn_mask=mask, key_padding_mask=padding)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[empty], attn.proj.bias.expand_as(out[empty]))  # proj(0) = its bias
    # every other row is the ordinary attention: the same call with keys given back to the empty rows
    if how == "padding":
        reference = attn(query, key, value)  # sample 0 has no padding
    else:
        reopened = allowed.clone()
        reopened[1, :, 2] = True
        ref_mask = reopened if how == "bool" else torch.zeros(2, 1, 3, 5).masked_fill(~reopened, float("-inf"))
        reference = attn(query, key, value, attn_mask=ref_mask, key_padding_mask=padding)
    keep = torch.ones(2, 3, dtype=torch.bool)
    keep[empty] = False
    torch.testing.assert_close(out[keep], reference[keep], atol=1e-6, rtol=1e-5)
    out.square().sum().backward()
    for t in (query, key, value, attn.qkv.weight, attn.proj.weight):
        assert torch.isfinite(t.grad).all()
    if not fused:
        _, probs = attn(query, key, value, attn_mask=mask, key_padding_mask=padding, return_attn=True)
        assert (probs[empty[0], :, empty[1]] == 0).all()


def test_float_key_padding_mask_adds_like_a_bool_one_blocks():
    attn = MultiHeadAttention(16, 2, qkv_bias=True).eval()
    query, key, _ = inputs("kv", D=16)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[:, 5:] = True
    additive = torch.zeros(3, 7).masked_fill(padding, float("-inf"))
    torch.testing.assert_close(attn(query, key, key_padding_mask=additive), attn(query, key, key_padding_mask=padding))
    causal = torch.ones(5, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(attn(query, key, attn_mask=causal, key_padding_mask=additive),
                               attn(query, key, attn_mask=causal, key_padding_mask=padding))


def test_the_values_default_to_the_keys():
    attn = MultiHeadAttention(16, 2, qkv_bias=True).eval()
    query, key, _ = inputs("kv", D=16)
    torch.testing.assert_close(attn(query, key), attn(query, key, key))
    torch.testing.assert_close(attn(query), attn(query, query, query))  # self-attention: all three are the query


def test_wrong_inputs_are_clear_errors():
    attn = MultiHeadAttention(16, 2)
    query, key, value = inputs("qkv", D=16)
    with pytest.raises(ValueError, match="without key"):
        attn(query, value=value)
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        attn(query, key, key_padding_mask=torch.zeros(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="pair up"):
        attn(query, key, value[:, :4])
    with pytest.raises(ValueError, match="width 16"):
        attn(query, torch.randn(3, 7, 8))
