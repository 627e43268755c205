"""Inference on a runtime: `load(run_or_file, backend)` gives a callable with the PyTorch model's own outputs.

    >>> from vitlab import runtime
    >>> classify = runtime.load("runs/vit", backend="openvino")   # or a .onnx / .xml / .pt2 from `vitlab export`
    >>> classify(images).shape                                    # images: a (B, C, H, W) tensor or numpy array
    (B, K)
    >>> classify.describe()
    'openvino 2026.4.1, fp32, CPU: 2 threads, pinned to cores'

Backends: `torch` (the model itself, the reference), `compile` (torch.compile), `onnxruntime` and `openvino` (the
extras `vitlab[onnx]` and `vitlab[openvino]`). A run's graph is exported on first use and kept in RUN/runtime/;
where a model's graph fixes a size (a ViT's image size, IPT's tile), a new size gets a graph of its own.
`Runtime.as_model()` is the torch model with that one method running on the runtime (a `RuntimeModule` around it,
wrapper.py): every task's eval, predict and serve code takes it in place of the model. On the torch and compile
backends the graph is the model's inference path (fast.py): the same outputs, computed with its speed tricks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..reading import reading
from .backends import (
    BACKENDS,
    PRECISIONS,
    CpuSettings,
    OnnxRuntimeBackend,
    OpenVinoBackend,
    TorchBackend,
    as_tensor,
    cpu_settings,
)
from .export import FORMATS, GRAPH_FORMAT, export_graph, export_model, read_metadata, require, run_cache
from .graphs import ExportError, Graph, check_backend, graph_for, pack
from .wrapper import RuntimeModule, runtime_module

__all__ = ["BACKENDS", "FORMATS", "PRECISIONS", "ExportError", "Runtime", "RuntimeModule", "export_model", "load",
           "runtime_model"]

FILE_BACKENDS = {".onnx": ("onnxruntime", "openvino"), ".xml": ("openvino",), ".pt2": ("torch", "compile")}


class Runtime:
    """A model (or an exported file) on one backend. Call it with the graph's inputs, tensors or numpy arrays:
    it returns what the PyTorch model returns (a tensor, DetectionOutput, SegmentationOutput), numpy arrays in it
    where the inputs were numpy. `named(...)` gives the outputs by their export names instead."""

    def __init__(self, backend: str, precision: str, settings: CpuSettings, kind: str,
                 input_names: tuple[str, ...], output_names: tuple[str, ...], model: nn.Module | None = None,
                 method: str = "forward", cache_dir: Path | None = None, cache_name: str = "model",
                 engine: Any = None, task: int | None = None, family: str | None = None,
                 record: dict[str, Any] | None = None, graph_meta: dict[str, Any] | None = None) -> None:
        self.backend, self.precision, self.settings = backend, precision, settings
        self.record = record or {}  # an exported file's vitlab record (export.metadata); empty for a model
        # what each graph made of the model records beside the family's own (its preprocessing: a run's, a file's)
        self.graph_meta = graph_meta or {}
        self.kind, self.family, self.input_names, self.output_names = kind, family, input_names, output_names
        self.model, self.method = model, method
        self.cache_dir, self.cache_name = cache_dir, cache_name
        self.file_task = task
        self._engines: dict[tuple, Any] = {}
        self._free: dict[int | None, tuple[dict[int, str], ...]] = {}
        self._building = threading.Lock()  # serve's workers may ask for the same new graph at once
        if engine is not None:
            self._engines[None] = engine
        self.first_call_s: float | None = None

    @property
    def labels(self) -> tuple[str, ...] | None:
        """The names of the model's classes (index -> name), from the exported file's record or the model's config;
        None where neither has them."""
        from ..models.family import family_config

        # a model's labels as its exported graphs record them (graphs.graph_for)
        labels = self.record.get("labels") if self.model is None else getattr(family_config(self.model), "labels", None)
        return tuple(labels) if labels else None

    @property
    def preprocessing(self) -> Any:
        """How an image is prepared for the model (data.preprocessing.Preprocessing), where the exported file
        records it (`vitlab export` of a run, a release or a weights file that knows it); None otherwise."""
        from ..data.preprocessing import Preprocessing

        recorded = self.record.get("preprocessing") or self.graph_meta.get("preprocessing")
        return Preprocessing.from_dict(recorded) if recorded else None

    # -- calling -------------------------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, task: int | str | None = None) -> Any:
        numpy_in = any(isinstance(x, np.ndarray) for x in inputs)
        outputs = self._run(list(inputs), task)
        if numpy_in:
            outputs = [o.numpy() for o in outputs]
        return pack(self.family, outputs)

    def named(self, *inputs: Any, task: int | str | None = None) -> dict[str, Any]:
        numpy_in = any(isinstance(x, np.ndarray) for x in inputs)
        outputs = self._run(list(inputs), task)
        return {name: o.numpy() if numpy_in else o for name, o in zip(self.output_names, outputs)}

    def _run(self, inputs: list[Any], task: int | str | None) -> list[torch.Tensor]:
        if not inputs or len(inputs) > len(self.input_names):
            raise ValueError(f"this {self.kind} takes {', '.join(self.input_names)}; got {len(inputs)} inputs")
        if "padding_mask" in self.input_names[1:2] and (len(inputs) == 1 or inputs[1] is None):  # none: no padding
            images = inputs[0]
            shape = (images.shape[0], *images.shape[-2:])
            inputs = [images, np.zeros(shape, bool) if isinstance(images, np.ndarray) else
                      torch.zeros(shape, dtype=torch.bool)]
        engine = self._engine_for(inputs, task)
        return engine(inputs)

    # -- engines, one per task and fixed size --------------------------------------------------------------------
    def _engine_for(self, inputs: list[Any], task: int | str | None) -> Any:
        if self.model is None:  # a file: one graph
            if task not in (None, self.file_task):
                raise ValueError(f"this file holds the graph of task {self.file_task}, not {task!r}; export the "
                                 f"run once per task (`vitlab export RUN --task NAME`)")
            return self._engines[None]
        index = self.model.task_index(0 if task is None else task)  # None: a model of one task
        free = self._free.get(index) or graph_for(self.model, task=index).dynamic
        key = (index, _fixed(inputs, free))
        if key in self._engines:
            return self._engines[key]
        with self._building:
            return self._engines.get(key) or self._add_engine(inputs, index)

    def _add_engine(self, inputs: list[Any], index: int | None) -> Any:
        start = time.perf_counter()
        # the callers (predict, serve) run under inference mode, which torch.export refuses; their inputs are
        # inference tensors, so the example is a fresh copy made outside it
        with torch.inference_mode(False):
            example = tuple(_batch_of_two(as_tensor(x)).clone() for x in inputs)
            graph = self._graph(example, index)
            declared, key = graph.dynamic, (index, _fixed(inputs, graph.dynamic))
            cached = self._cached(key)
            engine = self._build(graph, key)
            if _fixes_more(declared, graph.dynamic, inputs):
                # the graph fixes an axis its file's name leaves free, so that its file would answer for sizes it
                # was not made for: the file is dropped, and where it was a cached one (a vitlab before 2026-12
                # cached such a graph after a call at a size of 1) the graph is made again; where export itself
                # fixes the axis, the graph is kept in memory only
                self._forget(key)
                if cached:
                    graph = self._graph(example, index)
                    engine = self._build(graph, key)
                    if _fixes_more(declared, graph.dynamic, inputs):
                        self._forget(key)
        self.first_call_s = time.perf_counter() - start
        # export may have fixed axes the family leaves free: key by what stayed free, but for an axis fixed because
        # this call gave it at a size of 1, which other calls' graphs keep free (_fixed)
        self._free[index] = tuple({**kept, **{axis: name for axis, name in axes.items() if x.shape[axis] == 1}}
                                  for kept, axes, x in zip(graph.dynamic, declared, inputs))
        self._engines[(index, _fixed(inputs, self._free[index]))] = engine
        return engine

    def _graph(self, example: tuple[torch.Tensor, ...], index: int | None) -> Graph:
        graph = graph_for(self.model, example, index)
        graph.meta.update(self.graph_meta)  # the labels come with the model; its preprocessing from where it was read
        return graph

    def _build(self, graph: Graph, key: tuple) -> Any:
        if self.precision == "int8":
            return self._int8_engine(graph, key)
        if self.backend in ("torch", "compile"):
            return TorchBackend(graph.module, self.settings, self.precision, compile=self.backend == "compile",
                                free=graph.dynamic)
        if self.backend == "openvino":
            return OpenVinoBackend(str(self._fp32_openvino(graph, key)), self.settings, self.precision)
        return OnnxRuntimeBackend(str(self._fp32_onnx(graph, key)), self.settings, self.precision)

    def _fp32_openvino(self, graph: Graph, key: tuple) -> Path:
        """The graph's fp32 OpenVINO model (.xml and .bin) in the cache, converted if not there yet."""
        path = self._cache_path(key, ".xml")
        if path.is_file():  # converted by an earlier process
            _free_axes_from(path, graph)
            return path
        return export_graph(graph, path, "openvino")

    def _fp32_onnx(self, graph: Graph, key: tuple) -> Path:
        """The graph's fp32 ONNX file in the cache, exported if not there yet."""
        path = self._cache_path(key)
        if path.is_file():  # exported by an earlier process
            _free_axes_from(path, graph)
        else:
            export_graph(graph, path, "onnx")
        return path

    def int8_path(self, key: tuple) -> Path:
        """Where the int8 graph of `key` is kept: beside the fp32 one, `-int8.onnx` (onnxruntime) or `-int8.xml`."""
        return self._cache_path(key, "-int8.onnx" if self.backend == "onnxruntime" else "-int8.xml")

    def _int8_engine(self, graph: Graph, key: tuple) -> Any:
        """The int8 graph `vitlab quantize` wrote for `key` (calibrated on the run's data); where there is none,
        onnxruntime quantizes the graph dynamically (activations scaled per call), OpenVINO cannot."""
        from .quantize import quantize_graph

        path, made_now = self.int8_path(key), False
        if not path.is_file():
            if self.backend == "openvino":
                raise ValueError(f"no int8 graph at {path}: OpenVINO quantizes with calibration data only; run "
                                 f"`vitlab quantize RUN_DIR --backend openvino --weights WEIGHTS` first (it "
                                 f"calibrates on the run's validation data), or use --runtime onnxruntime")
            print(f"runtime: no calibrated int8 graph at {path}; quantizing dynamically (`vitlab quantize RUN_DIR "
                  f"--weights WEIGHTS` calibrates one on the run's validation data, for the weights in use)",
                  file=sys.stderr)
            quantize_graph(graph, path, "onnxruntime", None, fp32_onnx=self._fp32_onnx(graph, key))
            made_now = True
        record = read_metadata(path)
        if record.get("int8", {}).get("calibration") == "dynamic" and not made_now:  # an earlier call made it
            print(f"runtime: the int8 graph at {path} is quantized dynamically, as an earlier call made it (`vitlab "
                  f"quantize RUN_DIR --weights WEIGHTS` calibrates one in its place)", file=sys.stderr)
        _free_axes_from(path, graph, record)
        _warn_of_saturation(path, record)
        if self.backend == "onnxruntime":
            return OnnxRuntimeBackend(str(path), self.settings, "int8")
        return OpenVinoBackend(str(path), self.settings, "int8")

    CACHED_SUFFIXES = (".onnx", ".xml", ".bin", "-int8.onnx", "-int8.xml", "-int8.bin")  # a key's files, every runtime

    def _cached(self, key: tuple) -> bool:
        """Whether the cache holds a file of `key` already (made by an earlier call or process)."""
        return self.cache_dir is not None and any(self._cache_path(key, s).is_file() for s in self.CACHED_SUFFIXES)

    def _forget(self, key: tuple) -> None:
        """Remove the cached files of `key`, fp32 and int8, on every runtime."""
        if self.cache_dir is not None:
            for suffix in self.CACHED_SUFFIXES:
                self._cache_path(key, suffix).unlink(missing_ok=True)

    def _cache_path(self, key: tuple, suffix: str = ".onnx") -> Path:
        index, fixed = key
        parts = [self.cache_name] + ([f"task{index}"] if index is not None else [])
        parts += ["x".join(map(str, shape)) for shape in fixed if shape]
        if self.cache_dir is None:
            import tempfile

            self.cache_dir = Path(tempfile.mkdtemp(prefix="vitlab-runtime-"))
        return self.cache_dir / ("-".join(parts) + suffix)

    # -- the torch model with its graph's method on this runtime -------------------------------------------------
    def as_model(self) -> RuntimeModule:
        """The torch model with its graph's method (`forward`; a VQGAN: `decode`) running here: a RuntimeModule
        around it (wrapper.py), whose other attributes and methods are the model's and whose parameters are the
        model's own tensors. Its `runtime` says what runs it; the model itself is left as it was."""
        if self.model is None:
            raise ValueError("a runtime loaded from an exported file has no torch model around it; load the run "
                             "folder to use it in vitlab's eval, predict and serve")
        return runtime_module(self.model, self)

    def describe(self) -> str:
        engine = next(iter(self._engines.values()), None)
        version = engine.version() if engine is not None else _version(self.backend)
        return f"{version}, {self.precision}, CPU: {self.settings.describe()}"


