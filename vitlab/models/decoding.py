"""Generating a target sequence with an encoder–decoder: greedy search and beam search.

Both run the decoder one token at a time. With `use_cache=True` (the default) each decoder block keeps the keys
and values of the tokens already generated (`layers.blocks.KVCache`), so a step costs one token's work; with
`use_cache=False` every step recomputes the whole prefix. The two give the same tokens and scores
(tests/models/test_seq2seq.py holds them equal); the second is the reference for the first.

Glossary: B batch, K beams, R = B·K rows, t tokens generated so far, V vocabulary size, S source tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .seq2seq import Seq2SeqTransformer


@dataclass
class Decoded:
    tokens: torch.Tensor  # (B, T) generated ids after <bos>: the answer, <eos>, then <pad> up to the longest
    scores: torch.Tensor  # (B,) sum of the tokens' log-probabilities (beam search: divided by the length penalty)


class NextToken:
    """Log-probabilities of the next token for each row of a growing prefix, cached or recomputed."""

    def __init__(self, model: Seq2SeqTransformer, memory: torch.Tensor, memory_mask: torch.Tensor, bos_id: int,
                 use_cache: bool) -> None:
        self.model, self.memory, self.memory_mask = model, memory, memory_mask  # (R, S, D), (R, 1, 1, S)
        self.bos_id = bos_id
        self.caches = model.new_caches() if use_cache else None

    def __call__(self, prefix: torch.Tensor) -> torch.Tensor:
        """prefix (R, t) -> (R, V) log-probabilities of token t+1; <pad> and <bos> get -inf (never generated:
        a <pad> inside a prefix would be masked out of attention, and <bos> only ever starts one)."""
        if self.caches is not None:  # only the newest token is new to the caches
            h = self.model.decode(prefix[:, -1:], self.memory, self.memory_mask, self.caches)
        else:
            h = self.model.decode(prefix, self.memory, self.memory_mask)
        logp = self.model.logits(h[:, -1]).log_softmax(dim=-1)
        logp[:, [self.model.config.pad_id, self.bos_id]] = float("-inf")
        return logp

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) in that order (beam search continues each survivor from its parent)."""
        self.memory, self.memory_mask = self.memory[rows], self.memory_mask[rows]
        for cache in self.caches or []:
            cache.reorder(rows)


@torch.no_grad()
def greedy_decode(model: Seq2SeqTransformer, src: torch.Tensor, *, bos_id: int, eos_id: int,
                  max_new_tokens: int, use_cache: bool = True) -> Decoded:
    """src (B, S) -> the most probable token at each step, until <eos> (or max_new_tokens)."""
    B = src.shape[0]
    pad = model.config.pad_id
    memory, memory_mask = model.encode(src)
    next_token = NextToken(model, memory, memory_mask, bos_id, use_cache)
    prefix = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    scores = torch.zeros(B, dtype=memory.dtype, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_new_tokens):
        best_logp, token = next_token(prefix).max(dim=-1)  # (B,), (B,)
        token = token.masked_fill(done, pad)  # finished rows only pad
        scores += best_logp.masked_fill(done, 0.0)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        done |= token == eos_id
        if done.all():
            break
    return Decoded(prefix[:, 1:], scores)


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, eq. 14), the penalty of Vaswani et al. §6.1 (α = 0.6).
    Scores are divided by it, so α > 0 stops longer hypotheses losing merely for having more factors."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: Seq2SeqTransformer, src: torch.Tensor, *, bos_id: int, eos_id: int, max_new_tokens: int,
                beam_size: int = 4, alpha: float = 0.6, use_cache: bool = True) -> Decoded:
    """src (B, S) -> the best of `beam_size` hypotheses per input, ranked by log-probability / length penalty.

    A hypothesis that has produced <eos> stays in the beam unchanged (it extends only by <pad>, at no cost) and
    competes with the live ones on its normalised score; the search ends when all K are finished.
    """
    B, K = src.shape[0], beam_size
    V, pad = model.config.vocab_size, model.config.pad_id
    if K < 1:
        raise ValueError(f"beam_size must be at least 1, got {K}")
    memory, memory_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    # each input's memory once per beam: (B, ...) -> (B·K, ...), rows b·K … b·K+K-1 belong to input b
    memory, memory_mask = memory.repeat_interleave(K, 0), memory_mask.repeat_interleave(K, 0)  # (R, S, D), ...
    next_token = NextToken(model, memory, memory_mask, bos_id, use_cache)
    prefix = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)  # (R, 1)
    scores = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=src.device)
    scores[:, 0] = 0.0  # all beams start equal: expand only the first, or the K beams would be copies
    lengths = torch.zeros(B, K, dtype=memory.dtype, device=src.device)  # tokens generated, <eos> included
    finished = torch.zeros(B, K, dtype=torch.bool, device=src.device)
    pad_only = torch.full((V,), float("-inf"), dtype=memory.dtype, device=src.device)
    pad_only[pad] = 0.0  # what a finished hypothesis may add
    for _ in range(max_new_tokens):
        logp = next_token(prefix).view(B, K, V)
        logp = torch.where(finished[..., None], pad_only, logp)
        total = scores[..., None] + logp  # (B, K, V): log-probability of each one-token extension
        new_lengths = lengths + (~finished).to(lengths.dtype)  # (B, K)
        ranked = total / length_penalty(new_lengths, alpha)[..., None]
        _, flat = ranked.view(B, K * V).topk(K, dim=-1)  # (B, K) indices into the K·V extensions
        parent, token = flat // V, flat % V  # (B, K) each
        scores = total.view(B, K * V).gather(1, flat)
        lengths = new_lengths.gather(1, parent)
        finished = finished.gather(1, parent) | (token == eos_id)
        rows = (torch.arange(B, device=src.device)[:, None] * K + parent).view(-1)  # (R,) parent rows
        prefix = torch.cat([prefix[rows], token.view(-1, 1)], dim=1)
        next_token.reorder(rows)
        if finished.all():
            break
    final = scores / length_penalty(lengths, alpha)  # (B, K)
    best_score, best = final.max(dim=-1)  # (B,)
    chosen = torch.arange(B, device=src.device) * K + best
    return Decoded(prefix[chosen, 1:], best_score)
