"""What of each model family an inference runtime runs: a tensors-in, tensors-out graph with named inputs and
outputs, its dynamic axes, and how its outputs become the PyTorch model's own return value again.

    classifier (vit, deit, resnet)   images (B, C, H, W)                      -> logits (B, K)
    detector (detr, deformable_detr) images (B, 3, H, W), padding_mask (B, H, W) -> logits (B, N, K[+1]),
                                                                                  pred_boxes (B, N, 4)
    segmenter (setr)                 images (B, 3, H, W)                      -> logits (B, K, H, W)
    restorer (ipt, edsr)             images (B, 3, S, S), one graph per task  -> restored (B, 3, S·s, S·s)
    vqgan decoder (vqgan)            codes (B, D, h, w)                       -> images (B, C, h·f, w·f)

A graph's `method` is the model's method it stands in for (`forward`, or `decode` for the VQGAN), so that a model
whose method runs on a runtime (wrapper.RuntimeModule) keeps working everywhere the torch model did (tiling,
sampling, ...). The graph computes it on the model's inference path (fast.py): the same outputs, with a ViT's lean
last block (in every runtime's graph) and, on the torch backend, its in-place writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .fast import inference_model

KINDS = {"vit": "classifier", "deit": "classifier", "resnet": "classifier", "detr": "detector",
         "deformable_detr": "detector", "setr": "segmenter", "ipt": "restorer", "edsr": "restorer",
         "vqgan": "vqgan-decoder"}
NOT_EXPORTABLE = {
    "gpt_prior": "the prior samples one token at a time in a Python loop with a key-value cache; export its VQGAN "
                 "run instead (the decoder that turns the sampled codes into images)",
    "seq2seq": "beam search and greedy decoding are Python loops over one-token steps, not one graph",
}
# Pairs measured to give wrong answers, refused rather than run: (family, backend) -> why
WRONG_ON = {
    ("deformable_detr", "openvino"): "OpenVINO 2026.4's CPU plugin computes multi-scale deformable attention "
                                     "wrongly (logits off by 2.3 from torch's at 96×128, NaN at 128×96, whether "
                                     "converted from torch or from ONNX); run it on onnxruntime, compile or torch",
}


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
    task: int | None = None  # a restorer's task index (its head and tail)
    meta: dict[str, Any] = field(default_factory=dict)

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


def family_of(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    family = getattr(config, "family", None)
    if family is None:
        raise ExportError(f"{type(model).__name__} is not a vitlab model (it has no config.family); runtimes run "
                          f"the models `vitlab train` and `vitlab convert` write")
    return family


def check_backend(model: nn.Module, backend: str) -> None:
    """Refuse a family on a backend known to compute it wrongly."""
    why = WRONG_ON.get((family_of(model), backend))
    if why:
        raise ExportError(f"{family_of(model)} does not run on {backend}: {why}")


def kind_of(model: nn.Module) -> str:
    family = family_of(model)
    if family in NOT_EXPORTABLE:
        raise ExportError(f"{family} cannot be exported to one graph: {NOT_EXPORTABLE[family]}")
    if family not in KINDS:
        raise ExportError(f"no runtime graph is defined for the {family} family")
    return KINDS[family]


def graph_for(model: nn.Module, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
              ) -> Graph:
    """The graph of `model` (in eval mode), traced at `example` (default: the model's own input size, batch 2).
    `task`: a restorer's degradation (name or index; default the first)."""
    kind = kind_of(model)
    model = model.eval()
    fast = inference_model(model)  # what every backend runs: the model's outputs, computed the fast way
    if kind == "classifier":
        example = example or (torch.randn(2, model.config.in_chans, *_image_size(model)),)
        spatial = {2: "height", 3: "width"} if family_of(model) == "resnet" else {}
        return Graph(kind, _Returns(fast, lambda m, x: (m(x),)), ("images",), ("logits",), example,
                     ({0: "batch", **spatial},))
    if kind == "detector":
        if example is None:
            size = model.config.img_size if hasattr(model.config, "img_size") else 128
            example = (torch.randn(2, 3, size, size),)
        if len(example) == 1:
            images = example[0]
            example = (images, torch.zeros(images.shape[0], *images.shape[-2:], dtype=torch.bool))

        def detect(m: nn.Module, images: torch.Tensor, padding_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = m(images, padding_mask)
            return out.logits, out.pred_boxes

        free = {0: "batch", 2: "height", 3: "width"}
        return Graph(kind, _Returns(fast, detect), ("images", "padding_mask"), ("logits", "pred_boxes"), example,
                     (free, {0: "batch", 1: "height", 2: "width"}))
    if kind == "segmenter":
        example = example or (torch.randn(2, 3, *_image_size(model.backbone)),)
        return Graph(kind, _Returns(fast, lambda m, x: (m(x).logits,)), ("images",), ("logits",), example,
                     ({0: "batch"},))
    if kind == "restorer":
        index = model.task_index(0 if task is None else task)
        if example is None:
            size = getattr(model, "patch_size", 48)
            example = (torch.rand(2, 3, size, size),)
        # IPT's body cuts a fixed-size input into a fixed token grid; EDSR is convolutional throughout
        free = {0: "batch"} if family_of(model) == "ipt" else {0: "batch", 2: "height", 3: "width"}
        return Graph(kind, _Returns(fast, lambda m, x: (m(x, index),)), ("images",), ("restored",), example,
                     (free,), task=index, meta={"degradation": model.degradations[index]})
    # the VQGAN decoder: what turns codes (sampled by a prior, or quantised by the encoder) into images
    c = model.config
    if example is None:
        side = c.resolution // model.downsample_factor
        example = (torch.randn(2, c.embed_dim, side, side),)
    return Graph(kind, _Returns(fast, lambda m, z: (m.decode(z),)), ("codes",), ("images",), example,
                 ({0: "batch", 2: "height", 3: "width"},), method="decode")


def _image_size(vit: nn.Module) -> tuple[int, int]:
    patch_embed = getattr(vit, "patch_embed", None)
    if patch_embed is not None:
        return tuple(patch_embed.img_size)
    side = getattr(vit.config, "img_size", 28)
    return (side, side) if isinstance(side, int) else tuple(side)


def pack(kind: str, outputs: list[torch.Tensor]) -> Any:
    """A graph's outputs, in order -> what the PyTorch model (its graph's method) returns in eval mode."""
    if kind == "detector":
        from ..models.detr import DetectionOutput

        return DetectionOutput(outputs[0], outputs[1])
    if kind == "segmenter":
        from ..models.setr import SegmentationOutput

        return SegmentationOutput(outputs[0], [])
    return outputs[0]