def _fixed(inputs: list[Any], free: tuple[dict[int, str], ...]) -> tuple[tuple[int | str, ...], ...]:
    """The sizes of the axes a graph fixes, input by input: what tells one graph of a model from another. A free
    axis the call gives at a size of 1 counts as fixed, by name ("height1"): torch.export specializes a size of 1
    (the graph traced at it holds 1 for every size), so such a call gets a graph of its own. The batch never does:
    it is traced at two."""
    return tuple(tuple(s if axis not in axes else f"{axes[axis]}1" for axis, s in enumerate(x.shape)
                       if axis not in axes or (s == 1 and axes[axis] != "batch"))
                 for x, axes in zip(inputs, free))


def _fixes_more(declared: tuple[dict[int, str], ...], kept: tuple[dict[int, str], ...], inputs: list[Any]) -> bool:
    """Whether a graph fixes an axis the family leaves free (`declared`) at a size other than 1, which its file's
    name, made before export, does not say (_fixed)."""
    return any(axis not in still and x.shape[axis] != 1 for axes, still, x in zip(declared, kept, inputs)
               for axis in axes)


def _free_axes_from(path: Path, graph: Graph, record: dict[str, Any] | None = None) -> None:
    """Set `graph.dynamic` to the axes the file at `path` left free (its record says which)."""
    record = record if record is not None else read_metadata(path)
    graph.dynamic = tuple({int(k): v for k, v in d.items()} for d in record["dynamic"])


