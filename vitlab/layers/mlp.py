"""The position-wise feed-forward network of a transformer block (ViT paper eq. 3; Vaswani et al. §3.3)."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    """Linear → GELU → Dropout → Linear → Dropout, applied to each token independently.

    x: (B, N, in_features) -> (B, N, out_features). `hidden_features` is usually 4 × width (`mlp_ratio`).
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        act_layer: type[nn.Module] = nn.GELU,
        drop: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        hidden_features = hidden_features or in_features
        out_features = out_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop1(self.act(self.fc1(x)))  # (B, N, hidden_features)
        return self.drop2(self.fc2(h))  # (B, N, out_features)
