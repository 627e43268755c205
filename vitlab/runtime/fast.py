"""The inference path: a model's own computation with the tricks that make eager CPU inference faster, kept out of
layers/ and models/ (which read like the papers).

    fast = inference_model(model)      # the same parameters (shared tensors), the same outputs
    with torch.inference_mode():
        logits = fast(images)

What it does differently from the model's forward:

- **The last block computes only what the head reads.** A ViT-style classifier pooling its class token reads only
  the P prefix rows of the last block's output (eq. 4 takes z_L⁰), so that block makes those rows alone: every token
  still gives a key and a value, but only the prefix tokens ask queries and go through the output projection and
  the MLP. About 0.84/depth less work (ViT-B/16 at 224: 7 %), the same logits up to float rounding.
- **Inference writes into its own fresh buffers**: GELU (or ReLU) over fc1's output, and each residual sum into its
  branch's output, instead of new tensors: a large new tensor costs page faults on a CPU, which writing in place
  does not (benchmarks/inplace_inference.py measures it); below IN_PLACE_MIN_ELEMENTS a new tensor is cheap and
  the checks cost more. The block's input is never written: a caller may hold it.
- **Unused sub-layers are skipped rather than called**: nn.Identity (no layer scale, no drop path) and
  nn.Dropout(p=0) return their input, but each nn.Module call costs microseconds of Python, which shows at batch 1
  and on small models.

Each only where nobody can see the difference:

- autograd: nothing it tracks is overwritten (the in-place writes need a tensor without requires_grad); the lean
  last block is exact, gradients included, so it runs under autograd too;
- forward hooks: with a hook or pre-hook registered on any module of the model (or of this path), the call runs the
  model itself, so that every hook sees what it would see there. A global hook (register_module_forward_hook, as
  FlopCounterMode's module tracker) turns the in-place writes off and sees the lean last block's (B, P, D);
- tracing (torch.compile, torch.export, ONNX): no in-place writes (a traced graph reuses buffers itself, and the
  size test would guard the batch); the lean last block is traced, so every runtime's graph has it.

`inference_model` shares every parameter and buffer with the model (load_state_dict and .to() reach both) but is a
snapshot of its structure: a sub-module replaced in the model afterwards is not seen. The runtimes' graphs are
built on it (graphs.py), so `vitlab.runtime.load(..., backend="torch")` runs this path.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

# torch keeps the hooks registered for every module here; no public call says whether there are any
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from ..layers.blocks import EncoderBlock
from ..layers.mlp import Mlp
from ..models.vit import VisionTransformer
from .wrapper import ModelWrapper

# Below this many elements (1 MiB of fp32) a new tensor is cheap and checking whether it may be overwritten costs
# more than it saves (a small model at batch 1 is slower with the checks than without)
IN_PLACE_MIN_ELEMENTS = 1 << 18


def tracing() -> bool:
    """Whether torch.compile, torch.export, the ONNX exporter or the JIT tracer is recording this call."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def may_overwrite(t: torch.Tensor) -> bool:
    """Whether t, a fresh output of this path, is worth overwriting in place and may be: not while tracing (asked
    first: a size test would guard the traced batch), not what autograd tracks (a backward may need it), large
    enough for a new buffer to cost page faults, and no global forward hook can have kept it (module hooks make
    the whole call run the model instead: InferenceModel)."""
    if tracing() or t.requires_grad or t.numel() < IN_PLACE_MIN_ELEMENTS:
        return False
    return not (_global_forward_hooks or _global_forward_pre_hooks)


def noop(module: nn.Module) -> bool:
    """Whether module returns its input unchanged whatever it is given: an nn.Identity, or an nn.Dropout with
    p = 0 (an unused layer scale, drop path or dropout)."""
    kind = type(module)
    return kind is nn.Identity or (kind is nn.Dropout and module.p == 0)


