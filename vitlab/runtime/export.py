"""A model's graph (graphs.py) written for a runtime: ONNX (onnxruntime), OpenVINO IR (.xml + .bin) or a torch.export
ExportedProgram (.pt2). Each file carries what `vitlab.runtime.load` needs to give back the model's own outputs:
its kind, input and output names, and a restorer's task, as JSON under the key `vitlab`.

ONNX goes through torch's dynamo exporter; OpenVINO converts the ExportedProgram itself (no ONNX in between).
Graphs a family marks for it (ViT's, DeiT's) are then rewritten for onnxruntime's CPU kernels: its transformer
optimizer fuses GELU with its bias, and each self-attention the exporter wrote out as reshapes, transposes, two
products and a softmax becomes one `MultiHeadAttention` (`_one_op_attention`, checked against the graph it
replaces). The residual sum and LayerNorm stay two ops: onnxruntime's fused SkipLayerNormalization took 4.6× as
long as the pair on a ViT-S/16 block's tokens (AVX2 EPYC, onnxruntime 1.32). Every file is written beside its
target and renamed over it, so a killed export leaves the old file or none.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..atomic import replacing, user_file_mode
from ..checkpoint import WEIGHT_FILE_SUFFIXES
from ..reading import damaged, reading
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


# The form of the graphs export_graph writes, in the names of the graphs a run caches: a vitlab that writes them
# differently exports them again instead of reusing the older form. Version 2: a ViT's attention in one
# MultiHeadAttention op, no SkipLayerNormalization. Version 3: Deformable DETR's level shapes computed in the graph
# from its maps (version 2 held the export size's as constants, and answered wrongly at every other size). Version 4:
# Deformable DETR samples each level with one GridSample (version 3 gathered every sample's four corners).
GRAPH_FORMAT = 4


def run_cache(run_dir: str | os.PathLike, weights: str, source: str | os.PathLike | None = None
              ) -> tuple[Path, str]:
    """Where a run's runtime graphs are kept, and their name prefix: a new checkpoint, or a new GRAPH_FORMAT, gets
    new graphs. `source`: the file of weights from outside the run (a release's, in the hub cache), whose name is
    made a file name; or a model's folder, stamped by its newest weights or config file (weights replaced inside a
    folder leave the folder's own time as it was; its other files, a clone's .git, a run's metrics, do not count)."""
    path = Path(source) if source is not None else Path(run_dir) / f"{weights}.safetensors"
    files = [p for p in path.iterdir() if p.is_file() and (p.suffix in WEIGHT_FILE_SUFFIXES or p.name.endswith(
        "config.json"))] if path.is_dir() else [path]
    stamp = int(max((p.stat().st_mtime for p in files), default=path.stat().st_mtime))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", weights) if source is not None else weights
    return Path(run_dir) / "runtime", f"{name}-{stamp}-g{GRAPH_FORMAT}"


def export_model(model: nn.Module, path: str | os.PathLike, fmt: str = "onnx", task: int | str | None = None,
                 example: tuple[torch.Tensor, ...] | None = None, optimize: bool = True) -> Path:
    """Write `model` (its graph, graphs.py) to `path` in `fmt`; the batch (and where the model allows it, the image
    size) is left free."""
    return export_graph(graph_for(model, example, task), path, fmt, optimize)


def _replace(path: Path, write) -> None:
    """write(tmp) to a temporary path beside `path`, then rename it over `path`."""
    with replacing(path, suffix=path.suffix) as tmp:
        write(tmp)


def exported_program(graph: Graph) -> torch.export.ExportedProgram:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(graph.module, graph.example, dynamic_shapes=(graph.dynamic_shapes(),))
    except Exception as error:  # torch.export raises many types; all mean the same to a user
        refusal = _models_refusal(error)
        if refusal is not None:  # the model refuses the example itself (a size its grid or tile does not take)
            raise ExportError(f"the {graph.kind} refuses this input: {refusal}") from error
        raise ExportError(f"torch.export could not trace the {graph.kind} graph with free axes "
                          f"{graph.dynamic}: {type(error).__name__}: {str(error).splitlines()[0]}") from error
    graph.keep_free(program)
    return program


def _models_refusal(error: BaseException) -> str | None:
    """The message of a ValueError that vitlab's model code raised while being traced (its input checks), found
    among the causes torch.export wraps it in; None where the trace failed for another reason."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ValueError) and (type(error) is ValueError or type(error).__module__.startswith("vitlab")):
            return str(error)
        error = error.__cause__ or error.__context__
    return None


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
        proto = _one_op_attention(proto, graph.onnx_fusion["num_heads"], graph)
    entry = proto.metadata_props.add()
    entry.key, entry.value = "vitlab", json.dumps(metadata(graph))
    # weights live inside the file up to protobuf's 2 GB; larger models (none of the presets) would need external data
    _replace(path, lambda tmp: onnx.save_model(proto, str(tmp)))


def _fuse_transformer(proto, fusion: dict[str, Any], skip_layer_norm: bool = False):
    """onnxruntime's transformer optimizer on a graph the family says it knows (`fusion`: its model_type, num_heads
    and hidden_size): GELU fused with its bias; the residual sum with LayerNorm only with `skip_layer_norm`. Its
    attention fusion does not match the exporter's graph of a fused qkv projection: `_one_op_attention` does that."""
    try:
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_by_fusion
    except ImportError:
        return proto  # the optimizer ships with onnxruntime; without it the graph stays as exported
    options = FusionOptions(fusion["model_type"])
    # off by default: slower on CPU (module docstring; benchmarks/onnx_fusions.py measures both)
    options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = skip_layer_norm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = optimize_by_fusion(proto, **fusion, optimization_options=options)
    return fused.model


