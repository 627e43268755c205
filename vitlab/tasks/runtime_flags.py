"""`--runtime`, `--precision` and `--threads`: the inference runtime a command's model runs on (vitlab.runtime), for
the generic commands (cli/) and a task's own."""

from __future__ import annotations

import argparse
import sys

from torch import nn

RUNTIMES = ("torch", "onnxruntime", "openvino", "compile")


def add_runtime_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default="torch", help="run the model on torch (eager), "
                   "onnxruntime or openvino (the extras vitlab[onnx], vitlab[openvino]; the graph is exported to "
                   "RUN_DIR/runtime/ on first use), or under torch.compile (default: torch)")
    p.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32", help="bf16 where the CPU has "
                   "native bf16: torch autocast, OpenVINO's bf16 inference precision; int8 on onnxruntime or openvino: "
                   "the graphs `vitlab quantize RUN_DIR` calibrated (onnxruntime without them: quantized dynamically) "
                   "(default: fp32)")
    p.add_argument("--threads", type=int, help="intra-op threads of the runtime (default: one per usable core)")


def on_runtime(model: nn.Module, args: argparse.Namespace, source, threads: int | None = None) -> nn.Module:
    """For the default (torch, fp32) the model on its inference path (runtime/fast.py: the same parameters and
    outputs, faster on a CPU), else the model with its forward on the runtime asked for, its graphs kept where the
    source (tasks/sources.py's Source: a run, a named model) keeps them; what the runtime chose is said on stderr."""
    if args.runtime == "torch" and args.precision == "fp32" and args.threads is None:
        from ..runtime.fast import inference_model

        return inference_model(model)
    from ..runtime import runtime_model

    cache_dir, cache_name = source.runtime_cache
    runtime = runtime_model(model, args.runtime, args.precision, args.threads or threads, cache_dir, cache_name,
                            source.saved.get("data", {}).get("preprocessing"))
    print(f"runtime: {runtime.describe()}", file=sys.stderr)
    return runtime.as_model()
