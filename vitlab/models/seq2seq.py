"""The original Transformer (Vaswani et al. 2017, "Attention Is All You Need"): an encoder–decoder.

    x = Embed(src)·√D + PE                        §3.4, §3.5  token embeddings scaled by √d_model, positions added
    memory = EncoderBlock^N(x, mask=src padding)  §3.1        self-attention + MLP, post-norm (pre-norm optional)
    y = Embed(tgt)·√D + PE
    h = DecoderBlock^N(y, memory)                 §3.1        masked self-attention, cross-attention, MLP
    logits = h Eᵀ                                 §3.4        output projection tied to the embedding (optional)

The blocks are vitlab's shared ones (`layers/blocks.py`); this file adds only the embeddings, the masks and the
stacking. Masks are boolean, True = may attend: padding hides `<pad>` keys, the causal mask hides later targets.

Glossary: B batch, S source tokens, T target tokens, D width (d_model), V vocabulary size, heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..layers.blocks import DecoderBlock, EncoderBlock, KVCache, PostNormEncoderBlock, PreNormDecoderBlock
from ..layers.pos_embed import sincos_1d
from .family import Model, ModelFamily, Paper
from .registry import register_config

# The config family is registered (so saved weights rebuild their model through `config_from_dict`), but no
# preset is: `list_models()` and the sweep in tests/models/test_all_models.py are for image models, and a
# sequence model trained on a toy task has no standard named size for users to guess.


@register_config
@dataclass(frozen=True)
class Seq2SeqConfig(ModelFamily):
    family: ClassVar[str] = "seq2seq"
    tasks: ClassVar[tuple[str, ...]] = ("seq2seq",)
    title: ClassVar[str] = "Transformer"
    description: ClassVar[str] = ("the Transformer (Vaswani et al., NeurIPS 2017): an encoder-decoder over token "
                                  "sequences")
    paper: ClassVar[Paper | None] = Paper(
        "Attention Is All You Need",
        "Vaswani, Ashish and others", "NeurIPS", 2017, "1706.03762")
    not_exportable: ClassVar[str | None] = ("beam search and greedy decoding are Python loops over one-token steps, "
                                            "not one graph")

    vocab_size: int  # V, shared by source and target (one table, as in §3.4)
    dim: int = 512  # d_model
    depth: int = 6  # N: encoder blocks, and as many decoder blocks
    num_heads: int = 8
    mlp_ratio: float = 4.0  # d_ff = mlp_ratio · D (2048 = 4 · 512 in the paper)
    dropout: float = 0.1  # on embeddings + positions and on every sub-layer output (§5.4)
    attn_drop: float = 0.0  # on the attention probabilities
    norm: str = "post"  # "post": LN(x + sublayer(x)) as in the paper; "pre": x + sublayer(LN(x)), final LNs
    pos_embed: str = "sincos"  # "sincos": the fixed encoding of §3.5; "learn": a learned table
    max_len: int = 256  # longest source or target sequence the position table covers
    tie_embeddings: bool = True  # one table for source, target and output projection (§3.4); else three
    pad_id: int = 0  # padding token: masked out of attention as a key
    fused_attn: bool = True  # scaled_dot_product_attention; False: the explicit formula

    def __post_init__(self) -> None:
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {self.norm!r}")
        if self.pos_embed not in ("sincos", "learn"):
            raise ValueError(f"pos_embed must be 'sincos' or 'learn', got {self.pos_embed!r}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} is not divisible by num_heads={self.num_heads}")
        if self.pos_embed == "sincos" and self.dim % 2:
            raise ValueError(f"the sin-cos encoding needs an even dim, got {self.dim}")

    def summary(self) -> dict:
        return {"image": None, "patch": None, "dim": self.dim, "depth": f"{self.depth}+{self.depth}",
                "heads": self.num_heads, "classes": f"{self.vocab_size} tokens"}

    def build(self) -> Seq2SeqTransformer:
        return Seq2SeqTransformer(self)


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """tokens (B, L) -> (B, 1, 1, L), True at real tokens: every query may attend to every non-padding key."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(T: int, device: torch.device | None = None, start: int = 0) -> torch.Tensor:
    """(T, start + T), True on and below the diagonal: target t (at position start + t) sees positions ≤ itself."""
    return torch.ones(T, start + T, dtype=torch.bool, device=device).tril(diagonal=start)


