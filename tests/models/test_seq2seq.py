"""The encoder–decoder Transformer against torch.nn.Transformer, the paper's formulas and brute-force search."""

import itertools
import math

import pytest
import torch
from torch import nn

from vitlab.layers.attention import MultiHeadAttention
from vitlab.models.decoding import beam_search, greedy_decode, length_penalty
from vitlab.models.seq2seq import Seq2SeqConfig, causal_mask, padding_mask

PAD, BOS, EOS = 0, 1, 2


def small(**kw):
    base = dict(vocab_size=20, dim=32, depth=2, num_heads=4, mlp_ratio=2.0, dropout=0.0, max_len=32)
    base.update(kw)
    torch.manual_seed(0)
    return Seq2SeqConfig(**base).build().eval()


def paper_encoding(num_positions, dim):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), by hand (§3.5)."""
    pe = torch.zeros(num_positions, dim)
    for pos in range(num_positions):
        for i in range(dim // 2):
            angle = pos / 10000 ** (2 * i / dim)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


def copy_attention(ours, theirs):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.proj.weight)
        theirs.out_proj.bias.copy_(ours.proj.bias)


def torch_transformer_like(model, pre_norm):
    """An nn.Transformer of the same sizes holding the model's weights (dropout off)."""
    c = model.config
    ref = nn.Transformer(c.dim, c.num_heads, c.depth, c.depth, int(c.dim * c.mlp_ratio), dropout=0.0,
                         batch_first=True, norm_first=pre_norm)
    for ours, theirs in zip(model.encoder, ref.encoder.layers):
        copy_attention(ours.attn, theirs.self_attn)
        theirs.linear1.load_state_dict(ours.mlp.fc1.state_dict())
        theirs.linear2.load_state_dict(ours.mlp.fc2.state_dict())
        theirs.norm1.load_state_dict(ours.norm1.state_dict())
        theirs.norm2.load_state_dict(ours.norm2.state_dict())
    for ours, theirs in zip(model.decoder, ref.decoder.layers):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_attention(ours.cross_attn, theirs.multihead_attn)
        theirs.linear1.load_state_dict(ours.mlp.fc1.state_dict())
        theirs.linear2.load_state_dict(ours.mlp.fc2.state_dict())
        for i in (1, 2, 3):
            getattr(theirs, f"norm{i}").load_state_dict(getattr(ours, f"norm{i}").state_dict())
    if pre_norm:
        ref.encoder.norm.load_state_dict(model.encoder_norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder_norm.state_dict())
    else:  # the paper's post-norm stack has no extra final LayerNorm; nn.Transformer always adds one
        ref.encoder.norm = None
        ref.decoder.norm = None
    return ref.eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_matches_torch_transformer_with_padding_and_causal_masks(norm):
    model = small(norm=norm)
    ref = torch_transformer_like(model, pre_norm=norm == "pre")
    src = torch.randint(3, 20, (3, 9))
    src[1, 6:] = PAD  # the second source is 6 tokens long, the third 4
    src[2, 4:] = PAD
    tgt = torch.randint(3, 20, (3, 7))
    tgt[:, 0] = BOS
    tgt[0, 5:] = PAD

    # inputs by hand: E[token] · √d_model + PE(pos), with PE from the paper's formula
    E, pe = model.embed.weight.detach(), paper_encoding(32, 32)
    src_x = E[src] * math.sqrt(32) + pe[:9]
    tgt_x = E[tgt] * math.sqrt(32) + pe[:7]
    # torch's boolean masks mean "blocked" where vitlab's mean "may attend"; run with gradients on, so that
    # torch takes its plain (not nested-tensor) path
    future = ~torch.ones(7, 7, dtype=torch.bool).tril()
    h = ref(src_x, tgt_x, tgt_mask=future, src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD)
    expected = h.detach() @ E.T  # the output projection is the embedding, transposed (tied, §3.4)
    with torch.no_grad():
        got = model(src, tgt)
    assert got.shape == (3, 7, 20)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_sincos_encoding_is_the_papers_formula():
    model = small(dim=48, max_len=50)
    torch.testing.assert_close(model.pos_embed, paper_encoding(50, 48), atol=1e-6, rtol=0)


def test_embedding_is_scaled_by_sqrt_d_model_and_learned_positions_train():
    model = small(pos_embed="learn", tie_embeddings=False)
    tokens = torch.tensor([[5, 6, 7]])
    expected = model.tgt_embed.weight[tokens] * math.sqrt(32) + model.pos_embed[2:5]
    torch.testing.assert_close(model.embed_tokens(tokens, model.tgt_embed, start=2), expected)
    model(torch.tensor([[4, 5]]), torch.tensor([[1, 6]])).sum().backward()
    for name in ("pos_embed", "src_embed.weight", "tgt_embed.weight", "head.weight"):
        assert model.get_parameter(name).grad.abs().sum() > 0, name


def capture_attention(model):
    """Record (module, args, kwargs) of every attention call, to replay it on the explicit path."""
    calls, handles = [], []
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            handles.append(module.register_forward_pre_hook(lambda m, args, kwargs: calls.append((m, args, kwargs)),
                                                            with_kwargs=True))
    return calls, handles


