"""Modules that stand in for a model: a method or two of their own, everything else the model's.

    ModelWrapper       the base: holds the model, reads every attribute it does not define from it
    RuntimeModule      the model with its graph's method (forward; a VQGAN's decode) on a runtime (`Runtime.as_model`)

The model is left as it was (no method is patched onto it or onto a copy of it), and the wrapper is an nn.Module
whose parameters are the model's own tensors, so that eval, predict and serve take it in place of the model.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from . import Runtime


class ModelWrapper(nn.Module):
    """Stands in for `model`, held as the child `wrapped` (so the wrapper's parameters are the model's).

    An attribute the wrapper's class does not define is read from the model. A method of the model's class comes
    bound to the wrapper, so that the model's own code reaches the wrapper's methods: IPT's `forward_chop` calls
    `self(tiles, task)` tile by tile, and through a RuntimeModule each tile runs on the runtime. Two exceptions:
    a method that calls `super()` is bound to the model (a wrapper is no instance of the class `super()` needs),
    and what nn.Module itself defines (`parameters`, `eval`, `to`, ...) is the wrapper's own, acting on the model
    as a child. Attributes set on the wrapper stay on the wrapper.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.wrapped = model
        self.training = model.training  # its flag alone: train() would set every sub-module of the model

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # the wrapper's own children (`wrapped`), parameters and buffers
        except AttributeError:
            pass
        modules = self.__dict__.get("_modules")
        if not modules or "wrapped" not in modules:  # not built yet (unpickling, __init__): nothing to read from
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        model = modules["wrapped"]
        method = _plain_method(type(model), name)
        if method is not None and name not in model.__dict__:
            uses_super = "__class__" in method.__code__.co_freevars  # the cell zero-argument super() reads
            return types.MethodType(method, model if uses_super else self)
        return getattr(model, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.wrapped)))


def _plain_method(cls: type, name: str) -> types.FunctionType | None:
    """The function `name` of `cls` (looked up along its MRO), if it is a plain method, not a static or class
    method, a property or data; nn.Module's own methods are left out (the wrapper has them itself)."""
    for klass in cls.__mro__:
        if klass is nn.Module:
            return None
        if name in vars(klass):
            attr = vars(klass)[name]
            return attr if isinstance(attr, types.FunctionType) else None
    return None


class RuntimeModule(ModelWrapper):
    """A model whose forward runs on `runtime`: the graph's inputs (a classifier's or segmenter's images
    (B, C, H, W)) -> what the model returns.

    `runtime` says what runs it. The subclasses below take the other kinds' graph methods; `runtime_module`
    picks one by the graph's kind.
    """

    def __init__(self, model: nn.Module, runtime: Runtime) -> None:
        super().__init__(model)
        self.runtime = runtime

    def forward(self, *inputs: Any) -> Any:
        return self.runtime(*inputs)


class RuntimeDetector(RuntimeModule):
    """A detector: images (B, 3, H, W) and an optional padding_mask (B, H, W) -> DetectionOutput, on the runtime."""

    def forward(self, images: Any, padding_mask: Any = None) -> Any:
        return self.runtime(images, padding_mask)


class RuntimeRestorer(RuntimeModule):
    """A restorer (IPT, EDSR): images (B, 3, S, S) and a task -> restored images, on the task's graph.

    The body's tokens (`return_tokens=True`, for the attention pictures) exist only in torch: that call runs the
    torch model itself.
    """

    def forward(self, x: Any, task: int | str = 0, return_tokens: bool = False) -> Any:
        if return_tokens:
            return self.wrapped(x, task, return_tokens=True)
        return self.runtime(x, task=task)


class RuntimeDecoder(RuntimeModule):
    """A VQGAN whose decoder runs on the runtime: `decode(codes)` there; `forward` (encode, quantise, decode) and
    `decode_indices` are the model's own, reaching `decode` through the wrapper."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return type(self.wrapped).forward(self, *args, **kwargs)

    def decode(self, z_q: torch.Tensor) -> torch.Tensor:
        return self.runtime(z_q)


RUNTIME_MODULES = {"detector": RuntimeDetector, "restorer": RuntimeRestorer, "vqgan-decoder": RuntimeDecoder}


def runtime_module(model: nn.Module, runtime: Runtime) -> RuntimeModule:
    """`model` with its graph's method on `runtime`: the wrapper for the graph's kind; a forward that takes the
    graph's inputs for any other kind (classifier, segmenter)."""
    return RUNTIME_MODULES.get(runtime.kind, RuntimeModule)(model, runtime)
