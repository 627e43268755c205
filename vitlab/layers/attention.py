"""Scaled dot-product attention and multi-head attention.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V            (Vaswani et al. 2017, eq. 1)

Q, K and V are learned linear maps of the tokens. Multi-head attention splits the model width into
`num_heads` slices of `head_dim = dim // num_heads`, attends in each slice independently, concatenates
the results and projects them back to `dim` (eq. 2 ibid.; ViT paper eq. 5–7).

Two paths compute the same numbers:
- the explicit path follows the formula one step at a time and can hand back the attention
  probabilities (B, heads, N, M), for reading and for attention maps;
- the fused path calls `torch.nn.functional.scaled_dot_product_attention`, which picks a fast kernel.
  It is the default. `tests/layers/test_attention.py` holds the two equal.

Shapes: B batch, N query tokens, M key/value tokens, D = dim, heads, head_dim = D // heads.

Masks follow `scaled_dot_product_attention`: a boolean mask is True where a query MAY attend to a key;
a float mask is added to the scores (use -inf to block). Either must broadcast to (B, heads, N, M).
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


class MultiHeadAttention(nn.Module):
    """Multi-head (self- or cross-) attention.

    The three input projections are stored as one `qkv` Linear (rows `[W_q; W_k; W_v]`, the layout of timm
    and of `torch.nn.MultiheadAttention.in_proj_weight`), so self-attention costs one matmul and existing
    checkpoints load without reshuffling. Cross-attention takes queries from `x` and keys/values from
    `context`, using the same three slices of that weight.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        fused: bool = True,
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
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        # (B, L, D) -> (B, L, heads, head_dim) -> (B, heads, L, head_dim)
        B, L, _ = t.shape
        return t.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)

    def project_qkv(
        self, x: torch.Tensor, context: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V as linear maps of the tokens, split into heads.

        x: (B, N, D) queries' source; context: (B, M, D) keys' and values' source (defaults to x).
        Returns q: (B, heads, N, head_dim), k, v: (B, heads, M, head_dim).
        """
        if context is None:
            B, N, D = x.shape
            # one matmul for all three: (B, N, 3D) -> (B, N, 3, heads, head_dim) -> (3, B, heads, N, head_dim)
            qkv = self.qkv(x).view(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            return qkv.unbind(0)
        return (self.project_q(x), *self.project_kv(context))

    def _split_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        w_q, w_kv = self.qkv.weight.split([self.dim, 2 * self.dim])
        b_q, b_kv = self.qkv.bias.split([self.dim, 2 * self.dim]) if self.qkv.bias is not None else (None, None)
        return w_q, w_kv, b_q, b_kv

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """Queries only (cross-attention): x (B, N, D) -> (B, heads, N, head_dim), with the first slice of `qkv`."""
        w_q, _, b_q, _ = self._split_weights()
        return self._split_heads(F.linear(x, w_q, b_q))  # (B, N, D) -> (B, heads, N, head_dim)

    def project_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values only (cross-attention): context (B, M, D) -> two (B, heads, M, head_dim)."""
        _, w_kv, _, b_kv = self._split_weights()
        k, v = F.linear(context, w_kv, b_kv).chunk(2, dim=-1)  # each (B, M, D)
        return self._split_heads(k), self._split_heads(v)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        return_attn: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x: (B, N, D), context: (B, M, D) or None for self-attention, attn_mask broadcastable to (B, heads, N, M).

        Returns (B, N, D); with `return_attn=True` also the probabilities (B, heads, N, M), which forces the
        explicit path for this call.
        """
        B, N, D = x.shape
        if self.dim != D:
            raise ValueError(f"expected tokens of width {self.dim}, got input of shape {tuple(x.shape)}")
        q, k, v = self.project_qkv(x, context)
        return self.attend(q, k, v, attn_mask=attn_mask, return_attn=return_attn)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        return_attn: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The second half of `forward`: attend with given heads, concatenate them, project.

        q: (B, heads, N, head_dim), k and v: (B, heads, M, head_dim), as `project_qkv` returns them. Split out so a
        decoder can attend with keys and values it has cached from earlier steps (`layers/blocks.py`, KVCache).
        Returns (B, N, D), and with `return_attn=True` also the probabilities (B, heads, N, M).
        """
        B, _, N, _ = q.shape
        D = self.dim
        dropout_p = self.attn_drop if self.training else 0.0
        probs = None
        if self.fused and not return_attn:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        else:
            out, probs = explicit_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        # concatenate the heads: (B, heads, N, head_dim) -> (B, N, heads, head_dim) -> (B, N, D)
        out = out.transpose(1, 2).reshape(B, N, D)
        out = self.proj_drop(self.proj(out))
        return (out, probs) if return_attn else out

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, fused={self.fused}, attn_drop={self.attn_drop}"
