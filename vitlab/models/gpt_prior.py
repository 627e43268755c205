"""VQGAN stage 2 (Esser et al. 2021, §3.2): a decoder-only transformer that models an image's code indices, read
row by row, one after another, as a language model models words:

    p(s | c) = Π_i p(s_i | s_<i, c)                    s: the h·w code indices of a VQGAN (models/vqgan.py)

The sequence starts with a start token that carries the class c (one learned start token per class; a single one
for unconditional models), so the input [start_c, s_1, …, s_{L−1}] predicts [s_1, …, s_L]. The blocks are
vitlab's pre-norm `EncoderBlock` under a causal mask, GPT's block (Radford et al. 2018), learned positions, a final
LayerNorm and a linear head to the K codes.

Sampling draws one code at a time. With `use_cache=True` each block keeps the keys and values of the tokens so far
(the `KVCache` the seq2seq decoder uses, layers/blocks.py), so each step computes one token; with
`use_cache=False` every step recomputes the whole prefix. Both give the same codes.

Shapes: B batch, L = h·w codes, D = dim, K = num_codes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..layers.blocks import EncoderBlock, KVCache
from .family import Model, ModelFamily, Paper
from .registry import register_config, register_model


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """logits (B, K) with everything outside the top-k and the top-p nucleus set to -inf.

    top-k keeps the k largest; top-p (Holtzman et al. 2020) keeps the smallest set of the largest whose
    probabilities add up to at least p (the most likely code always stays)."""
    if top_k is not None and top_k < logits.shape[-1]:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a code when the ones before it already reach p
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class GPTPrior(Model):
    def __init__(self, config: GPTPriorConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.seq_len = c.grid[0] * c.grid[1]
        self.tok_embed = nn.Embedding(c.num_codes, c.dim)
        self.start_embed = nn.Embedding(c.num_classes, c.dim)  # one start token per class
        self.pos_embed = nn.Parameter(torch.zeros(1, self.seq_len, c.dim))
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(EncoderBlock(c.dim, c.num_heads, c.mlp_ratio, qkv_bias=True, proj_drop=c.dropout,
                                                 attn_drop=c.dropout, norm_layer=nn.LayerNorm)
                                    for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.num_codes, bias=False)
        self.apply(self._init_weights)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's start: N(0, 0.02) for every matrix and embedding, zero biases, unit LayerNorms
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}

    def inputs(self, indices: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """indices (B, T) codes so far, labels (B,) -> the input tokens [start_c, s_1, …, s_T] (B, T + 1, D)."""
        start = self.start_embed(labels)[:, None]  # (B, 1, D)
        return torch.cat([start, self.tok_embed(indices)], dim=1) if indices.shape[1] else start

    def transform(self, tokens: torch.Tensor, start: int = 0, caches: list[KVCache] | None = None) -> torch.Tensor:
        """tokens (B, N, D) at positions start … start + N − 1 -> next-code logits (B, N, K).

        Without caches the N tokens are the whole prefix (start = 0), each attending to itself and those before it.
        With caches they are the new tokens after the `start` cached ones (N = 1 unless the caches are empty)."""
        N = tokens.shape[1]
        if start + N > self.seq_len:
            raise ValueError(f"the sequence is {self.seq_len} codes long; positions up to {start + N} were asked")
        x = self.drop(tokens + self.pos_embed[:, start:start + N])
        mask = None  # one new token may see every earlier one
        if N > 1:
            if caches is not None and start:
                raise ValueError("a cached step after the first adds one token at a time")
            mask = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()  # (N, N): True = may attend
        for i, block in enumerate(self.blocks):
            x = block(x, attn_mask=mask, cache=caches[i] if caches is not None else None)
        return self.head(self.norm(x))

    def forward(self, indices: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """indices (B, L) the codes of whole images (row by row), labels (B,) their classes (None: class 0) ->
        logits (B, L, K), the prediction of each code from the ones before it."""
        B, L = indices.shape
        if self.seq_len != L:
            raise ValueError(f"expected {self.seq_len} codes per image (a {self.config.grid[0]}×"
                             f"{self.config.grid[1]} grid), got {L}")
        labels = self._labels(labels, B, indices.device)
        return self.transform(self.inputs(indices[:, :-1], labels))

    def _labels(self, labels: torch.Tensor | None, batch: int, device: torch.device) -> torch.Tensor:
        if labels is None:
            return torch.zeros(batch, dtype=torch.long, device=device)
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.config.num_classes):
            raise ValueError(f"class labels must lie in [0, {self.config.num_classes}), got {labels.tolist()}")
        return labels

    def new_caches(self) -> list[KVCache]:
        return [KVCache() for _ in self.blocks]

    @torch.no_grad()
    def generate(self, labels: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, use_cache: bool = True,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """labels (B,) -> sampled codes (B, h, w). One multinomial draw per step from
        softmax(filter(logits) / temperature); temperature 0 takes the most likely code."""
        if not 0 <= temperature < math.inf:
            raise ValueError(f"temperature must be 0 (greedy) or a finite positive number, got {temperature}")
        B = labels.shape[0]
        labels = self._labels(labels, B, labels.device)
        caches = self.new_caches() if use_cache else None
        codes = torch.zeros(B, 0, dtype=torch.long, device=labels.device)
        for t in range(self.seq_len):
            if caches is not None:  # only the newest token is new to the caches
                newest = self.start_embed(labels)[:, None] if t == 0 else self.tok_embed(codes[:, -1:])
                logits = self.transform(newest, start=t, caches=caches)[:, -1]
            else:
                logits = self.transform(self.inputs(codes, labels))[:, -1]
            logits = filter_logits(logits.float(), top_k, top_p)
            if temperature == 0:
                step = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = (logits / temperature).softmax(dim=-1)
                if not torch.isfinite(probs).all():  # so small a temperature that the scaled logits overflow
                    raise ValueError(f"temperature {temperature:g} is too small for these logits (they overflow "
                                     f"once scaled); give 0 to take the most likely code")
                step = torch.multinomial(probs, 1, generator=generator)
            codes = torch.cat([codes, step], dim=1)
        return codes.view(B, *self.config.grid)


@register_config
@dataclass(frozen=True)
class GPTPriorConfig(ModelFamily):
    family: ClassVar[str] = "gpt_prior"
    tasks: ClassVar[tuple[str, ...]] = ("prior",)
    title: ClassVar[str] = "GPT prior"
    description: ClassVar[str] = ("the VQGAN's Transformer prior (Esser et al., CVPR 2021): a GPT over code "
                                  "sequences, optionally class-conditional")
    paper: ClassVar[Paper | None] = Paper(
        "Taming Transformers for High-Resolution Image Synthesis",
        "Esser, Patrick and others", "CVPR", 2021, "2012.09841")
    columns: ClassVar[str] = "image: the code grid"
    not_exportable: ClassVar[str | None] = (
        "the prior samples one token at a time in a Python loop with a key-value cache; export its VQGAN run "
        "instead (the decoder that turns the sampled codes into images)")

    num_codes: int = 1024
    grid: tuple[int, int] = (16, 16)  # the VQGAN's code grid h × w
    num_classes: int = 1  # 1: unconditional
    dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    dropout: float = 0.0

    def summary(self) -> dict:
        return {"image": self.grid, "patch": None, "dim": self.dim, "depth": self.depth, "heads": self.num_heads,
                "classes": self.num_classes}

    def build(self) -> GPTPrior:
        return GPTPrior(self)


@register_model
def gpt_prior_small() -> GPTPriorConfig:
    """For vqgan_small's 8×8 codes of Fashion-MNIST, class-conditional. Sized by measurement on 2 CPU cores, a
    training step of 64 sequences: 0.18 s at width 128 and 4 layers; width 192 and 6 layers took 0.50 s."""
    return GPTPriorConfig(num_codes=256, grid=(8, 8), num_classes=10, dim=128, depth=4, num_heads=4)
