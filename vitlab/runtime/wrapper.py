"""Modules that stand in for a model: a method or two of their own, everything else the model's.

    ModelWrapper       the base: holds the model, reads every attribute it does not define from it
    RuntimeModule      the model with its graph's method (forward; a VQGAN's decode) on a runtime (`Runtime.as_model`)

The model is left as it was (no method is patched onto it or onto a copy of it), and the wrapper is an nn.Module
whose parameters are the model's own tensors, so that eval, predict and serve take it in place of the model.
"""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any

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
    """The model with its graph's method (`forward`; a VQGAN's `decode`: `runtime.method`) running on `runtime`;
    every other method is the model's own, reaching that one through the wrapper.

    A call is bound to the model's own signature of the method: its first parameters are the graph's inputs (in the
    graph's order: a detector's images and padding_mask), a `task` is the graph's task (a restorer's), and a call
    that asks for something the graph does not compute (any other argument given a value other than its default,
    such as IPT's return_tokens=True, whose tokens exist only in torch) runs the torch model itself. No table of
    kinds: the family's export spec says what the graph takes.
    """

    def __init__(self, model: nn.Module, runtime: Runtime) -> None:
        super().__init__(model)
        self.runtime = runtime
        self.graph_method = runtime.method
        # the method's own signature, read once: its first parameters (after self) are the graph's inputs
        self._signature = inspect.signature(getattr(type(model), runtime.method))
        self._graph_inputs = list(self._signature.parameters)[1:1 + len(runtime.input_names)]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.graph_method == "forward":
            return self.on_runtime(args, kwargs)
        return type(self.wrapped).forward(self, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name != "forward" and name == self.__dict__.get("graph_method"):
            return lambda *args, **kwargs: self.on_runtime(args, kwargs)
        return super().__getattr__(name)

    def on_runtime(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The graph's method called with (args, kwargs): on the runtime, where the graph computes what is asked."""
        arguments = self._signature.bind(self.wrapped, *args, **kwargs).arguments
        inputs = [arguments[name] for name in self._graph_inputs if name in arguments]
        others = [p for name, p in self._signature.parameters.items()
                  if name in arguments and name not in self._graph_inputs and name not in ("self", "task")]
        if any(_asks_for_more(arguments[p.name], p.default) for p in others):  # what only the torch model computes
            return getattr(self.wrapped, self.graph_method)(*args, **kwargs)
        return self.runtime(*inputs, task=arguments.get("task"))


def _asks_for_more(value: Any, default: Any) -> bool:
    """Whether an argument beyond the graph's inputs asks for something: given, and not None, False or its
    default (compared by value for plain Python values, by identity for anything else, such as a tensor)."""
    if value is None or value is False or value is default:
        return False
    return not (isinstance(value, int | float | str) and isinstance(default, int | float | str) and value == default)


def runtime_module(model: nn.Module, runtime: Runtime) -> RuntimeModule:
    """`model` with its graph's method on `runtime` (a Runtime, or anything with its `method`, `input_names` and
    call)."""
    return RuntimeModule(model, runtime)
