"""8-bit integer graphs for the CPU: a graph's matrix products and convolutions in int8, the rest in fp32.

    quantize_graph(graph, out, backend, samples)   one graph (graphs.py) -> an int8 .onnx (onnxruntime) or .xml
                                                   (OpenVINO), calibrated on `samples`, its inputs as a model sees
                                                   them; with no samples, onnxruntime's dynamic quantization

What is quantized is what int8 kernels make faster and what the answers survive: the products of an activation
with a weight (a linear layer's MatMul or Gemm, a convolution), with one scale per output channel for the weights
and one per tensor for the activations, measured on the samples (min/max). What stays in fp32, everywhere:

- the products of two activations (attention's Q·Kᵀ and its weights times V): their ranges change from image to
  image, and they are a small share of the work (N/(6D+N) of a ViT block's: 8 % for ViT-S/16 at 224);
- softmax, LayerNorm, GELU, the residual sums, the deformable sampling and the VQGAN's code lookup, which no rule
  here quantizes (onnxruntime's defaults would: its op list is given explicitly);
- whatever the family names in `int8_fp32` (models/family.py), by module path: a detector's box and class heads,
  a restorer's first and last convolutions, ... each with its reason.

Calibrating activations as unsigned and weights as signed 8-bit is what the x86 kernels of both runtimes are built
for (onnxruntime's U8S8 GEMM, with VNNI one `vpdpbusd` per 4 products). Without VNNI that kernel sums pairs of
products in 16 bits, which can saturate: there the weights are kept to 7 bits (`reduce_range`), as onnxruntime
advises, in every layer (NNCF's overflow fix, for OpenVINO, too). The file records which, and the ISA it was made on.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .export import TRACED_MODULES, _replace, exported_program, metadata, module_of, require, traced_modules
from .graphs import Graph

QUANTIZED_OPS = ("MatMul", "Gemm", "Conv")  # ONNX ops with a weight operand; OpenVINO's MatMul/Convolution alike
DEFAULT_SAMPLES = 256  # calibration inputs (rows of the graph's first input): OpenVINO's guide advises about 300


def cpu_int8_isa() -> str:
    """The best 8-bit dot product this CPU has: 'amx' (AMX-INT8), 'vnni' (AVX512-VNNI or AVX-VNNI) or 'none'."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    if "amx_int8" in flags:
        return "amx"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "vnni"
    return "none"


def saturation_risk(record: dict[str, Any], path: str | os.PathLike) -> str | None:
    """What to tell the user of an int8 graph (`record`: its file's vitlab record) made on a CPU with VNNI, whose
    8-bit weights use all 8 bits, when this CPU has none: its int8 kernel sums pairs of products in 16 bits, which
    such weights can saturate (the module docstring). None where the graph suits this CPU."""
    import platform

    made = record.get("int8") or {}
    if made.get("precision") != "int8" or made.get("reduce_range", True) or cpu_int8_isa() != "none":
        return None
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):  # the 16-bit pair sums are x86's
        return None
    return (f"{path} was quantized on a CPU with 8-bit dot products ({made.get('isa')}), its weights in 8 bits; this "
            f"CPU has none, and its int8 kernels can saturate on them: quantize the model again here (`vitlab "
            f"quantize`), which keeps the weights to 7 bits")


def family_plan(graph: Graph) -> Any:
    """The config class of the graph's family: its `int8_fp32` (module-path patterns kept in fp32, with why) and
    `int8_transformer` (whether NNCF treats it as a transformer)."""
    from ..models.registry import config_type

    return config_type(graph.family)


def keeps_fp32(module: str, patterns: dict[str, str]) -> bool:
    return any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns)


def quantize_graph(graph: Graph, out: str | os.PathLike, backend: str = "onnxruntime",
                   samples: Sequence[tuple[np.ndarray, ...]] | None = None, keep_fp32: dict[str, str] | None = None,
                   fp32_onnx: str | os.PathLike | None = None, fp32_openvino: str | os.PathLike | None = None
                   ) -> dict[str, Any]:
    """Write `graph` in int8 to `out` (.onnx for onnxruntime, .xml for openvino) and return what was done (the
    record the file carries under `vitlab`'s `int8`).

    `samples`: calibration batches, each a tuple of the graph's inputs as numpy arrays; None: dynamic quantization
    (onnxruntime only: activations scaled per call). `keep_fp32`: module-path patterns (fnmatch) kept in fp32 beside
    the family's, with why. `fp32_onnx`, `fp32_openvino`: the graph's fp32 ONNX file or OpenVINO model where one is
    written already, quantized without tracing the graph again."""
    keep = dict(family_plan(graph).int8_fp32) | dict(keep_fp32 or {})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    isa = cpu_int8_isa()
    record = {"precision": "int8", "backend": backend, "isa": isa, "reduce_range": isa == "none",
              "calibration": "dynamic" if samples is None else "minmax",
              "samples": sum(len(batch[0]) for batch in samples) if samples else 0,
              "fp32": keep, "fp32_always": "products of two activations, softmax, normalisation, activations, "
                                          "residual sums, sampling and lookups"}
    if backend == "onnxruntime":
        if out.suffix != ".onnx":
            raise ValueError(f"an onnxruntime int8 graph is an .onnx file, got {out}")
        record |= _quantize_onnx(graph, out, samples, keep, record, fp32_onnx)
    elif backend == "openvino":
        if out.suffix != ".xml":
            raise ValueError(f"an OpenVINO int8 model is an .xml file (with its .bin beside it), got {out}")
        if samples is None:
            raise ValueError("OpenVINO quantizes with calibration data only: give the run's data (or --calibration) "
                             "or use --backend onnxruntime, which can quantize dynamically")
        record |= _quantize_openvino(graph, out, samples, keep, record, fp32_openvino)
    else:
        raise ValueError(f"int8 graphs are made for onnxruntime or openvino, not {backend!r}")
    return record


