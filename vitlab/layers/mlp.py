"""The position-wise feed-forward network of a transformer block (ViT paper eq. 3; Vaswani et al. §3.3)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks


def call_unless_noop(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module(x), or x itself when the module is an nn.Identity or an nn.Dropout with p = 0.

    Either returns its input unchanged, but each call through nn.Module costs a few microseconds of Python; a ViT
    block holds several (unused dropouts, layer scale, drop path), which shows at batch 1 and on small models.
    """
    kind = type(module)
    if kind is nn.Identity or (kind is nn.Dropout and module.p == 0):
        return x
    return module(x)


# Below this many elements (1 MiB of fp32) a new tensor is cheap and checking for hooks costs more than it saves:
# at batch 1 the checks made the mini model ~10 % slower, measured here.
IN_PLACE_MIN_ELEMENTS = 1 << 18


def may_overwrite(t: torch.Tensor, *producers: nn.Module) -> bool:
    """Whether t, just produced by `producers`, is worth overwriting in place and may be.

    Yes when autograd does not track it (inference: no backward needs it), it is large enough for a new buffer to
    cost page faults, and no forward hook can have kept a reference to it (a hook that stores an output, e.g. for
    feature capture, must see the value it was given).
    """
    if torch.compiler.is_compiling():  # a traced graph reuses buffers itself; a size test would guard its batch
        return False
    if t.requires_grad or t.numel() < IN_PLACE_MIN_ELEMENTS or _global_forward_hooks:
        return False
    return not hooked(*producers)


def hooked(*modules: nn.Module) -> bool:
    """Whether a forward hook or pre-hook registered on any of these modules or their children may see what they
    take or produce (global hooks, as FlopCounterMode's module tracker registers, are not looked at)."""
    return any(m._forward_hooks or m._forward_pre_hooks for module in modules for m in module.modules())


def activate_in_place(act: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """act(h) written over h, for GELU and ReLU; any other activation is called as usual.

    Only for a tensor autograd does not track (inference): h is then a fresh buffer nobody else holds, and a large
    new output costs more than the activation itself on a CPU (a 77 MB GELU of ViT-B at batch 32: ~35 ms into a
    new buffer, ~9 ms in place, measured here), because fresh pages must be faulted in and zeroed.
    """
    kind = type(act)
    if kind is nn.GELU:
        return torch.ops.aten.gelu_(h, approximate=act.approximate)
    if kind is nn.ReLU:
        return h.relu_()
    return act(h)


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
        h = self.fc1(x)  # (B, N, hidden_features)
        h = activate_in_place(self.act, h) if may_overwrite(h, self.fc1, self.act) else self.act(h)
        return call_unless_noop(self.drop2, self.fc2(call_unless_noop(self.drop1, h)))
