"""Transformer encoder blocks: pre-norm (ViT) and post-norm (the original Transformer).

Pre-norm, ViT paper eq. 2–3:      x = x + DropPath(MSA(LN(x)));  x = x + DropPath(MLP(LN(x)))
Post-norm, Vaswani et al. §3.1:   x = LN(x + Dropout(MSA(x)));   x = LN(x + Dropout(MLP(x)))

Both take x: (B, N, D), an optional attention mask broadcastable to (B, heads, N, N) (True = may attend, or
additive), an optional key_padding_mask (B, N) (True = padding, ignored as a key) and optional position embeddings
`pos` broadcastable to (B, N, D), and return (B, N, D).

Decoder blocks (post-norm `DecoderBlock`, `PreNormDecoderBlock`) add cross-attention to an encoder output and
can carry a `KVCache`, so that generating one more token costs one step instead of recomputing the prefix.

Position embeddings, DETR's way (Carion et al. 2020, §3.2; appendix A.3, Fig. 10): added to the queries and the
keys of every attention, never to the values nor to the residual stream, so that each layer sees where tokens are
while what it gathers is content. `pos` belongs to the encoder tokens (in a decoder: to the memory), `query_pos`
to the decoder's queries (DETR's object queries). In a pre-norm block they are added after the LayerNorm, as in
DETR.

All four blocks take the same constructor arguments: dim, num_heads, mlp_ratio, qkv_bias, proj_drop (dropout on
each branch output), attn_drop (on the attention probabilities), drop_path (stochastic depth on each branch),
norm_layer, act_layer, fused_attn. The pre-norm encoder adds init_values (layer scale); the post-norm encoder and
the decoders also take `dropout`, their first name for proj_drop. The pre-norm encoder and the decoders take
`proj_bias=False` for attention without any bias (IPT's: no bias in the q, k, v nor the output projection).

Sub-layer names (norm1, attn, ls1, drop_path1, norm2, mlp, ls2, drop_path2) follow timm's, so checkpoints map
one to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from .attention import MultiHeadAttention
from .drop import DropPath
from .mlp import Mlp

LayerNorm6 = partial(nn.LayerNorm, eps=1e-6)  # the epsilon of the JAX ViT release and of timm


def with_pos(x: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
    """x + pos, or x itself when pos is None: the same object, so that attention keeps its fused projections."""
    return x if pos is None else x + pos


def branch_dropout(proj_drop: float, dropout: float | None) -> float:
    """proj_drop, or `dropout`, the post-norm blocks' first name for it; both given and different is an error."""
    if dropout is None or dropout == proj_drop:
        return proj_drop
    if proj_drop:
        raise TypeError(f"dropout={dropout} and proj_drop={proj_drop} are one option (dropout is its old name); "
                        f"give only proj_drop")
    return dropout


def drop_path_or_identity(rate: float) -> nn.Module:
    return DropPath(rate) if rate > 0 else nn.Identity()


