"""Scaled dot-product attention and multi-head attention.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V            (Vaswani et al. 2017, eq. 1)

Q, K and V are learned linear maps of the tokens. Multi-head attention splits the model width into
`num_heads` slices of `head_dim = dim // num_heads`, attends in each slice independently, concatenates
the results and projects them back to `dim` (eq. 2 ibid.; ViT paper eq. 5–7). Queries, keys and values may come
from three different tensors: an encoder output for keys and values (cross-attention), and in DETR the same tokens
plus position embeddings for queries and keys but not for values.

Two paths compute the same numbers:
- the explicit path follows the formula one step at a time and can hand back the attention
  probabilities (B, heads, N, M), for reading and for attention maps;
- the fused path calls `torch.nn.functional.scaled_dot_product_attention`, which picks a fast kernel.
  It is the default. `tests/layers/test_attention.py` holds the two equal.

Shapes: B batch, N query tokens, M key/value tokens, D = dim, heads, head_dim = D // heads.

Masks follow `scaled_dot_product_attention`: a boolean `attn_mask` is True where a query MAY attend to a key;
a float mask is added to the scores (use -inf to block). Either must broadcast to (B, heads, N, M).
`key_padding_mask` (B, M) follows `torch.nn.MultiheadAttention` instead: True marks a padded key, which no query
attends to. The two are merged into one mask (`merge_masks`).

A query left with no key at all (every key padded or masked) has no distribution to attend with: the softmax
would be 0/0. Its attention result is set to zero, so that after the output projection its row is the projection
bias, and no NaN reaches the activations or the gradients. Zero is "nothing gathered": in a residual block the
token passes on unchanged but for that bias. It is also what the math kernel of `scaled_dot_product_attention`
returns for such a row (torch >= 2.5), whereas `torch.nn.MultiheadAttention` returns NaN. `attend` applies the
rule the same way on both paths, so they agree whichever kernel the fused path picks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / √d_k + mask) v, step by step.

    q: (B, heads, N, head_dim), k and v: (B, heads, M, head_dim).
    Returns the output (B, heads, N, head_dim) and the probabilities (B, heads, N, M) before dropout.
    """
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, heads, N, M): similarity of each query to each key
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    probs = scores.softmax(dim=-1)  # each row: a distribution over the M keys
    weights = F.dropout(probs, p=dropout_p) if dropout_p > 0 else probs
    return weights @ v, probs


