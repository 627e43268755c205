"""Exponential moving average of the weights (Polyak averaging; DeiT keeps one with decay 0.99996).

After every optimizer step:  θ_ema ← d·θ_ema + (1 − d)·θ   for floating-point parameters and buffers;
integer buffers (step counters) are copied. The EMA model is evaluated beside the trained one and saved as
ema.safetensors; it never receives gradients.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .options import OptionError


class ModelEma:
    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0 < decay < 1:
            raise OptionError("ema_decay", f"must be in (0, 1), e.g. 0.9998, got {decay}")
        self.decay = decay
        self.module = copy.deepcopy(model).eval()
        for param in self.module.parameters():
            param.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        live = model.state_dict()
        for name, averaged in self.module.state_dict().items():
            value = live[name].detach()
            if averaged.is_floating_point():
                averaged.lerp_(value.to(averaged.dtype), 1.0 - self.decay)  # d·θ_ema + (1 − d)·θ
            else:
                averaged.copy_(value)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(state)