class LayerScale(nn.Module):
    """Per-channel learned scale of a residual branch (CaiT, Touvron et al. 2021). x: (B, N, D) -> (B, N, D)."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block, as in ViT."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        init_values: float | None = None,
        norm_layer: type[nn.Module] | partial = LayerNorm6,
        act_layer: type[nn.Module] = nn.GELU,
        fused_attn: bool = True,
        *,
        proj_bias: bool = True,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = MultiHeadAttention(dim, num_heads, qkv_bias, attn_drop, proj_drop, fused=fused_attn,
                                       proj_bias=proj_bias)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = drop_path_or_identity(drop_path)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = drop_path_or_identity(drop_path)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None, pos: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        """x: (B, N, D), attn_mask broadcastable to (B, heads, N, N), key_padding_mask (B, N), pos broadcastable to
        (B, N, D), added to queries and keys. Returns (B, N, D).

        With a `cache` (a decoder-only transformer, GPT's block under a causal mask), x holds only the N new tokens,
        which attend to the cached ones and to each other; attn_mask must then broadcast to (B, heads, N, T + N)
        (None when N = 1) and key_padding_mask must be None."""
        attended = self.self_attention(self.norm1(x), attn_mask, key_padding_mask, pos, cache=cache)  # MSA(LN(x))
        x = x + self.drop_path1(self.ls1(attended))  # eq. 2
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))  # eq. 3
        return x

    def forward_first(self, x: torch.Tensor, keep: int) -> torch.Tensor:
        """The block's output for the first `keep` tokens alone: x (B, N, D) -> (B, keep, D).

        Every token still gives a key and a value; only the first `keep` ask queries, and only their rows go through
        the output projection and the MLP. Equal to `forward(x)[:, :keep]`, gradients included, for about keep/N of
        the cost of everything but the key and value projections: all that a classifier reading only its class
        token needs of its last block. Self-attention without masks, positions or a cache, as a ViT's. A dropout
        here would draw its masks over keep rows rather than N (same distribution, other draws); drop path draws
        one per sample, the same either way.
        """
        h = self.norm1(x)
        attended = self.attn(h[:, :keep], h)  # queries (B, keep, D) attend over keys and values of all N tokens
        x = x[:, :keep] + self.drop_path1(self.ls1(attended))  # eq. 2, for the kept rows
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))  # eq. 3

    def self_attention(self, h: torch.Tensor, attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None,
                       pos: torch.Tensor | None, return_attn: bool = False, cache: KVCache | None = None):
        """Attention of h (B, N, D) over itself: queries and keys from h + pos, values from h -> (B, N, D).

        With a `cache`, over the cached tokens too, whose keys and values h's are appended to (see forward)."""
        qk = with_pos(h, pos)  # h itself without positions: then one fused matmul for q, k and v
        if cache is not None:
            if key_padding_mask is not None:
                raise ValueError("a cached step takes no key_padding_mask: fold it into attn_mask")
            return attend_with_cache(self.attn, qk, h, attn_mask, cache)
        return self.attn(qk, qk, h, attn_mask=attn_mask, key_padding_mask=key_padding_mask, return_attn=return_attn)

    def forward_with_attn(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like forward, also returning the attention probabilities (B, heads, N, N) from the explicit path."""
        attn_out, probs = self.self_attention(self.norm1(x), attn_mask, key_padding_mask, pos, return_attn=True)
        x = x + self.drop_path1(self.ls1(attn_out))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x, probs


class PostNormEncoderBlock(nn.Module):
    """Post-norm encoder block of the original Transformer: the residual sum is normalised, not the branch input.

    Dropout on each branch output (`proj_drop`, alias `dropout`), as in Vaswani et al. §5.4; stochastic depth
    (`drop_path`) is available as in the pre-norm block, off by default. LayerNorm eps 1e-5 as in
    `torch.nn.TransformerEncoderLayer`.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_layer: type[nn.Module] | partial = nn.LayerNorm,
        act_layer: type[nn.Module] = nn.ReLU,
        fused_attn: bool = True,
        *,
        dropout: float | None = None,
    ) -> None:
        super().__init__()
        proj_drop = branch_dropout(proj_drop, dropout)
        self.attn = MultiHeadAttention(dim, num_heads, qkv_bias, attn_drop, proj_drop, fused=fused_attn)
        self.drop_path1 = drop_path_or_identity(drop_path)
        self.norm1 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.drop_path2 = drop_path_or_identity(drop_path)
        self.norm2 = norm_layer(dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None, pos: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, N, D), masks and pos as in `EncoderBlock.forward`. Returns (B, N, D)."""
        qk = with_pos(x, pos)  # DETR's post-norm encoder layer: q = k = x + pos, v = x
        x = self.norm1(x + self.drop_path1(self.attn(qk, qk, x, attn_mask=attn_mask,
                                                     key_padding_mask=key_padding_mask)))
        x = self.norm2(x + self.drop_path2(self.mlp(x)))
        return x


@dataclass
class KVCache:
    """What one decoder block keeps between generation steps (B batch, heads, T tokens so far, M memory tokens).

    Self-attention keys and values grow by the new tokens at every step; cross-attention keys and values depend
    only on the encoder output, so they are computed on the first step and reused. Start from `KVCache()`.
    """

    self_k: torch.Tensor | None = None  # (B, heads, T, head_dim)
    self_v: torch.Tensor | None = None  # (B, heads, T, head_dim)
    cross_k: torch.Tensor | None = None  # (B, heads, M, head_dim)
    cross_v: torch.Tensor | None = None  # (B, heads, M, head_dim)

    @property
    def length(self) -> int:
        """T, the number of target tokens already seen."""
        return 0 if self.self_k is None else self.self_k.shape[2]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (B',), in that order: beam search's survivors pick their parents' caches."""
        for name in ("self_k", "self_v", "cross_k", "cross_v"):
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, tensor.index_select(0, index))


