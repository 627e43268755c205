"""The engine's training view of a model: its forward, computing only what the loss reads.

    train_model = training_view(model)    # model itself, or a LeanTraining sharing every parameter with it

A classifier that pools its class token reads only the prefix rows of its last block (ViT's eq. 4 takes z_L⁰), yet
its paper-form forward makes every token's rows there. A model that knows this says so (`reads_prefix_only`,
`lean_exact`) and offers `forward_lean(images)`, the same outputs and gradients without that work
(VisionTransformer.forward_lean): 7 % of the FLOPs at depth 12, 14 % at depth 6. The training step calls the
view; everything else sees the model as it is: checkpoints are written from the model (plain keys), the EMA
averages the model, evaluation and attention maps run its forward.

The view runs the model's own forward, as before, whenever the lean one could be told apart:
- a module hook (forward, pre-forward or backward) is registered on any module of the model, or a global forward
  hook: it would see the last block's (B, P, D) rows where it expects (B, N, D);
- the model says the lean forward is not the same run now (`lean_exact`: dropout in its last block, training).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# torch keeps the hooks registered for every module here; no public call says whether there are any
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from ..models.family import Model


class LeanTraining(nn.Module):
    """`model` (its child `model`) whose forward is its forward_lean where that is exact and unseen."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        # each module's hook dicts, looked at on every call: a hook may be registered after this is built
        self.hook_dicts = tuple(d for m in model.modules() for d in (
            m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks))

    def hooked(self) -> bool:
        """Whether a hook could see the difference: one on any module of the model, or a global forward hook."""
        return bool(_global_forward_hooks or _global_forward_pre_hooks) or any(self.hook_dicts)

    def forward(self, images: torch.Tensor) -> Any:
        model = self.model
        if model.lean_exact and not self.hooked():
            return model.forward_lean(images)
        return model(images)


def training_view(model: nn.Module) -> nn.Module:
    """The module the training step calls: a LeanTraining of model where the model offers a lean forward (a vitlab
    Model whose `reads_prefix_only` is true), else model itself."""
    return LeanTraining(model) if isinstance(model, Model) and model.reads_prefix_only else model