class Seq2SeqTransformer(Model):
    """src (B, S), tgt (B, T) token ids -> logits (B, T, V) for the token after each target position."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        V, D = config.vocab_size, config.dim
        if config.tie_embeddings:
            self.embed = nn.Embedding(V, D)
        else:
            self.src_embed, self.tgt_embed = nn.Embedding(V, D), nn.Embedding(V, D)
            self.head = nn.Linear(D, V, bias=False)
        if config.pos_embed == "sincos":
            self.register_buffer("pos_embed", sincos_1d(config.max_len, D), persistent=False)  # (max_len, D)
        else:
            self.pos_embed = nn.Parameter(torch.randn(config.max_len, D) * 0.02)
        self.embed_drop = nn.Dropout(config.dropout)

        args = dict(dim=D, num_heads=config.num_heads, mlp_ratio=config.mlp_ratio, qkv_bias=True,
                    proj_drop=config.dropout, attn_drop=config.attn_drop, norm_layer=nn.LayerNorm,
                    act_layer=nn.ReLU, fused_attn=config.fused_attn)  # the same arguments for all four blocks
        if config.norm == "post":
            self.encoder = nn.ModuleList(PostNormEncoderBlock(**args) for _ in range(config.depth))
            self.decoder = nn.ModuleList(DecoderBlock(**args) for _ in range(config.depth))
            # post-norm blocks end in a LayerNorm already
            self.encoder_norm, self.decoder_norm = nn.Identity(), nn.Identity()
        else:
            self.encoder = nn.ModuleList(EncoderBlock(**args) for _ in range(config.depth))
            self.decoder = nn.ModuleList(PreNormDecoderBlock(**args) for _ in range(config.depth))
            # pre-norm leaves the residual stream unnormalised: one LayerNorm after each stack
            self.encoder_norm, self.decoder_norm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.init_weights()

    def init_weights(self) -> None:
        # Xavier for matrices, as torch.nn.Transformer; embeddings N(0, 1/D), so that Embed·√D has unit scale
        for name, param in self.named_parameters():
            if param.ndim > 1 and "embed" not in name:
                nn.init.xavier_uniform_(param)
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.config.dim ** -0.5)

    # embeddings and output -----------------------------------------------------------------------------------

    def embed_tokens(self, tokens: torch.Tensor, table: nn.Embedding, start: int = 0) -> torch.Tensor:
        """tokens (B, L) at positions start … start+L-1 -> Embed·√D + PE (B, L, D)."""
        B, L = tokens.shape
        if start + L > self.config.max_len:
            raise ValueError(
                f"a sequence of {start + L} tokens is longer than this model's max_len={self.config.max_len}; "
                f"shorten the input or build the model with a larger max_len"
            )
        x = table(tokens) * math.sqrt(self.config.dim) + self.pos_embed[start:start + L]
        return self.embed_drop(x)

    @property
    def source_table(self) -> nn.Embedding:
        return self.embed if self.config.tie_embeddings else self.src_embed

    @property
    def target_table(self) -> nn.Embedding:
        return self.embed if self.config.tie_embeddings else self.tgt_embed

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Decoder states (…, D) -> next-token logits (…, V)."""
        return h @ self.embed.weight.T if self.config.tie_embeddings else self.head(h)

    # the two stacks ------------------------------------------------------------------------------------------

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, D) and its key mask (B, 1, 1, S), which the decoder needs too."""
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed_tokens(src, self.source_table)
        for block in self.encoder:
            x = block(x, attn_mask=src_mask)
        return self.encoder_norm(x), src_mask

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
               caches: list[KVCache] | None = None) -> torch.Tensor:
        """tgt (B, T) -> decoder states (B, T, D), attending to memory (B, S, D) where memory_mask (B, 1, 1, S).

        Without caches the whole target is processed at once under the causal mask (training, or recomputing a
        prefix). With `caches` (one `KVCache` per decoder block, see `new_caches`) tgt holds only the tokens after
        those already cached; their keys and values are added to the caches.
        """
        B, T = tgt.shape
        start = caches[0].length if caches else 0
        x = self.embed_tokens(tgt, self.target_table, start)
        if caches is None:
            # (T, T) causal & (B, 1, 1, T) padding -> (B, 1, T, T)
            self_mask = causal_mask(T, tgt.device) & padding_mask(tgt, self.config.pad_id)
        else:
            self_mask = None if T == 1 else causal_mask(T, tgt.device, start)  # one new token sees all before it
        for i, block in enumerate(self.decoder):
            x = block(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                      cache=caches[i] if caches else None)
        return self.decoder_norm(x)

    def new_caches(self) -> list[KVCache]:
        return [KVCache() for _ in self.decoder]

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt (B, T) -> logits (B, T, V); position t predicts target token t+1 (teacher forcing)."""
        memory, memory_mask = self.encode(src)
        return self.logits(self.decode(tgt, memory, memory_mask))

    # hook for engine/optim --------------------------------------------------------------------------------------

    def no_weight_decay(self) -> set[str]:
        """A learned position table (pos_embed="learn") is not decayed towards zero; the token tables, matrices
        like any other, are."""
        return {"pos_embed"}