# -- onnxruntime ---------------------------------------------------------------------------------------------------
class _Batches:
    """onnxruntime's CalibrationDataReader protocol: the samples as {input name: array}, then None."""

    def __init__(self, names: Sequence[str], samples: Sequence[tuple[np.ndarray, ...]]) -> None:
        self._feeds = iter([dict(zip(names, batch)) for batch in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def _quantize_onnx(graph: Graph, out: Path, samples, keep: dict[str, str], record: dict[str, Any],
                   fp32_onnx: str | os.PathLike | None) -> dict[str, Any]:
    require("onnxruntime", "int8 on onnxruntime")
    onnx = require("onnx", "int8 on onnxruntime")
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from .export import export_graph

    with tempfile.TemporaryDirectory(prefix="vitlab-int8-") as work:
        work = Path(work).resolve()
        if fp32_onnx is None:
            fp32_onnx = export_graph(graph, work / "fp32.onnx", "onnx")
        prepared = work / "prepared.onnx"
        # shape inference through the fused ops (the quantizer skips tensors of unknown type) and constant folding
        # (a weight sliced in the graph, as in a lean last block, becomes a weight again)
        fp32_onnx = Path(fp32_onnx).resolve()
        # in the work folder: the symbolic pass, where it gives up, leaves its model there (in the current folder)
        with warnings.catch_warnings(), contextlib.chdir(work):
            warnings.simplefilter("ignore")
            try:
                quant_pre_process(str(fp32_onnx), str(prepared))
            except Exception:  # noqa: BLE001 -- the symbolic pass gives up on some graphs (DETR's): ONNX's own then
                quant_pre_process(str(fp32_onnx), str(prepared), skip_symbolic_shape=True)
        proto = onnx.load(str(prepared))
        # pre-processing drops the nodes' scopes but keeps their names: the modules are read from the export
        modules = {node.name: module_of(_scopes(node)) for node in onnx.load(str(fp32_onnx)).graph.node}
        excluded, kept_by_family, quantized = _excluded_nodes(proto, keep, modules)
        common = dict(op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True, reduce_range=record["reduce_range"],
                      weight_type=QuantType.QInt8, nodes_to_exclude=excluded)
        quantized_file = work / "int8.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if samples is None:
                # dynamic: MatMuls only; onnxruntime has no fast kernel for a dynamically quantized convolution
                common["op_types_to_quantize"] = ["MatMul"]
                quantize_dynamic(prepared, quantized_file, **common)
            else:
                quantize_static(prepared, quantized_file, _Batches(graph.input_names, samples),
                                quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True,
                                               # a product's output stays fp32: the int8 kernel returns it so
                                               "OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]},
                                **common)
        result = onnx.load(str(quantized_file))
        if samples is not None:
            _fp32_for_fp32_readers(result, excluded)
        record = record | {"quantized_nodes": quantized, "fp32_nodes": kept_by_family}
        del result.metadata_props[:]
        entry = result.metadata_props.add()
        entry.key, entry.value = "vitlab", json.dumps(metadata(graph) | {"int8": record})
        _replace(out, lambda tmp: onnx.save_model(result, str(tmp)))
    return {"quantized_nodes": quantized, "fp32_nodes": kept_by_family}


def _scopes(node) -> list[str]:
    """The exporter's module scopes of an ONNX node (its `pkg.torch.onnx.name_scopes`, a list written as text)."""
    text = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "[]")
    return json.loads(text.replace("'", '"'))


def _excluded_nodes(proto, keep: dict[str, str], modules: dict[str, str]) -> tuple[list[str], int, int]:
    """The MatMul/Gemm/Conv nodes to leave in fp32: those whose second operand is not a weight (a product of two
    activations) and those in a module the family keeps (`modules`: node name -> module path); with how many the
    family kept and how many are left to quantize."""
    constants = {init.name for init in proto.graph.initializer}
    constants |= {output for node in proto.graph.node if node.op_type == "Constant" for output in node.output}
    excluded, by_family, quantized = [], 0, 0
    for node in proto.graph.node:
        if node.op_type not in QUANTIZED_OPS:
            continue
        if node.input[1] not in constants:
            excluded.append(node.name)
        elif keeps_fp32(modules.get(node.name) or module_of(_scopes(node)), keep):
            excluded.append(node.name)
            by_family += 1
        else:
            quantized += 1
    return excluded, by_family, quantized


def _fp32_for_fp32_readers(proto, excluded: list[str]) -> None:
    """Give back the fp32 tensor to every reader of an activation that is not an int8 product.

    The quantizer puts one quantize/dequantize pair on an activation a product reads, and makes every reader of the
    activation read the dequantized copy: a residual sum or a normalisation beside the product would then compute on
    8-bit values (a post-norm block's residual stream, DETR's). A convolution's own output stays as the quantizer
    left it: the next convolution reads it in int8, and a ReLU or a residual sum of a CNN is made for that."""
    made_by = {output: node for node in proto.graph.node for output in node.output}
    int8_products = {node.name for node in proto.graph.node if node.op_type in QUANTIZED_OPS
                     and node.name not in excluded}
    restored = {}  # the dequantized copy -> the fp32 tensor it stands for
    for node in proto.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in made_by:
            continue
        quantize = made_by[node.input[0]]
        source = made_by.get(quantize.input[0]) if quantize.op_type == "QuantizeLinear" else None
        if source is not None and not (source.op_type == "Conv" and source.name in int8_products):
            restored[node.output[0]] = quantize.input[0]
    for node in proto.graph.node:
        if node.name in int8_products or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for i, name in enumerate(node.input):
            if name in restored:
                node.input[i] = restored[name]


# -- OpenVINO (NNCF) -----------------------------------------------------------------------------------------------
# the OpenVINO ops that multiply two activations as one op: never quantized (the module docstring)
OPENVINO_ACTIVATION_PRODUCTS = ("ScaledDotProductAttention",)


def _quantize_openvino(graph: Graph, out: Path, samples, keep: dict[str, str], record: dict[str, Any],
                       fp32_openvino: str | os.PathLike | None = None) -> dict[str, Any]:
    require("openvino", "int8 on OpenVINO")
    nncf = require("nncf", "int8 on OpenVINO")
    from .export import save_openvino

    model, modules = _fp32_openvino_model(graph, fp32_openvino)
    # OpenVINO names each op after the traced node it comes from ('linear_12/aten.linear.default/MatMul')
    kept = [name for name, (module, _) in modules.items() if keeps_fp32(module, keep)]
    # attention's products stay fp32 as on onnxruntime: NNCF's transformer rules would put a FakeQuantize on the
    # query and key of every ScaledDotProductAttention op (Q·Kᵀ in int8), which the trace keeps as one op
    ignored = nncf.IgnoredScope(patterns=[f"^{re.escape(name)}/" for name in kept],
                                types=list(OPENVINO_ACTIVATION_PRODUCTS), validate=False)
    transformer = family_plan(graph).int8_transformer
    advanced = nncf.AdvancedQuantizationParameters(
        overflow_fix=nncf.OverflowFix.ENABLE if record["reduce_range"] else nncf.OverflowFix.DISABLE)
    from nncf.common.logging import nncf_logger

    level = nncf_logger.level
    nncf.set_log_level(logging.ERROR)  # its notes on every op it leaves out; its progress bars go to stdout
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            quantized = nncf.quantize(
                model, nncf.Dataset(list(samples), list), subset_size=len(samples),
                model_type=nncf.ModelType.TRANSFORMER if transformer else None, ignored_scope=ignored,
                target_device=nncf.TargetDevice.CPU, fast_bias_correction=True, advanced_parameters=advanced)
    finally:
        nncf.set_log_level(level)
    fake = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ordered_ops())
    done = {"fake_quantize_ops": fake, "fp32_nodes": sum(modules[name][1] for name in kept)}
    save_openvino(quantized, graph, out, metadata(graph) | {"int8": record | done})
    return done


def _fp32_openvino_model(graph: Graph, fp32_openvino: str | os.PathLike | None) -> tuple[Any, dict[str, list]]:
    """The graph's fp32 OpenVINO model and {traced node: [module, has a weight]}: read from the fp32 model the
    cache holds where it records them (export._write_openvino does), else traced and converted anew."""
    ov = require("openvino", "int8 on OpenVINO")
    if fp32_openvino is not None:
        model = ov.Core().read_model(str(fp32_openvino))
        if model.has_rt_info([TRACED_MODULES]):
            return model, json.loads(model.get_rt_info([TRACED_MODULES]).astype(str))
    program = exported_program(graph)
    return ov.convert_model(program), traced_modules(program)