def _one_op_attention(proto, num_heads: int, graph: Graph):
    """Each self-attention of `proto` in one com.microsoft `MultiHeadAttention` node, where the exporter wrote
    `scaled_dot_product_attention` of a fused `qkv` projection out in full:

        x (B, N, 3D) -> Reshape (B, N, 3, H, d) -> Transpose (3, B, H, N, d) -> q, k, v -> [scale, Kᵀ] -> MatMul
          -> Softmax -> MatMul with v -> Transpose (B, N, H, d) -> Reshape (B, N, D)
    becomes
        x -> Split into q, k, v (B, N, D) each -> MultiHeadAttention(q, k, v[, the qkv bias]) -> (B, N, D)

    The kernel scales by 1/√d and takes no mask, so the rewrite is kept only if the new graph gives the old one's
    outputs on the graph's example inputs (to 1e-4); otherwise the graph stays as it was, with a warning."""
    from onnx import helper, numpy_helper

    nodes = list(proto.graph.node)
    made_by = {output: node for node in nodes for output in node.output}
    readers: dict[str, list] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    constants = {init.name: init for init in proto.graph.initializer}

    def perm(node) -> list[int] | None:
        return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)

    def only_reader(name: str, op_type: str):
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def softmax_after(start, steps: int = 16):
        frontier, seen = [start], set()
        while frontier and steps > 0:
            node = frontier.pop(0)
            steps -= 1
            for output in node.output:
                for reader in readers.get(output, []):
                    if reader.op_type == "Softmax":
                        return reader
                    if reader.name not in seen:
                        seen.add(reader.name)
                        frontier.append(reader)
        return None

    replacements = {}  # the final Reshape of an attention -> the nodes that replace the whole attention
    for node in nodes:
        shape_node = made_by.get(node.input[0]) if node.op_type == "Transpose" else None
        if perm(node) != [2, 0, 3, 1, 4] or shape_node is None or shape_node.op_type != "Reshape":
            continue
        softmax = softmax_after(node)
        weighted = softmax and only_reader(softmax.output[0], "MatMul")
        heads_back = weighted and only_reader(weighted.output[0], "Transpose")
        merged = heads_back and perm(heads_back) == [0, 2, 1, 3] and only_reader(heads_back.output[0], "Reshape")
        if not merged:
            continue
        qkv = shape_node.input[0]
        producer = made_by.get(qkv)
        bias = (producer.input[1] if producer is not None and producer.op_type == "Add"
                and producer.input[1] in constants and len(constants[producer.input[1]].dims) == 1 else None)
        source = producer.input[0] if bias else qkv
        projection = made_by.get(source)
        is_product = projection is not None and projection.op_type == "MatMul"
        weight = constants.get(projection.input[1]) if is_product else None
        if weight is None or len(weight.dims) != 2 or weight.dims[1] % 3:
            continue
        q, k, v = (f"{node.name}/{part}" for part in "qkv")
        sizes = f"{node.name}/split_sizes"
        split = helper.make_node("Split", [source, sizes], [q, k, v], name=f"{node.name}/Split", axis=-1)
        attention = helper.make_node("MultiHeadAttention", [q, k, v] + ([bias] if bias else []), [merged.output[0]],
                                     name=f"{node.name}/MultiHeadAttention", domain="com.microsoft",
                                     num_heads=num_heads)
        extra = [numpy_helper.from_array(np.full(3, weight.dims[1] // 3, np.int64), sizes)]
        replacements[merged.name] = ([split, attention], extra)
    if not replacements:
        return proto
    rewritten = type(proto)()
    rewritten.CopyFrom(proto)
    graph_proto = rewritten.graph
    kept = []
    for node in graph_proto.node:
        kept += replacements[node.name][0] if node.name in replacements else [node]
    for _, extra in replacements.values():
        graph_proto.initializer.extend(extra)
    outputs = {output.name for output in graph_proto.output}
    while True:  # drop what only the old attention read
        used = {name for node in kept for name in node.input} | outputs
        alive = [node for node in kept if any(output in used for output in node.output if output)]
        if len(alive) == len(kept):
            break
        kept = alive
    del graph_proto.node[:]
    graph_proto.node.extend(kept)
    used = {name for node in kept for name in node.input}
    alive_constants = [init for init in graph_proto.initializer if init.name in used]
    del graph_proto.initializer[:]
    graph_proto.initializer.extend(alive_constants)
    if not any(entry.domain == "com.microsoft" for entry in rewritten.opset_import):
        rewritten.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    if not _same_outputs(proto, rewritten, graph):
        warnings.warn("the one-op attention rewrite changed this graph's outputs; the graph is kept as exported",
                      stacklevel=3)
        return proto
    return rewritten


def _same_outputs(before, after, graph: Graph, tolerance: float = 1e-4) -> bool:
    """Whether two ONNX graphs give the same outputs on the graph's example inputs (onnxruntime, CPU)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    feed = {name: x.detach().cpu().numpy() for name, x in zip(graph.input_names, graph.example)}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        outputs = [ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
                   .run(None, feed) for proto in (before, after)]
    except Exception:  # noqa: BLE001 -- onnxruntime refuses the new graph: keep the old one
        return False
    return all(a.shape == b.shape and np.abs(a - b).max(initial=0.0) <= tolerance * (1 + np.abs(a).max(initial=0.0))
               for a, b in zip(*outputs))


def _write_openvino(graph: Graph, path: Path) -> None:
    ov = require("openvino", "OpenVINO export")
    if path.suffix != ".xml":
        raise ValueError(f"an OpenVINO model is an .xml file (with its .bin beside it), got {path}")
    program = exported_program(graph)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ov.convert_model(program)
    except Exception as error:  # OpenVINO's converter raises its own types, and RuntimeError
        raise ExportError(f"OpenVINO {ov.__version__} cannot convert this {graph.kind} graph at "
                          f"{' and '.join('×'.join(map(str, x.shape)) for x in graph.example)} ("
                          f"{' '.join(str(error).split())[-200:]}); run it on onnxruntime, compile or "
                          f"torch") from error
    # which module each op comes from: an int8 graph quantized later starts from this model, not a new trace
    model.set_rt_info(json.dumps(traced_modules(program)), [TRACED_MODULES])
    save_openvino(model, graph, path, metadata(graph))


# the rt_info key of an OpenVINO model's {traced node: [its module in the vitlab model, whether it has a weight]}
TRACED_MODULES = "vitlab_traced_modules"


def traced_modules(program: torch.export.ExportedProgram) -> dict[str, list[Any]]:
    """{node name: [module path, has a weight]} for each op of `program`. OpenVINO names each op it converts after
    its traced node ('linear_12/aten.linear.default/MatMul'), so that an op is found by its module through this."""
    return {node.name: [_module_of_node(node), any(word in str(node.target) for word in ("linear", "conv"))]
            for node in program.graph.nodes if node.op == "call_function"}


def module_of(scopes: list[str]) -> str:
    """A traced node's module path in the vitlab model ('blocks.3.attn.qkv'), from the exporter's scope list
    (['', 'model', 'model.fast.blocks.3', ..., 'linear_12']: its last entry is the node itself). The graph's wrapper
    (`model.`) and the inference path's (`fast.`) are left out."""
    modules = [s for s in scopes[:-1] if s]
    path = modules[-1] if modules else ""
    return re.sub(r"^model(\.fast|\.wrapped)*\.?", "", path)


def _module_of_node(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return module_of([next(reversed(stack.values()))[0], node.name]) if stack else ""


def save_openvino(model: Any, graph: Graph, path: Path, record: dict[str, Any]) -> None:
    """An OpenVINO model to `path` (.xml, with its .bin beside it), its ports named as the graph's and `record`
    kept under `vitlab`; both files written beside their targets and renamed over them."""
    ov = require("openvino", "OpenVINO export")
    for port, name in zip(model.inputs, graph.input_names):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, graph.output_names):
        port.get_tensor().set_names({name})
    model.set_rt_info(json.dumps(record), ["vitlab"])
    with replacing(path, suffix=".xml") as tmp:
        try:
            ov.save_model(model, str(tmp), compress_to_fp16=False)
            os.chmod(tmp.with_suffix(".bin"), user_file_mode())
            os.replace(tmp.with_suffix(".bin"), path.with_suffix(".bin"))
        finally:
            tmp.with_suffix(".bin").unlink(missing_ok=True)


def _pt2_extra_file(path: Path, name: str) -> str | None:
    """An extra file of a .pt2 archive, read from the zip it is, without loading the program (deserializing a
    detector's symbolic shapes takes seconds); None where it has none."""
    with zipfile.ZipFile(path) as archive:
        found = [entry for entry in archive.namelist() if entry.endswith(f"/extra/{name}")]
        return archive.read(found[0]).decode() if found else None


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The `vitlab` record of an exported file (ONNX, OpenVINO .xml or .pt2)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no exported model at {path}")
    if path.suffix == ".onnx":
        onnx = require("onnx", "reading an ONNX file")
        with reading(path, "an ONNX graph"):
            proto = onnx.load(str(path), load_external_data=False)
        record = {p.key: p.value for p in proto.metadata_props}.get("vitlab")
    elif path.suffix == ".xml":
        ov = require("openvino", "reading an OpenVINO model")
        with reading(path, "an OpenVINO model (with its .bin beside it)"):
            model = ov.Core().read_model(str(path))
        record = model.get_rt_info(["vitlab"]).astype(str) if model.has_rt_info(["vitlab"]) else None
    elif path.suffix == ".pt2":
        with reading(path, "a torch.export program"):
            record = _pt2_extra_file(path, "vitlab.json")
    else:
        raise ValueError(f"{path} is not an exported model: expected .onnx, .xml (OpenVINO) or .pt2")
    if not record:
        raise ValueError(f"{path} was not written by `vitlab export` (it has no vitlab record); export the run "
                         f"with `vitlab export RUN --format ...`")
    try:
        return json.loads(record)
    except json.JSONDecodeError as error:
        raise damaged(path, "a graph with vitlab's record", error) from error