def test_masked_positions_get_zero_attention():
    model = small()
    src = torch.tensor([[5, 6, 7, 8, PAD, PAD], [5, 6, 7, 8, 9, 10]])
    tgt = torch.tensor([[BOS, 4, 5, PAD], [BOS, 4, 5, 6]])
    calls, handles = capture_attention(model)
    model(src, tgt)
    for handle in handles:  # replaying must not record again
        handle.remove()
    assert len(calls) == 3 * 2  # encoder self, decoder self, decoder cross, for each of 2 layers
    for module, args, kwargs in calls:
        with torch.no_grad():
            _, probs = module(*args, **{**kwargs, "return_attn": True})  # (B, heads, N, M)
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        n_queries, n_keys = probs.shape[-2:]
        if n_keys == src.shape[1]:  # keys are source tokens: the padding of the first source is never attended
            assert (probs[0, :, :, 4:] == 0).all() and (probs[0, :, :, :4] > 0).all()
            assert (probs[1] > 0).all()
        else:  # decoder self-attention: nothing above the diagonal, and not the target's padding
            future = ~torch.ones(n_queries, n_queries, dtype=torch.bool).tril()
            assert (probs[:, :, future] == 0).all()
            assert (probs[0, :, :, 3] == 0).all()
            assert (probs[1, :, ~future] > 0).all()


def test_padding_and_future_tokens_do_not_change_the_output():
    model = small()
    src = torch.tensor([[5, 6, 7]])
    tgt = torch.tensor([[BOS, 4, 5, 6]])
    with torch.no_grad():
        base = model(src, tgt)
        more_padding = model(torch.tensor([[5, 6, 7, PAD, PAD]]), tgt)
        other_future = model(src, torch.tensor([[BOS, 4, 9, 9]]))
    torch.testing.assert_close(more_padding, base, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(other_future[:, :2], base[:, :2], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(other_future[:, 2:], base[:, 2:])


def test_masks():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # two new tokens after two cached ones see positions 0..2 and 0..3
    assert causal_mask(2, start=2).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert padding_mask(torch.tensor([[4, 0]]), 0).shape == (1, 1, 1, 2)


def test_too_long_input_and_bad_config_explain_themselves():
    model = small(max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.full((1, 9), 4), torch.full((1, 2), 1))
    with pytest.raises(ValueError, match="norm must be"):
        Seq2SeqConfig(vocab_size=10, norm="middle")


# decoding ---------------------------------------------------------------------------------------------------


def decoding_model():
    """A float64 model whose random outputs make long, varied sequences (EOS is a rare choice)."""
    model = small(vocab_size=12).double()
    with torch.no_grad():
        model.embed.weight[EOS] *= 0.3  # smaller logit scale for EOS: most hypotheses run several steps
    return model


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_cached_decoding_equals_recomputing_the_prefix(search):
    model = decoding_model()
    src = torch.randint(3, 12, (4, 6))
    src[2, 3:] = PAD
    if search == "greedy":
        run = lambda use_cache: greedy_decode(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=10,  # noqa: E731
                                              use_cache=use_cache)
    else:
        run = lambda use_cache: beam_search(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=10,  # noqa: E731
                                            beam_size=3, alpha=0.6, use_cache=use_cache)
    cached, recomputed = run(True), run(False)
    assert torch.equal(cached.tokens, recomputed.tokens)
    torch.testing.assert_close(cached.scores, recomputed.scores, atol=1e-12, rtol=0)
    lengths = [(row == EOS).nonzero()[0].item() + 1 if (row == EOS).any() else len(row) for row in cached.tokens]
    assert max(lengths) >= 4, lengths  # the search really ran for several steps


def sequence_logprob(model, src, generated):
    """log p(generated | src) by teacher forcing, the whole prefix at once (independent of the decoders)."""
    tgt_in = torch.tensor([[BOS, *generated[:-1]]])
    logp = model(src, tgt_in).log_softmax(-1)[0]
    return sum(logp[t, token].item() for t, token in enumerate(generated))


def test_greedy_scores_are_the_sequence_log_probabilities():
    model = decoding_model()
    src = torch.tensor([[4, 5, 6, 7]])
    out = greedy_decode(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=6)
    generated = out.tokens[0].tolist()
    generated = generated[: generated.index(EOS) + 1] if EOS in generated else generated
    with torch.no_grad():
        assert out.scores[0].item() == pytest.approx(sequence_logprob(model, src, generated), abs=1e-9)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    # 5 tokens (pad, bos, eos, a, b), at most 3 generated: every hypothesis can be scored by brute force
    torch.manual_seed(1)
    model = Seq2SeqConfig(vocab_size=5, dim=16, depth=1, num_heads=2, dropout=0.0).build().double().eval()
    src = torch.tensor([[3, 4, 4]])
    hypotheses = [[EOS]]  # finished after 1, 2 or 3 tokens, or cut at 3 without <eos>
    for n in (1, 2):
        hypotheses += [[*seq, EOS] for seq in itertools.product([3, 4], repeat=n)]
    hypotheses += [list(seq) for seq in itertools.product([3, 4], repeat=3)]
    with torch.no_grad():
        scored = {tuple(h): sequence_logprob(model, src, h) / ((5 + len(h)) / 6) ** alpha for h in hypotheses}
    best = max(scored, key=scored.get)
    out = beam_search(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=3, beam_size=len(hypotheses),
                      alpha=alpha)
    got = out.tokens[0].tolist()
    got = got[: got.index(EOS) + 1] if EOS in got else got
    assert tuple(got) == best
    assert out.scores[0].item() == pytest.approx(scored[best], abs=1e-9)


def test_length_penalty_is_gnmts():
    assert length_penalty(torch.tensor(7.0), 0.6).item() == pytest.approx(((5 + 7) / 6) ** 0.6)
    assert length_penalty(torch.tensor(7.0), 0.0).item() == 1.0
