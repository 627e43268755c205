"""A model's graph (graphs.py) written for a runtime: ONNX (onnxruntime), OpenVINO IR (.xml + .bin) or a torch.export
ExportedProgram (.pt2). Each file carries what `vitlab.runtime.load` needs to give back the model's own outputs:
its kind, input and output names, and a restorer's task, as JSON under the key `vitlab`.

ONNX goes through torch's dynamo exporter; OpenVINO converts the ExportedProgram itself (no ONNX in between).
Graphs a family marks for it (ViT's, DeiT's) are then rewritten by onnxruntime's transformer optimizer, which
fuses attention, LayerNorm, GELU and bias additions into single kernels. Every file is written beside its target
and renamed over it, so a killed export leaves the old file or none.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .graphs import ExportError, Graph, graph_for

FORMATS = {"onnx": ".onnx", "openvino": ".xml", "exported-program": ".pt2"}
EXTRA_OF = {"onnx": "onnx", "onnxscript": "onnx", "onnxruntime": "onnx", "openvino": "openvino",
            "nncf": "int8"}


class MissingExtra(ImportError, ValueError):
    """An optional runtime that is not installed; the message names the extra that installs it."""


def require(module: str, why: str) -> Any:
    """import `module`, or say which of vitlab's extras installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        extra = EXTRA_OF.get(module.split(".")[0], "onnx")
        raise MissingExtra(f"{why} needs {module.split('.')[0]}, which is not installed: "
                          f"pip install 'vitlab[{extra}]'") from error


def metadata(graph: Graph) -> dict[str, Any]:
    return {"kind": graph.kind, "family": graph.family, "inputs": list(graph.input_names),
            "outputs": list(graph.output_names), "method": graph.method, "task": graph.task,
            "dynamic": [{str(k): v for k, v in d.items()} for d in graph.dynamic], **graph.meta}


def export_graph(graph: Graph, path: str | os.PathLike, fmt: str = "onnx", optimize: bool = True) -> Path:
    """Write `graph` to `path` in `fmt` (see FORMATS); `optimize`: run onnxruntime's transformer optimizer on a
    classifier's ONNX graph."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph.module.eval()
    if fmt == "onnx":
        _write_onnx(graph, path, optimize)
    elif fmt == "openvino":
        _write_openvino(graph, path)
    else:
        program = exported_program(graph)
        _replace(path, lambda tmp: torch.export.save(program, str(tmp),
                                                     extra_files={"vitlab.json": json.dumps(metadata(graph))}))
    return path


def run_cache(run_dir: str | os.PathLike, weights: str, source: str | os.PathLike | None = None
              ) -> tuple[Path, str]:
    """Where a run's runtime graphs are kept, and their name prefix: a new checkpoint gets new graphs. `source`:
    the file of weights from outside the run (a release's, in the hub cache), whose name is made a file name."""
    path = Path(source) if source is not None else Path(run_dir) / f"{weights}.safetensors"
    stamp = int(path.stat().st_mtime)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", weights) if source is not None else weights
    return Path(run_dir) / "runtime", f"{name}-{stamp}"


def export_model(model: nn.Module, path: str | os.PathLike, fmt: str = "onnx", task: int | str | None = None,
                 example: tuple[torch.Tensor, ...] | None = None, optimize: bool = True) -> Path:
    """Write `model` (its graph, graphs.py) to `path` in `fmt`; the batch (and where the model allows it, the image
    size) is left free."""
    return export_graph(graph_for(model, example, task), path, fmt, optimize)


def _replace(path: Path, write) -> None:
    """write(tmp) to a temporary path beside `path`, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def exported_program(graph: Graph) -> torch.export.ExportedProgram:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(graph.module, graph.example, dynamic_shapes=(graph.dynamic_shapes(),))
    except Exception as error:  # torch.export raises many types; all mean the same to a user
        raise ExportError(f"torch.export could not trace the {graph.kind} graph with free axes "
                          f"{graph.dynamic}: {type(error).__name__}: {str(error).splitlines()[0]}") from error
    graph.keep_free(program)
    return program


def _write_onnx(graph: Graph, path: Path, optimize: bool) -> None:
    require("onnxscript", "ONNX export")
    onnx = require("onnx", "ONNX export")
    program = exported_program(graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(program, graph.example, input_names=list(graph.input_names),
                                         output_names=list(graph.output_names), dynamo=True, verbose=False,
                                         optimize=True)
    proto = onnx_program.model_proto
    if optimize and graph.onnx_fusion:
        proto = _fuse_transformer(proto, graph.onnx_fusion)
    entry = proto.metadata_props.add()
    entry.key, entry.value = "vitlab", json.dumps(metadata(graph))
    # weights live inside the file up to protobuf's 2 GB; larger models (none of the presets) would need external data
    _replace(path, lambda tmp: onnx.save_model(proto, str(tmp)))


def _fuse_transformer(proto, fusion: dict[str, Any]):
    """onnxruntime's transformer optimizer on a graph the family says it knows (`fusion`: its model_type, num_heads
    and hidden_size): attention, LayerNorm, GELU and bias fused."""
    try:
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_by_fusion
    except ImportError:
        return proto  # the optimizer ships with onnxruntime; without it the graph stays as exported
    options = FusionOptions(fusion["model_type"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = optimize_by_fusion(proto, **fusion, optimization_options=options)
    return fused.model


def _write_openvino(graph: Graph, path: Path) -> None:
    ov = require("openvino", "OpenVINO export")
    if path.suffix != ".xml":
        raise ValueError(f"an OpenVINO model is an .xml file (with its .bin beside it), got {path}")
    program = exported_program(graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ov.convert_model(program)
    save_openvino(model, graph, path, metadata(graph))


def save_openvino(model: Any, graph: Graph, path: Path, record: dict[str, Any]) -> None:
    """An OpenVINO model to `path` (.xml, with its .bin beside it), its ports named as the graph's and `record`
    kept under `vitlab`; both files written beside their targets and renamed over them."""
    ov = require("openvino", "OpenVINO export")
    for port, name in zip(model.inputs, graph.input_names):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, graph.output_names):
        port.get_tensor().set_names({name})
    model.set_rt_info(json.dumps(record), ["vitlab"])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".xml")
    os.close(fd)
    tmp = Path(tmp)
    try:
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        os.replace(tmp.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_suffix(".bin")):
            if leftover.exists():
                leftover.unlink()


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The `vitlab` record of an exported file (ONNX, OpenVINO .xml or .pt2)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no exported model at {path}")
    if path.suffix == ".onnx":
        onnx = require("onnx", "reading an ONNX file")
        proto = onnx.load(str(path), load_external_data=False)
        record = {p.key: p.value for p in proto.metadata_props}.get("vitlab")
    elif path.suffix == ".xml":
        ov = require("openvino", "reading an OpenVINO model")
        model = ov.Core().read_model(str(path))
        record = model.get_rt_info(["vitlab"]).astype(str) if model.has_rt_info(["vitlab"]) else None
    elif path.suffix == ".pt2":
        extra = {"vitlab.json": ""}
        torch.export.load(str(path), extra_files=extra)
        record = extra["vitlab.json"] or None
    else:
        raise ValueError(f"{path} is not an exported model: expected .onnx, .xml (OpenVINO) or .pt2")
    if not record:
        raise ValueError(f"{path} was not written by `vitlab export` (it has no vitlab record); export the run "
                         f"with `vitlab export RUN --format ...`")
    return json.loads(record)