def merge_masks(attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """One mask for `attend` from attn_mask (broadcastable to (B, heads, N, M)) and key_padding_mask (B, M).

    attn_mask: bool True = may attend, or float added to the scores. key_padding_mask: bool True = padded key (the
    meaning of `torch.nn.MultiheadAttention`), or float added to the scores. Two boolean masks merge into a boolean one
    (`attn_mask & ~key_padding_mask`); otherwise into an additive one in the float mask's dtype. None if both are None.
    """
    if key_padding_mask is None:
        return attn_mask
    padding = key_padding_mask[:, None, None, :]  # (B, M) -> (B, 1, 1, M): the same keys hidden from every query
    allowed = ~padding if padding.dtype == torch.bool else padding  # now True = may attend, like attn_mask
    if attn_mask is None:
        return allowed
    if attn_mask.dtype == torch.bool and allowed.dtype == torch.bool:
        return attn_mask & allowed  # broadcasts to (B, heads | 1, N, M)
    dtype = attn_mask.dtype if attn_mask.dtype != torch.bool else allowed.dtype
    return additive_mask(attn_mask, dtype) + additive_mask(allowed, dtype)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask as scores to add, same shape: a boolean one (True = may attend) becomes 0 / -inf; a float one is kept."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def keyless_rows(mask: torch.Tensor) -> torch.Tensor:
    """mask (…, N, M) -> (…, N, 1), True for each query that the mask lets attend to no key at all."""
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return (mask == float("-inf")).all(dim=-1, keepdim=True)


class MultiHeadAttention(nn.Module):
    """Multi-head (self- or cross-) attention: `attn(query)` attends over the query tokens themselves,
    `attn(query, key, value)` queries from `query`, keys from `key`, values from `value` (default: `key`).

    The three input projections are stored as one `qkv` Linear (rows `[W_q; W_k; W_v]`, the layout of timm
    and of `torch.nn.MultiheadAttention.in_proj_weight`), so self-attention costs one matmul and existing
    checkpoints load without reshuffling. When queries, keys and values come from different tensors (DETR adds
    position embeddings to queries and keys but not to values) each goes through its own slice of that weight.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        fused: bool = True,
        proj_bias: bool = True,
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(
                f"dim must be divisible by num_heads, got dim={dim}, num_heads={num_heads}; "
                f"choose num_heads among the divisors of {dim}"
            )
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.fused = fused
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_drop = attn_drop  # a probability, applied to the attention weights in training only
        self.proj = nn.Linear(dim, dim, bias=proj_bias)  # IPT's attention has no biases at all
        self.proj_drop = nn.Dropout(proj_drop)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        # (B, L, D) -> (B, L, heads, head_dim) -> (B, heads, L, head_dim)
        B, L, _ = t.shape
        return t.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)

    def project_qkv(
        self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V as linear maps of the tokens, split into heads.

        query: (B, N, D) the queries' source; key: (B, M, D) the keys' source, None for self-attention (the query
        tokens); value: (B, M, D) the values' source, None for the key tokens.
        Returns q: (B, heads, N, head_dim), k, v: (B, heads, M, head_dim).
        Tensors that are the same object share one matmul: all three (self-attention), keys and values
        (cross-attention), queries and keys (DETR's self-attention on x + pos with values from x).
        """
        if key is None and value is not None:
            raise ValueError("value was given without key; pass key too (or neither, for self-attention)")
        key = query if key is None else key
        value = key if value is None else value
        if key is query and value is query:
            B, N, D = query.shape
            # one matmul for all three: (B, N, 3D) -> (B, N, 3, heads, head_dim) -> (3, B, heads, N, head_dim)
            qkv = self.qkv(query).view(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            return qkv.unbind(0)
        if key is query:
            q, k = self._in_proj(query, 0, 2).chunk(2, dim=-1)  # (B, N, 2D) -> two (B, N, D)
            return self._split_heads(q), self._split_heads(k), self.project_v(value)
        return (self.project_q(query), *self.project_kv(key, value))

    def _in_proj(self, t: torch.Tensor, first: int, last: int) -> torch.Tensor:
        """t (B, L, D) through rows first·D … last·D of the `qkv` weight (slice 0: W_q, 1: W_k, 2: W_v).

        Returns (B, L, (last - first)·D).
        """
        rows = slice(first * self.dim, last * self.dim)
        bias = self.qkv.bias[rows] if self.qkv.bias is not None else None
        return F.linear(t, self.qkv.weight[rows], bias)

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """Queries only: x (B, N, D) -> (B, heads, N, head_dim), with the first slice of `qkv`."""
        return self._split_heads(self._in_proj(x, 0, 1))  # (B, N, D) -> (B, heads, N, head_dim)

    def project_k(self, x: torch.Tensor) -> torch.Tensor:
        """Keys only: x (B, M, D) -> (B, heads, M, head_dim), with the second slice of `qkv`."""
        return self._split_heads(self._in_proj(x, 1, 2))  # (B, M, D) -> (B, heads, M, head_dim)

    def project_v(self, x: torch.Tensor) -> torch.Tensor:
        """Values only: x (B, M, D) -> (B, heads, M, head_dim), with the third slice of `qkv`."""
        return self._split_heads(self._in_proj(x, 2, 3))  # (B, M, D) -> (B, heads, M, head_dim)

    def project_kv(self, key: torch.Tensor, value: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values: key (B, M, D), value (B, M, D) or None for the key tokens -> two (B, heads, M, head_dim).

        One matmul when keys and values come from the same tokens (the usual cross-attention), two otherwise.
        """
        if value is not None and value is not key:
            return self.project_k(key), self.project_v(value)
        k, v = self._in_proj(key, 1, 3).chunk(2, dim=-1)  # (B, M, 2D) -> two (B, M, D)
        return self._split_heads(k), self._split_heads(v)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        return_attn: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """query: (B, N, D); key: (B, M, D), None for self-attention; value: (B, M, D), None to use the keys.

        attn_mask broadcastable to (B, heads, N, M), True = may attend (or additive); key_padding_mask (B, M),
        True = padded key, ignored by every query. Returns (B, N, D); with `return_attn=True` also the
        probabilities (B, heads, N, M), which forces the explicit path for this call.
        """
        self.check_inputs(query, key, value, key_padding_mask)
        q, k, v = self.project_qkv(query, key, value)
        return self.attend(q, k, v, attn_mask=attn_mask, key_padding_mask=key_padding_mask, return_attn=return_attn)

    def check_inputs(self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None,
                     key_padding_mask: torch.Tensor | None) -> None:
        for name, tokens in (("query", query), ("key", key), ("value", value)):
            if tokens is not None and (tokens.ndim != 3 or tokens.shape[-1] != self.dim):
                raise ValueError(f"expected {name} tokens of shape (B, L, {self.dim}) (width {self.dim}), "
                                 f"got input of shape {tuple(tokens.shape)}")
        if key is None and value is not None:
            raise ValueError("value was given without key; pass key too (or neither, for self-attention)")
        keys = query if key is None else key
        if value is not None and value.shape[:2] != keys.shape[:2]:
            raise ValueError(f"keys and values must pair up, (B, M) = {tuple(keys.shape[:2])}, but the values "
                             f"have {tuple(value.shape[:2])}")
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != tuple(keys.shape[:2]):
            raise ValueError(f"key_padding_mask must be (B, M) = {tuple(keys.shape[:2])}, one flag per key, "
                             f"got shape {tuple(key_padding_mask.shape)}")

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        return_attn: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The second half of `forward`: attend with given heads, concatenate them, project.

        q: (B, heads, N, head_dim), k and v: (B, heads, M, head_dim), as `project_qkv` returns them. Split out so a
        decoder can attend with keys and values it has cached from earlier steps (`layers/blocks.py`, KVCache).
        Masks as in `forward`. Returns (B, N, D), and with `return_attn=True` also the probabilities (B, heads, N, M).
        """
        B, _, N, _ = q.shape
        D = self.dim
        dropout_p = self.attn_drop if self.training else 0.0
        mask = merge_masks(attn_mask, key_padding_mask)
        keyless = None
        if mask is not None:
            # A query with no key left would take a softmax over nothing (NaN). Let it attend to every key, so that
            # no kernel sees a row of only -inf, and zero its result below (module docstring).
            keyless = keyless_rows(mask)  # (…, N, 1)
            mask = mask | keyless if mask.dtype == torch.bool else mask.masked_fill(keyless, 0.0)
        probs = None
        if self.fused and not return_attn:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        else:
            out, probs = explicit_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        if keyless is not None:
            out = out.masked_fill(keyless, 0.0)  # (B, heads, N, head_dim): nothing gathered by a keyless query
            probs = probs.masked_fill(keyless, 0.0) if probs is not None else None
        # concatenate the heads: (B, heads, N, head_dim) -> (B, N, heads, head_dim) -> (B, N, D)
        out = out.transpose(1, 2).reshape(B, N, D)
        out = self.proj_drop(self.proj(out))
        return (out, probs) if return_attn else out

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, fused={self.fused}, attn_drop={self.attn_drop}"
