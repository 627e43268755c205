"""What of a model an inference runtime runs: a tensors-in, tensors-out graph with named inputs and outputs, its
dynamic axes, and how its outputs become the PyTorch model's own return value again.

Each family declares its graph (`model.export_spec()`, models/family.py) and how outputs pack back
(`config.pack_outputs`), what cannot be exported (`config.not_exportable`) and the backends that compute it wrongly
(`config.wrong_on`); this module knows no family. A graph's `method` is the model's method it stands in for
(`forward`, or `decode` for the VQGAN), so that a model whose method runs on a runtime keeps working everywhere the
torch model did (tiling, sampling, ...; wrapper.RuntimeModule). The graph computes it on the model's
inference path (fast.py): the same outputs, with a ViT's lean last block (in every runtime's graph) and, on the
torch backend, its in-place writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..models.family import Model, family_config
from .fast import inference_model


class ExportError(ValueError):
    """A model, or a use of it, that a runtime cannot run; the message says why and what to do instead."""


@dataclass
class Graph:
    """A family's graph: `module(*inputs)` returns the tensors named `output_names` (one: the tensor itself)."""

    kind: str
    module: nn.Module
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    example: tuple[torch.Tensor, ...]
    dynamic: tuple[dict[int, str], ...]  # per input: axis -> name of a free dimension
    method: str = "forward"
    task: int | None = None  # a multi-task model's task index (a restorer's head and tail)
    meta: dict[str, Any] = field(default_factory=dict)
    family: str | None = None
    onnx_fusion: dict[str, Any] | None = None

    def dynamic_shapes(self) -> tuple[dict[int, Any], ...]:
        """torch.export's spec: the batch a named free dimension, image axes AUTO (free if the model lets them be,
        with whatever divisibility it needs; `free_axes` of the traced program says what stayed free)."""
        batch = torch.export.Dim("batch", min=1, max=4096)
        return tuple({axis: batch if name == "batch" else torch.export.Dim.AUTO for axis, name in axes.items()}
                     for axes in self.dynamic)

    def keep_free(self, program: torch.export.ExportedProgram) -> None:
        """Narrow `dynamic` to the axes `program` kept free (torch.export fixes those the model's code fixes)."""
        placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
        users = placeholders[-len(self.input_names):]
        self.dynamic = tuple({axis: name for axis, name in axes.items()
                              if not isinstance(node.meta["val"].shape[axis], int)}
                             for node, axes in zip(users, self.dynamic))


class _Returns(nn.Module):
    """`fn(model, *inputs)` as a module of its own, so that export sees only tensors in and out; a single output
    is returned as itself, not as a 1-tuple (so a loaded .pt2 classifier returns its logits)."""

    def __init__(self, model: nn.Module, fn: Callable[..., tuple[torch.Tensor, ...]]) -> None:
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        outputs = self.fn(self.model, *inputs)
        return outputs[0] if len(outputs) == 1 else outputs


def config_of(model: nn.Module) -> Any:
    config = family_config(model)
    if config is None:
        raise ExportError(f"{type(model).__name__} is not a vitlab model (it has no family config); runtimes run the "
                          f"models `vitlab train` and `vitlab convert` write")
    return config


def family_of(model: nn.Module) -> str:
    return config_of(model).family


def check_backend(model: nn.Module, backend: str) -> None:
    """Refuse a family on a backend known to compute it wrongly."""
    config = config_of(model)
    why = config.wrong_on.get(backend)
    if why:
        raise ExportError(f"{config.family} does not run on {backend}: {why}")


def check_exportable(model: nn.Module) -> None:
    config = config_of(model)
    why = config.not_exportable
    if why:
        raise ExportError(f"{config.family} cannot be exported to one graph: {why}")
    if type(model).export_spec is Model.export_spec:
        raise ExportError(f"no runtime graph is defined for the {config.family} family (its model has no "
                          f"export_spec)")


def graph_for(model: nn.Module, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
              ) -> Graph:
    """The graph of `model` (in eval mode), traced at `example` (default: the model's own input size, batch 2).
    `task`: a multi-task model's task (name or index; default the first)."""
    check_exportable(model)
    model = model.eval()
    spec = model.export_spec(example, task)
    labels = config_of(model).labels  # written into every exported file's metadata: the names travel with the graph
    # what every backend runs: the model's outputs, computed the fast way
    return Graph(spec.kind, _Returns(inference_model(model), spec.outputs), spec.input_names, spec.output_names,
                 spec.example, spec.dynamic, spec.method, spec.task,
                 {**spec.meta, **({"labels": list(labels)} if labels else {})}, family_of(model), spec.onnx_fusion)


def pack(family: str | None, outputs: list[torch.Tensor]) -> Any:
    """A graph's outputs, in order -> what the PyTorch model (its graph's method) returns in eval mode, as the
    family packs them; a graph that names no family gives its first output (or all, as a tuple)."""
    if family is None:
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    from ..models.registry import config_type

    return config_type(family).pack_outputs(outputs)
