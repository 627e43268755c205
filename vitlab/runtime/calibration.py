"""Calibrating a model's int8 graphs on what it is called with: `calibration_recorder(model)` runs the model on
torch and keeps the first inputs each of its graphs gets; `write_int8(backend)` quantizes each graph on them
(quantize.py) and returns the int8 runtime."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from . import runtime_model
from .backends import as_numpy
from .graphs import Graph
from .quantize import DEFAULT_SAMPLES, quantize_graph


# -- a model's graphs, calibrated on what it is called with ---------------------------------------------------------
def calibration_recorder(model: nn.Module, rows: int = DEFAULT_SAMPLES, cache_dir: str | os.PathLike | None = None,
                         cache_name: str | None = None, preprocessing: dict[str, Any] | None = None
                         ) -> CalibrationRecorder:
    """`model` on torch, keeping the first `rows` inputs of each of its graphs that its calls reach (a restorer: one
    graph per task and tile size). Run the model's evaluation through `.as_model()`, then `write_int8`."""
    base = runtime_model(model, "torch", "fp32", None, cache_dir, cache_name, preprocessing)
    return CalibrationRecorder(base, rows)


class CalibrationRecorder:
    """A torch Runtime (`runtime`) whose engines keep the inputs they are called with, up to `rows` per graph; its
    model's outputs are the plain fp32 ones, so the pass that calibrates also scores the fp32 model."""

    def __init__(self, runtime: Any, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"--samples must be at least 1, got {rows}")
        self.runtime, self.rows = runtime, rows
        self.recorded: dict[tuple, tuple[Graph, list[tuple[np.ndarray, ...]]]] = {}
        build = runtime._build

        def recording_build(graph: Graph, key: tuple) -> Any:
            engine, batches = build(graph, key), []
            self.recorded[key] = (graph, batches)

            def run(inputs: Sequence[Any]) -> list[torch.Tensor]:
                wanted = self.rows - sum(len(batch[0]) for batch in batches)
                if wanted > 0:
                    batches.append(tuple(as_numpy(x)[:wanted].copy() for x in inputs))
                return engine(inputs)

            return run

        runtime._build = recording_build

    def as_model(self) -> nn.Module:
        return self.runtime.as_model()

    def write_int8(self, backend: str, keep_fp32: dict[str, str] | None = None, dynamic: bool = False
                   ) -> tuple[Any, list[dict[str, Any]]]:
        """An int8 Runtime of the model on `backend`, with a calibrated graph written to the cache for each graph
        recorded; and what was written for each (its path and the quantization record)."""
        if not self.recorded:
            raise ValueError("nothing was recorded to calibrate on: the evaluation never called the model")
        base = self.runtime
        int8 = runtime_model(base.model, backend, "int8", base.settings.threads, base.cache_dir, base.cache_name,
                             base.graph_meta.get("preprocessing"))
        written = []
        for key, (graph, batches) in self.recorded.items():
            path = int8.int8_path(key)
            # quantized from the fp32 graph beside it (written first where it is not there yet), not traced again
            fp32 = {"fp32_onnx": int8._fp32_onnx(graph, key)} if backend == "onnxruntime" else (
                {"fp32_openvino": int8._fp32_openvino(graph, key)} if backend == "openvino" else {})
            record = quantize_graph(graph, path, backend, None if dynamic else batches, keep_fp32, **fp32)
            written.append({"path": str(path), **record})
        return int8, written
