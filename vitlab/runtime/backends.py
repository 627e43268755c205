"""The engines a graph runs on. Each takes the graph's inputs as numpy arrays or torch tensors and returns its
outputs, in order, as torch tensors (CPU), so that the caller can rebuild the model's own return value.

    torch        the model eagerly, on its inference path (fast.py); the plain model is the reference every
                 backend, this one too, is held to
    compile      the graph under torch.compile (inductor, frozen weights)
    onnxruntime  an ONNX graph in an onnxruntime InferenceSession on the CPU
    openvino     an OpenVINO model compiled for the CPU
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .export import require

BACKENDS = ("torch", "onnxruntime", "openvino", "compile")
PRECISIONS = ("fp32", "bf16", "int8")  # int8: a quantized graph (quantize.py), on onnxruntime or openvino


@dataclass(frozen=True)
class CpuSettings:
    """What a backend is told about the CPU: `threads` for one inference, and whether its threads are pinned to
    cores (only OpenVINO can; elsewhere the OS schedules them)."""

    threads: int
    pinned: bool

    def describe(self) -> str:
        return f"{self.threads} thread{'s' if self.threads != 1 else ''}, " + \
            ("pinned to cores" if self.pinned else "not pinned")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, so a container's or taskset's limit counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_settings(threads: int | None = None, backend: str = "torch") -> CpuSettings:
    """One intra-op thread per usable core (more oversubscribes: measured slower on 2 cores), no inter-op
    parallelism (a ViT's graph is one chain); threads pinned to cores where the backend can pin."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return CpuSettings(threads or usable_cores(), pinned=backend == "openvino")


def as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.ascontiguousarray(x)


def as_tensor(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


class TorchBackend:
    """The torch module itself (eager or compiled), under inference mode, bf16 autocast if asked. A graph's module
    (graphs.py) is the model's inference path (fast.py); a loaded .pt2 program is run as it was exported."""

    def __init__(self, module: nn.Module, settings: CpuSettings, precision: str = "fp32",
                 compile: bool = False, free: Sequence[dict[int, str]] | None = None) -> None:
        """free: per input, the axes the graph leaves free (Graph.dynamic); compiled, they are traced as symbols
        from the first call (default: the batch of each input)."""
        torch.set_num_threads(settings.threads)
        with contextlib.suppress(NotImplementedError):  # an ExportedProgram's module is fixed in eval already
            module.eval()
        self.module = module
        self.precision = precision
        self.free = (tuple(free) if free is not None else None) if compile else ()  # see free_axes
        # frozen weights let inductor fold them into its kernels (inference only: nothing trains them); on only
        # while this module runs, which is when torch.compile (re)compiles it: see FrozenWeights
        self.frozen = FROZEN_WEIGHTS if compile else nullcontext()
        self.eager, self.shapes_seen = module, set()
        if compile:
            allow_recompiles()
            self.module = torch.compile(module)
        self.name = "compile" if compile else "torch"

    def __call__(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        autocast = torch.autocast("cpu", torch.bfloat16) if self.precision == "bf16" else nullcontext()
        tensors = [as_tensor(x) for x in inputs]
        if self.free != ():
            free = self.free or ({0: "batch"},) * len(tensors)
            tensors = [free_axes(t, axes) for t, axes in zip(tensors, free)]
        shapes = tuple(tuple(t.shape) for t in tensors)
        with torch.inference_mode(), autocast:
            if self.free != () and shapes not in self.shapes_seen:
                # a new size meets the model's input checks eagerly first: an error raised inside torch.compile's
                # tracing makes it skip the function for good, and every runtime's graph is the same function
                self.eager(*tensors)
                self.shapes_seen.add(shapes)
            with self.frozen:
                outputs = self.module(*tensors)
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else outputs
        return [o.float() for o in outputs]

    def version(self) -> str:
        return f"torch {torch.__version__}"


class FrozenWeights:
    """inductor's `freezing` on while any compiled runtime call runs, then back to what it was.

    torch.compile compiles lazily, inside a call (the first, and again for a new shape), and the flag must be on
    then for dynamo as well as for inductor: dynamo reads it while tracing to make the weights constants of the
    graph, guarded by identity, which inductor then folds and packs. A per-compile option
    (`torch.compile(options={"freezing": True})`) reaches inductor alone: the weights stay graph inputs, nothing is
    frozen, and the graph is reused for another model's weights. So the process-wide flag is set around the calls,
    counted, since serve's workers run calls at once: on from the first to enter, restored when the last leaves.
    Meanwhile, other code compiling in another thread sees it on too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._before = False

    def __enter__(self) -> None:
        import torch._inductor.config as inductor

        with self._lock:
            if not self._running:
                self._before, inductor.freezing = inductor.freezing, True
            self._running += 1

    def __exit__(self, *exc_info: Any) -> None:
        import torch._inductor.config as inductor

        with self._lock:
            self._running -= 1
            if not self._running:
                inductor.freezing = self._before


FROZEN_WEIGHTS = FrozenWeights()


# graphs torch.compile may keep per function: every runtime's graph is one function (graphs._Returns.forward), so
# torch's 8 were spent by a few models and sizes in one process (a server, the tests), after which it fell back to
# running each of its graphs' pieces apart
RECOMPILE_LIMIT = 64


def allow_recompiles() -> None:
    """Raise torch.compile's per-function graph limit to RECOMPILE_LIMIT (never lower it)."""
    import torch._dynamo.config as dynamo

    for name in ("recompile_limit", "cache_size_limit"):  # the name since torch 2.6, and before
        if isinstance(getattr(dynamo, name, None), int):
            setattr(dynamo, name, max(getattr(dynamo, name), RECOMPILE_LIMIT))


def free_axes(x: torch.Tensor, axes: dict[int, str]) -> torch.Tensor:
    """x as a new tensor object (the same memory) whose `axes` torch.compile keeps free from the first call on; the
    batch from 2 on (a batch of 1 is compiled as such). The marks stay on the alias: the caller's tensor would carry
    them into other compiled models.

    One compiled graph then serves every batch size, and inductor, which packs a linear layer's fp32 weight for
    MKL only when it knows the row count, hands the linear layers to oneDNN instead: 1.1-1.6x eager MKL on ViT
    layers at batch 32 on a 2-core AMD EPYC with AVX-512, within ±13 % of eager and packed MKL on one with AVX2
    only (`benchmarks/linear_kernels.py`). A detector's image axes are marked too: left to torch.compile's automatic
    dynamic shapes, most new sizes recompiled the graph, and Deformable DETR reached torch's recompile limit
    (`benchmarks/compile_sizes.py` measures what each size costs now).
    """
    marked = [axis for axis in axes if axis < x.ndim and (axis > 0 or x.shape[0] > 1)]
    if marked:
        x = x.view(x.shape)
        for axis in marked:
            torch._dynamo.maybe_mark_dynamic(x, axis)
    return x


class OnnxRuntimeBackend:
    """An ONNX file in an onnxruntime CPU session: all graph optimisations, sequential execution. An int8 file
    (quantize.py) runs as it is: the session fuses its quantize/dequantize pairs into integer kernels."""

    name = "onnxruntime"

    def __init__(self, path: str, settings: CpuSettings, precision: str = "fp32") -> None:
        ort = require("onnxruntime", "the onnxruntime backend")
        if precision == "bf16":
            raise ValueError("the onnxruntime backend runs fp32 or int8 (its CPU kernels have no bf16 attention); "
                             "use --runtime openvino or torch for bf16")
        options = ort.SessionOptions()
        options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._ort = ort

    def __call__(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        feed = {name: as_numpy(x) for name, x in zip(self.input_names, inputs)}
        return [torch.from_numpy(o) for o in self.session.run(None, feed)]

    def version(self) -> str:
        return f"onnxruntime {self._ort.__version__}"


class OpenVinoBackend:
    """An OpenVINO model (an .xml file, or one converted in memory) compiled for the CPU, latency-first: one
    stream using every thread, pinned."""

    name = "openvino"

    def __init__(self, model: Any, settings: CpuSettings, precision: str = "fp32") -> None:
        ov = require("openvino", "the openvino backend")
        core = ov.Core()
        if isinstance(model, (str, os.PathLike)):
            model = core.read_model(str(model))
        config = {"INFERENCE_NUM_THREADS": settings.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                  "ENABLE_CPU_PINNING": settings.pinned,
                  # an int8 model's quantized ops run in int8 whatever the hint; the rest in fp32
                  "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32"}
        self.compiled = core.compile_model(model, "CPU", config)
        self._local = threading.local()  # an infer request serves one thread at a time (serve's workers)
        self._ov = ov

    def __call__(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        results = request.infer([as_numpy(x) for x in inputs], share_inputs=True, share_outputs=False)
        return [torch.from_numpy(np.asarray(results[port])) for port in self.compiled.outputs]

    def version(self) -> str:
        return f"openvino {self._ov.__version__}"
