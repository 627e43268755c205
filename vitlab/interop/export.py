"""Hand a trained model on to deployment: ONNX (checked with onnxruntime in the tests) or a torch.export
ExportedProgram, both with a dynamic batch axis. Input `images` (B, C, H, W) float, output `logits`."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

FORMATS = {"onnx": ".onnx", "exported-program": ".pt2"}


def example_input(model: nn.Module, batch: int = 2) -> torch.Tensor:
    H, W = model.patch_embed.img_size
    return torch.randn(batch, model.config.in_chans, H, W)


def export_model(model: nn.Module, path: str | os.PathLike, fmt: str = "onnx") -> Path:
    """Write `model` (eval mode) to `path` in `fmt`; the batch size is left free."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    images = example_input(model)
    dynamic = {"images": {0: torch.export.Dim("batch", min=1, max=4096)}}
    if fmt == "onnx":
        try:
            import onnxscript  # noqa: F401  (the exporter needs it)
        except ImportError as error:
            raise ValueError("ONNX export needs onnx and onnxscript: pip install 'vitlab[export]'") from error
        torch.onnx.export(model, (images,), str(path), input_names=["images"], output_names=["logits"],
                          dynamic_shapes=dynamic, dynamo=True, verbose=False)
    else:
        program = torch.export.export(model, (images,), dynamic_shapes={"images": dynamic["images"]})
        torch.export.save(program, str(path))
    return path