def activate_in_place(act: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """act(h) written over h for GELU and ReLU; any other activation is called as usual."""
    kind = type(act)
    if kind is nn.GELU:
        return torch.ops.aten.gelu_(h, approximate=act.approximate)
    if kind is nn.ReLU:
        return h.relu_()
    return act(h)


class InferenceMlp(Mlp):
    """An Mlp's inference form, holding the same sub-modules (fc1, act, drop1, fc2, drop2): x (B, N, C_in) ->
    (B, N, C_out), with the activation written over fc1's output and unused dropouts skipped."""

    def __init__(self, mlp: Mlp) -> None:
        nn.Module.__init__(self)  # not Mlp.__init__, which would make new layers: these are the model's own
        for name, child in mlp.named_children():
            setattr(self, name, child)
        self.training = mlp.training  # its flag alone: train() would reset every shared sub-module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)  # (B, N, hidden): a fresh buffer nobody else holds
        h = activate_in_place(self.act, h) if may_overwrite(h) else self.act(h)
        if not noop(self.drop1):
            h = self.drop1(h)
        h = self.fc2(h)
        return h if noop(self.drop2) else self.drop2(h)


class InferenceBlock(EncoderBlock):
    """A pre-norm EncoderBlock's inference form, holding the same sub-modules (its MLP an InferenceMlp): the same
    signature and outputs as EncoderBlock.forward, with the residual sums written into the branches' outputs, and
    `forward_first`, the block for its first rows alone. forward_with_attn is EncoderBlock's."""

    def __init__(self, block: EncoderBlock) -> None:
        nn.Module.__init__(self)  # not EncoderBlock.__init__, which would make new layers: these are the model's own
        for name, child in block.named_children():
            setattr(self, name, InferenceMlp(child) if type(child) is Mlp else child)
        self.training = block.training  # its flag alone: train() would reset every shared sub-module

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None, pos: torch.Tensor | None = None,
                cache: Any = None) -> torch.Tensor:
        """x (B, N, D) -> (B, N, D); masks, pos and cache as in EncoderBlock.forward."""
        attended = self.self_attention(self.norm1(x), attn_mask, key_padding_mask, pos, cache=cache)
        x = self.add_residual(x, attended, self.ls1, self.drop_path1)
        return self.add_residual(x, self.mlp(self.norm2(x)), self.ls2, self.drop_path2)

    def forward_first(self, x: torch.Tensor, keep: int) -> torch.Tensor:
        """EncoderBlock.forward_first, x (B, N, D) -> (B, keep, D), with the residual sums in place where they may."""
        h = self.norm1(x)
        attended = self.attn(h[:, :keep], h)  # queries (B, keep, D) attend over keys and values from all N tokens
        x = self.add_residual(x[:, :keep], attended, self.ls1, self.drop_path1)  # (B, keep, D)
        return self.add_residual(x, self.mlp(self.norm2(x)), self.ls2, self.drop_path2)

    @staticmethod
    def add_residual(x: torch.Tensor, branch: torch.Tensor, scale: nn.Module, drop_path: nn.Module) -> torch.Tensor:
        """x + DropPath(LayerScale(branch)), x and branch (B, N, D), the scale and drop path skipped when unused.

        The sum goes into the branch's fresh output where it may (may_overwrite), never into x: a caller may hold x.
        """
        if not noop(scale):
            branch = scale(branch)
        if not noop(drop_path):
            branch = drop_path(branch)
        if branch.dtype == x.dtype and may_overwrite(branch):
            return branch.add_(x)
        return x + branch


def lean_classifier(model: nn.Module) -> bool:
    """Whether model is a VisionTransformer whose output reads only its last block's prefix rows
    (VisionTransformer.reads_prefix_only), so that its forward_lean gives its forward."""
    return isinstance(model, VisionTransformer) and model.reads_prefix_only


def with_fast_layers(module: nn.Module) -> nn.Module:
    """module with every EncoderBlock and Mlp in it (at any depth) in its inference form, or module itself when it
    holds none. A module on the way down is copied shallowly: the copy has the same parameters, buffers and hooks
    (the very dicts) and its own children, so the model is left as it was."""
    if type(module) is EncoderBlock:  # exact types: a subclass may compute something else
        return InferenceBlock(module)
    if type(module) is Mlp:
        return InferenceMlp(module)
    swapped = {}
    for name, child in module.named_children():
        fast = with_fast_layers(child)
        if fast is not child:
            swapped[name] = fast
    if not swapped:
        return module
    twin = copy.copy(module)
    twin._modules = dict(module._modules)  # its own children; nn.Module keeps them in this dict
    for name, fast in swapped.items():
        setattr(twin, name, fast)
    return twin


class InferenceModel(ModelWrapper):
    """`model` on the inference path (the module docstring): its forward runs `fast`, the model with its layers
    in their inference forms (and a ViT-style classifier's last block lean), or the model itself when a forward
    hook is registered anywhere in either. Every other attribute and method is the model's (ModelWrapper)."""

    def __init__(self, model: nn.Module, fast: nn.Module | None = None) -> None:
        super().__init__(model)
        self.fast = with_fast_layers(model) if fast is None else fast
        self.lean = lean_classifier(model)
        # each module's hook dicts, looked at on every call (a hook may be registered after this is built)
        modules = {id(m): m for tree in (model, self.fast) for m in tree.modules()}.values()
        self.hook_dicts = tuple({id(d): d for m in modules for d in (
            m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks)}.values())

    def hooked(self) -> bool:
        """Whether a hook is registered on any module of the model or of its inference form."""
        return any(self.hook_dicts)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not tracing() and self.hooked():  # a traced graph has what was registered when it was traced
            return self.wrapped(*args, **kwargs)
        if self.lean:
            return self.lean_forward(*args, **kwargs)
        return self.fast(*args, **kwargs)

    def lean_forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> logits: VisionTransformer.forward_lean on the inference forms of the layers (the
        last block's InferenceBlock.forward_first), the P prefix rows alone from the last block."""
        return self.fast.forward_lean(images)


def inference_model(model: nn.Module) -> nn.Module:
    """model on the inference path (the module docstring): an InferenceModel with the model's outputs, sharing its
    parameters; model itself when none of the path's layers is in it (a ResNet, a VQGAN), or when it is on the
    path already."""
    if isinstance(model, InferenceModel):
        return model
    fast = with_fast_layers(model)
    return model if fast is model else InferenceModel(model, fast)