def _warn_of_saturation(path: Path, record: dict[str, Any]) -> None:
    """Say so where an int8 graph (`record`: its file's) was made for a CPU with VNNI and this one has none
    (quantize.saturation_risk)."""
    from .quantize import saturation_risk

    risk = saturation_risk(record, path)
    if risk:
        print(f"runtime: {risk}", file=sys.stderr)


def _batch_of_two(x: torch.Tensor) -> torch.Tensor:
    """An example batch of 2 from the call's inputs: 1 would fix the batch axis to 1; a large one lets torch's
    size-dependent kernels guard the batch from below (IPT at 8 tiles: batch >= 5)."""
    return x[:2].contiguous() if x.shape[0] >= 2 else x.expand(2, *x.shape[1:]).contiguous()


def _version(backend: str) -> str:
    if backend in ("torch", "compile"):
        return f"{backend} (torch {torch.__version__})"
    module = require(backend, f"the {backend} backend")
    return f"{backend} {module.__version__}"


def _check(backend: str, precision: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown runtime {backend!r}; choose one of {', '.join(BACKENDS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "bf16":
        from ..engine.speed import check_bf16

        check_bf16("cpu")
    if precision == "int8" and backend not in ("onnxruntime", "openvino"):
        raise ValueError(f"int8 runs on onnxruntime or openvino (their integer kernels), not {backend}; use "
                         f"--runtime onnxruntime or --runtime openvino")
    if backend in ("onnxruntime", "openvino"):
        require(backend, f"the {backend} runtime")


def runtime_model(model: nn.Module, backend: str = "torch", precision: str = "fp32", threads: int | None = None,
                  cache_dir: str | os.PathLike | None = None, cache_name: str | None = None,
                  preprocessing: dict[str, Any] | None = None) -> Runtime:
    """`model` (a vitlab model) on `backend`; graphs exported to `cache_dir` (default: a temporary folder), named
    `cache_name` (default: model-gN, N the GRAPH_FORMAT, so that a later vitlab that writes graphs otherwise does not
    reuse these). `preprocessing`: how an image is prepared for the model (a Preprocessing record), written into
    every graph beside its labels, so that a graph used alone answers as vitlab does."""
    _check(backend, precision)
    check_backend(model, backend)
    graph = graph_for(model)
    return Runtime(backend, precision, cpu_settings(threads, backend), graph.kind, graph.input_names,
                   graph.output_names, model=model.eval(), method=graph.method,
                   cache_dir=Path(cache_dir) if cache_dir else None,
                   cache_name=cache_name or f"model-g{GRAPH_FORMAT}", family=graph.family,
                   graph_meta={"preprocessing": preprocessing} if preprocessing else None)


def load(run_or_file: str | os.PathLike | nn.Module, backend: str | None = None, weights: str | None = None,
         precision: str | None = None, threads: int | None = None,
         cache_dir: str | os.PathLike | None = None) -> Runtime:
    """A run folder, a vitlab .safetensors file, a vitlab model, or a file from `vitlab export` or `vitlab quantize`
    (.onnx, .xml, .pt2) on `backend` (default: torch; for an exported file, the runtime it was written for).
    `weights`: a run's last, best or ema (default: the ones it selected, best where it kept them, else last).
    `precision`: fp32 (default), bf16, or int8 (a run's graphs from `vitlab quantize`, on onnxruntime or
    openvino); an exported file runs in the precision it was written in. `cache_dir`: where a model's or a
    .safetensors file's graphs (ONNX, OpenVINO) are kept (default: a temporary folder; a run keeps its own in
    RUN/runtime/). A graph found there is used as it is: give each set of weights a folder of its own."""
    if cache_dir is not None and not isinstance(run_or_file, nn.Module) and Path(run_or_file).suffix != ".safetensors":
        raise ValueError("cache_dir is for a model or a .safetensors file: a run keeps its graphs in RUN/runtime/, "
                         "and an exported file is a graph already")
    if isinstance(run_or_file, nn.Module):
        return runtime_model(run_or_file, backend or "torch", precision or "fp32", threads, cache_dir)
    path = Path(run_or_file)
    if path.is_dir():
        from ..engine.run import RunDir

        run = RunDir(path)
        weights = run.selected_weights(weights)
        model = run.load_model(weights)
        cache_dir, cache_name = run_cache(path, weights)
        recorded = run.read_config().get("data", {}).get("preprocessing")
        return runtime_model(model, backend or "torch", precision or "fp32", threads, cache_dir, cache_name,
                             recorded)
    if path.suffix == ".safetensors":
        from ..checkpoint import load_model, recorded_preprocessing

        return runtime_model(load_model(path).eval(), backend or "torch", precision or "fp32", threads, cache_dir,
                             preprocessing=recorded_preprocessing(path))
    if path.suffix not in FILE_BACKENDS:
        raise ValueError(f"{path}: expected a run folder, a .safetensors file, or a file from `vitlab export` "
                         f"({', '.join(FILE_BACKENDS)})")
    backend = backend or FILE_BACKENDS[path.suffix][0]
    if backend not in FILE_BACKENDS[path.suffix]:
        raise ValueError(f"a {path.suffix} file runs on {' or '.join(FILE_BACKENDS[path.suffix])}, not {backend}; "
                         f"export the run in another format (`vitlab export RUN --format ...`) or load the run")
    record = read_metadata(path)
    written = record.get("int8", {}).get("precision", "fp32")
    if precision is not None and (precision == "int8") != (written == "int8"):
        raise ValueError(f"{path} holds an {written} graph, not {precision}; load it without --precision, or make "
                         f"an int8 one with `vitlab quantize`")
    precision = precision or written
    _check(backend, precision)
    _warn_of_saturation(path, record)
    settings = cpu_settings(threads, backend)
    if backend == "onnxruntime":
        engine = OnnxRuntimeBackend(str(path), settings, precision)
    elif backend == "openvino":
        engine = OpenVinoBackend(str(path), settings, precision)
    else:
        with reading(path, "a torch.export program"):
            program = torch.export.load(str(path))
        engine = TorchBackend(program.module(), settings, precision, compile=backend == "compile")
    return Runtime(backend, precision, settings, record["kind"], tuple(record["inputs"]), tuple(record["outputs"]),
                   method=record["method"], engine=engine, task=record.get("task"), family=record.get("family"),
                   record=record)
