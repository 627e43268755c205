"""Stochastic depth (Huang et al. 2016): drop a whole residual branch per sample while training."""

from __future__ import annotations

import torch
from torch import nn


def drop_path(x: torch.Tensor, drop_prob: float, training: bool) -> torch.Tensor:
    """Zero the branch output of each sample with probability `drop_prob`, scale survivors by 1/(1-p).

    x: (B, ...). The scaling keeps the expected value unchanged, so evaluation needs no correction.
    """
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1.0 - drop_prob
    mask_shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # one decision per sample, broadcast over tokens
    keep = x.new_empty(mask_shape).bernoulli_(keep_prob)
    return x * keep / keep_prob


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop_prob must be in [0, 1), got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"