def attend_with_cache(attn: MultiHeadAttention, qk: torch.Tensor, v_source: torch.Tensor,
                      attn_mask: torch.Tensor | None, cache: KVCache) -> torch.Tensor:
    """Self-attention of N new tokens over the T cached ones and themselves, appending their keys and values to
    the cache. qk (B, N, D): the queries' and keys' source; v_source (B, N, D): the values'. Returns (B, N, D)."""
    q, k, v = attn.project_qkv(qk, qk, v_source)  # (B, heads, N, head_dim) each
    if cache.self_k is not None:  # earlier tokens first: (B, heads, T, head_dim) + new -> (B, heads, T + N, ...)
        k, v = torch.cat([cache.self_k, k], dim=2), torch.cat([cache.self_v, v], dim=2)
    cache.self_k, cache.self_v = k, v
    return attn.attend(q, k, v, attn_mask=attn_mask)


class DecoderBlock(nn.Module):
    """Post-norm decoder block of the original Transformer (Vaswani et al. §3.1), the block DETR reuses:

        x = LN(x + Dropout(SelfAttn(q=k=x+query_pos, v=x, mask=self_mask)))          masked self-attention
        x = LN(x + Dropout(CrossAttn(q=x+query_pos, k=memory+pos, v=memory, mask=memory_mask)))
        x = LN(x + Dropout(MLP(x)))

    x: (B, N, D) targets, memory: (B, M, D) encoder output; masks broadcast to (B, heads, N, N) and
    (B, heads, N, M), True = may attend (or additive); memory_key_padding_mask (B, M), True = padded memory token;
    pos broadcastable to (B, M, D) (the memory's positions), query_pos to (B, N, D). Returns (B, N, D).

    With a `cache`, x holds only the N new tokens: their keys and values are appended to the cached ones, so
    `self_mask` must then broadcast to (B, heads, N, T + N) (None when N = 1: a new token may see every earlier one),
    and query_pos covers the new tokens only. The memory's keys (memory + pos) and values are cached on the first
    step.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_layer: type[nn.Module] | partial = nn.LayerNorm,
        act_layer: type[nn.Module] = nn.ReLU,
        fused_attn: bool = True,
        *,
        dropout: float | None = None,
        proj_bias: bool = True,
    ) -> None:
        super().__init__()
        proj_drop = branch_dropout(proj_drop, dropout)
        self.self_attn = MultiHeadAttention(dim, num_heads, qkv_bias, attn_drop, proj_drop, fused=fused_attn,
                                            proj_bias=proj_bias)
        self.drop_path1 = drop_path_or_identity(drop_path)
        self.norm1 = norm_layer(dim)
        self.cross_attn = MultiHeadAttention(dim, num_heads, qkv_bias, attn_drop, proj_drop, fused=fused_attn,
                                             proj_bias=proj_bias)
        self.drop_path2 = drop_path_or_identity(drop_path)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.drop_path3 = drop_path_or_identity(drop_path)
        self.norm3 = norm_layer(dim)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: KVCache | None = None,
                memory_key_padding_mask: torch.Tensor | None = None, pos: torch.Tensor | None = None,
                query_pos: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.drop_path1(self.attend_self(x, self_mask, cache, query_pos)))
        x = self.norm2(x + self.drop_path2(self.attend_memory(x, memory, memory_mask, cache,
                                                              memory_key_padding_mask, pos, query_pos)))
        return self.norm3(x + self.drop_path3(self.mlp(x)))

    def attend_self(self, h: torch.Tensor, self_mask: torch.Tensor | None, cache: KVCache | None,
                    query_pos: torch.Tensor | None = None) -> torch.Tensor:
        """Masked self-attention of h (B, N, D) over the cached tokens and itself -> (B, N, D); queries and keys
        from h + query_pos, values from h."""
        qk = with_pos(h, query_pos)  # h itself without positions: one fused matmul for q, k and v
        if cache is None:
            return self.self_attn(qk, qk, h, attn_mask=self_mask)
        return attend_with_cache(self.self_attn, qk, h, self_mask, cache)

    def attend_memory(self, h: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
                      cache: KVCache | None, memory_key_padding_mask: torch.Tensor | None = None,
                      pos: torch.Tensor | None = None, query_pos: torch.Tensor | None = None) -> torch.Tensor:
        """Cross-attention: queries from h + query_pos (B, N, D), keys from memory + pos (B, M, D), values from
        memory -> (B, N, D)."""
        query, key = with_pos(h, query_pos), with_pos(memory, pos)
        if cache is None:
            return self.cross_attn(query, key, memory, attn_mask=memory_mask, key_padding_mask=memory_key_padding_mask)
        if cache.cross_k is None:  # once per sequence; one matmul when key is memory (no pos)
            cache.cross_k, cache.cross_v = self.cross_attn.project_kv(key, memory)
        return self.cross_attn.attend(self.cross_attn.project_q(query), cache.cross_k, cache.cross_v,
                                      attn_mask=memory_mask, key_padding_mask=memory_key_padding_mask)


class PreNormDecoderBlock(DecoderBlock):
    """The same sub-layers in pre-norm order (each branch reads a normalised input; the sum is left alone):
    x = x + SelfAttn(LN(x)); x = x + CrossAttn(LN(x), memory); x = x + MLP(LN(x)). Positions are added after the
    LayerNorm (DETR's forward_pre)."""

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: KVCache | None = None,
                memory_key_padding_mask: torch.Tensor | None = None, pos: torch.Tensor | None = None,
                query_pos: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop_path1(self.attend_self(self.norm1(x), self_mask, cache, query_pos))
        x = x + self.drop_path2(self.attend_memory(self.norm2(x), memory, memory_mask, cache,
                                                   memory_key_padding_mask, pos, query_pos))
        return x + self.drop_path3(self.mlp(self.norm3(x)))


class SpatialSelfAttention(nn.Module):
    """Self-attention over the pixels of a feature map, each pixel a token (VQGAN's attention block):

        x + Attention(GN(x) as H·W tokens of width C)         one head, softmax(QKᵀ/√C)V

    x: (B, C, H, W) -> (B, C, H, W). The attention is vitlab's `MultiHeadAttention` (with biases), so its explicit
    and fused paths apply here as everywhere; `num_heads` > 1 splits C as usual.
    """

    def __init__(self, channels: int, num_heads: int = 1, num_groups: int = 32, eps: float = 1e-6,
                 fused_attn: bool = True) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=eps)
        self.attn = MultiHeadAttention(channels, num_heads, qkv_bias=True, fused=fused_attn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        tokens = self.norm(x).flatten(2).transpose(1, 2)  # (B, C, H, W) -> (B, H·W, C)
        out = self.attn(tokens).transpose(1, 2).reshape(B, C, H, W)
        return x + out
