"""int8 graphs (`vitlab quantize`, `--precision int8`): every family's int8 graph stays near its fp32 outputs, only
the products of an activation with a weight are quantized (never two activations, never what the family keeps in
fp32), and the figures `vitlab quantize` reports are the ones `vitlab eval` measures, on fp32 and on int8."""

import json
from typing import ClassVar

import numpy as np
import pytest
import torch

from vitlab import runtime
from vitlab.cli.main import main
from vitlab.runtime.calibration import calibration_recorder
from vitlab.runtime.quantize import module_of
from vitlab.tasks.int8 import guard

from .conftest import shares_graphs
from .test_parity import FAMILIES, SIZES, build, inputs_at, reference

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
pytest.importorskip("nncf")

# the relative L2 error of each output, int8 against fp32, on random weights: a classifier's logits from random
# weights are small and close together, so their relative error is the largest (measured 0.13-0.18)
TOLERANCE = {"logits": 0.3, "pred_boxes": 0.02, "restored": 0.05, "images": 0.15}


def int8_of(name: str, backend: str, cache_dir):
    """The family's small model and its int8 runtime, calibrated on three random batches."""
    model, inputs = build(name)
    recorder = calibration_recorder(model, 16, cache_dir)
    calibrating = recorder.as_model()
    torch.manual_seed(1)
    with torch.inference_mode():
        for _ in range(3):
            batch = tuple(torch.rand_like(x) if name == "ipt" else torch.randn_like(x) for x in inputs)
            calibrating.decode(*batch) if name == "vqgan" else calibrating(*batch)
    int8, written = recorder.write_int8(backend)
    return model, inputs, int8, written


PAIRS = [shares_graphs(name, backend) for name in FAMILIES for backend in ("onnxruntime", "openvino")]
FREE_SIZE = ("detr", "deformable_detr", "vqgan")  # graphs whose image (or latent) size stays free


@pytest.mark.slow
@pytest.mark.parametrize("name, backend", PAIRS)
def test_every_family_in_int8_stays_near_fp32(name, backend, graph_cache):
    # each runtime quantizes the family's fp32 graph, exported once per test run
    model, inputs, int8, written = int8_of(name, backend, graph_cache(name))
    assert len(written) == 1 and written[0]["samples"] == 3 * len(inputs[0])  # all of the 3 batches: under 16
    assert written[0]["isa"] in ("amx", "vnni", "none")
    expected = reference(name, model, inputs)
    outputs = int8.named(*inputs)
    for key, value in expected.items():
        got = torch.as_tensor(outputs[key])
        assert got.shape == value.shape
        error = float(torch.linalg.norm(got - value) / torch.linalg.norm(value))
        assert error <= TOLERANCE[key], f"{key}: relative error {error:.3f}"
    # the graph at the other sizes the fp32 graph is held to: another batch of the calibrated size gives the same
    # rows as the calibrated batch did (the scales are fixed); another image size stays as near fp32
    for shape in SIZES[name][1:]:
        if shape[2:] == inputs[0].shape[2:] and shape[0] <= len(inputs[0]):
            rows = int8.named(*(x[:shape[0]] for x in inputs))
            for key, value in outputs.items():
                same = torch.as_tensor(value)[:shape[0]]
                difference = float((torch.as_tensor(rows[key]) - same).abs().max())
                assert difference <= 1e-3 * (1 + float(same.abs().max())), f"{key} at {shape}: {difference:.2e}"
        elif name in FREE_SIZE:
            torch.manual_seed(2)
            batch = inputs_at(name, shape)
            fp32, got = reference(name, model, batch), int8.named(*batch)
            for key, value in fp32.items():
                error = float(torch.linalg.norm(torch.as_tensor(got[key]) - value) / torch.linalg.norm(value))
                assert error <= TOLERANCE[key], f"{key}: relative error {error:.3f} at {shape}"
    assert int8.describe().split(", ")[1] == "int8"
    if backend == "openvino":
        assert not openvino_activation_products_in_int8(written[0]["path"])
    # the file says what it is, and loads as int8 alone
    path = written[0]["path"]
    assert runtime.export.read_metadata(path)["int8"]["backend"] == backend
    loaded = runtime.load(path)
    assert loaded.precision == "int8"
    with pytest.raises(ValueError, match="int8 graph, not fp32"):
        runtime.load(path, precision="fp32")


SHAPE_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Convert")


def openvino_activation_products_in_int8(path) -> list[str]:
    """The ops of an OpenVINO int8 model that multiply two activations (neither operand made of constants: a
    MatMul of two activations, attention's ScaledDotProductAttention) with an operand read from a FakeQuantize,
    through ops that only move values: products computed in int8 that the rule keeps in fp32."""
    import openvino as ov

    constant: dict[str, bool] = {}

    def made_of_constants(node) -> bool:  # a weight, as OpenVINO stores one (int8 with its scale, or fp32)
        name = node.get_friendly_name()
        if name not in constant:
            constant[name] = node.get_type_name() == "Constant" or (
                node.get_input_size() > 0 and node.get_type_name() != "Parameter"
                and all(made_of_constants(node.input(i).get_source_output().get_node())
                        for i in range(node.get_input_size())))
        return constant[name]

    def quantized(node) -> bool:
        while node.get_type_name() in SHAPE_OPS:
            node = node.input(0).get_source_output().get_node()
        return node.get_type_name() == "FakeQuantize"

    found = []
    for op in ov.Core().read_model(str(path)).get_ordered_ops():
        if op.get_type_name() not in ("MatMul", "ScaledDotProductAttention"):
            continue
        operands = [op.input(i).get_source_output().get_node() for i in (0, 1)]
        if not any(map(made_of_constants, operands)) and any(map(quantized, operands)):
            found.append(f"{op.get_type_name()} {op.get_friendly_name()}")
    return found


def test_openvino_int8_is_quantized_from_the_fp32_model_in_the_cache_without_a_new_trace(tmp_path, monkeypatch):
    """The fp32 OpenVINO model records which module each op comes from, so that its int8 graph starts from it (the
    trace of a detector takes most of a quantization); quantized so, it is the int8 graph a new trace gives."""
    import vitlab.runtime.quantize as quantize

    model, inputs = build("vit")
    keep = {"blocks.1.mlp.*": "asked for"}  # a ViT's own plan keeps nothing in fp32
    recorder = calibration_recorder(model, 16, tmp_path)
    with torch.inference_mode():
        recorder.as_model()(*inputs)
    (graph, batches), = recorder.recorded.values()
    _, (cached,) = recorder.write_int8("openvino", keep)  # writes the fp32 model first, then quantizes it
    fp32, = (path for path in tmp_path.rglob("*.xml") if "int8" not in path.name)
    monkeypatch.setattr(quantize, "exported_program", lambda graph: pytest.fail("traced again"))
    again = quantize.quantize_graph(graph, tmp_path / "again-int8.xml", "openvino", batches, keep, fp32_openvino=fp32)
    monkeypatch.undo()
    fresh = quantize.quantize_graph(graph, tmp_path / "fresh-int8.xml", "openvino", batches, keep)  # a new trace
    assert again["fp32_nodes"] == fresh["fp32_nodes"] == cached["fp32_nodes"] == 2  # fc1 and fc2 of block 1
    assert again["fake_quantize_ops"] == fresh["fake_quantize_ops"] == cached["fake_quantize_ops"] > 0
    from_cache, from_trace = (runtime.load(path).named(*inputs) for path in (tmp_path / "again-int8.xml",
                                                                            tmp_path / "fresh-int8.xml"))
    for key, value in from_trace.items():
        np.testing.assert_allclose(from_cache[key], value, atol=1e-5, rtol=0)


def producers(proto) -> dict[str, object]:
    return {output: node for node in proto.graph.node for output in node.output}


@pytest.mark.slow
def test_int8_graph_quantizes_products_with_weights_only(tmp_path):
    import onnx

    model, inputs, int8, written = int8_of("detr", "onnxruntime", tmp_path)
    proto = onnx.load(written[0]["path"])
    fp32 = onnx.load(str(next(p for p in tmp_path.glob("*.onnx") if "int8" not in p.name)))
    modules = {node.name: module_of(json.loads(next(p.value for p in node.metadata_props
                                                     if p.key == "pkg.torch.onnx.name_scopes").replace("'", '"')))
               for node in fp32.graph.node if node.metadata_props}
    weights = {init.name for init in proto.graph.initializer}
    made_by = producers(proto)

    def dequantized(name: str) -> bool:
        node = made_by.get(name)
        return node is not None and node.op_type == "DequantizeLinear"

    quantized = kept = activations = 0
    for node in proto.graph.node:
        if node.op_type in ("MatMul", "Gemm", "Conv"):
            a, b = node.input[0], node.input[1]
            if dequantized(b) and made_by[b].input[0] in weights:  # an int8 weight
                assert dequantized(a), f"{node.name}: an int8 weight times an fp32 activation"
                assert not modules.get(node.name, "").startswith("bbox_embed")
                quantized += 1
            elif b in weights:
                kept += 1
                assert modules.get(node.name, "").startswith("bbox_embed"), f"{node.name} left in fp32"
            else:  # a product of two activations: attention's
                assert not dequantized(a) and not dequantized(b), node.name
                activations += 1
        if node.op_type in ("Softmax", "LayerNormalization", "Sigmoid", "Add"):
            # fp32 work reads fp32, but for a CNN's residual sum of int8 convolutions (as int8 CNNs do)
            for name in filter(dequantized, node.input):
                source = made_by.get(made_by[made_by[name].input[0]].input[0])
                assert source is not None and source.op_type == "Conv", f"{node.op_type} {node.name} reads int8"
    assert quantized == written[0]["quantized_nodes"] > 20
    assert kept == written[0]["fp32_nodes"] == 3  # the box head's three linear layers
    assert activations >= 2 * 3  # Q·Kᵀ and weights·V in each of the three attention layers


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_quantize_reports_what_eval_measures(trained, capsys, backend, tmp_path):
    run = trained["cls"]
    out = tmp_path / "int8"
    capsys.readouterr()
    assert main(["quantize", str(run), "--backend", backend, "--samples", "8", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.loads((out / report["report"].rsplit("/", 1)[1]).read_text())["int8"] == report["int8"]
    (graph,) = report["graphs"]
    assert graph["samples"] == 8 and graph["path"].startswith(str(out))  # the first 8 of the 17 val images
    recorded = json.loads((run / "config.json").read_text())["data"]["preprocessing"]
    assert runtime.load(graph["path"]).preprocessing.to_dict() == recorded  # the int8 graph used alone

    def evaluated(*flags: str) -> dict:
        assert main(["eval", str(run), "--split", "val", "--no-plot", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    fp32 = evaluated()
    assert report["fp32"]["accuracy"] == pytest.approx(fp32["accuracy"])
    assert report["compared"] == fp32["num_images"]  # with the run's test-time flip: each image's mean answer
    # the default place: RUN_DIR/runtime, where eval's --precision int8 finds the graph
    assert main(["quantize", str(run), "--backend", backend, "--samples", "8"]) == 0
    capsys.readouterr()
    int8 = evaluated("--runtime", backend, "--precision", "int8")
    assert report["int8"]["accuracy"] == pytest.approx(int8["accuracy"])
    checks = {check["figure"]: check for check in report["checks"]}
    assert checks["accuracy"]["change"] == pytest.approx(int8["accuracy"] - fp32["accuracy"])
    assert checks["accuracy"]["ok"] == (checks["accuracy"]["change"] >= -0.01)
    assert checks["agreement"]["ok"] == (report["agreement"] >= 0.99)
    # agreement: at least the share of images both get right or both get wrong the same way can't exceed 1, and
    # the accuracies can differ by no more than the disagreeing share
    assert abs(int8["accuracy"] - fp32["accuracy"]) <= 1 - report["agreement"] + 1e-9


def test_guard_flags_each_figure_beyond_its_allowed_drop():
    class Task:
        int8_guard: ClassVar[dict[str, float]] = {"miou": 0.01, "degradations.*.psnr_y": 0.1}
        int8_agreement_floor = 0.99
        int8_agreement_of = "images"

    report = {"fp32": {"miou": 0.50, "degradations.sr2.psnr_y": 30.0, "degradations.denoise30.psnr_y": 28.0},
              "int8": {"miou": 0.485, "degradations.sr2.psnr_y": 29.95, "degradations.denoise30.psnr_y": 27.8},
              "agreement": 0.995, "compared": 200}
    checks = {check["figure"]: check for check in guard(Task, report)}
    assert not checks["miou"]["ok"] and checks["miou"]["change"] == pytest.approx(-0.015)
    assert checks["degradations.sr2.psnr_y"]["ok"]
    assert not checks["degradations.denoise30.psnr_y"]["ok"]
    assert checks["agreement"]["ok"] and "99.50 % of 200 images" in checks["agreement"]["says"]


@pytest.mark.slow
@pytest.mark.parametrize("run, figure", [("detr", "map_50"), ("setr", "miou"), ("ipt", "degradations.sr2.psnr_y"),
                                         ("vqgan", "psnr")])
def test_quantize_every_task_reports_its_own_figure(trained, capsys, tmp_path, run, figure):
    run_dir = trained[run]  # trained here by the first test to ask for it, which prints its progress
    capsys.readouterr()
    assert main(["quantize", str(run_dir), "--samples", "8", "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert figure in report["fp32"] and figure in report["int8"]
    assert figure in {check["figure"] for check in report["checks"]}
    assert all(graph["samples"] >= 1 for graph in report["graphs"])
    kept = {pattern for graph in report["graphs"] for pattern in graph["fp32"]}
    if run in ("detr", "ipt", "vqgan"):  # their families keep the box head, the last convolutions
        assert kept and all(graph["fp32_nodes"] >= 1 for graph in report["graphs"])


@pytest.mark.slow
def test_precision_int8_without_a_calibrated_graph(trained, capsys, tmp_path, monkeypatch):
    model, inputs = build("vit")
    with pytest.raises(ValueError, match="vitlab quantize"):
        runtime.load(model, backend="openvino", precision="int8")(*inputs)
    with pytest.raises(ValueError, match="onnxruntime or openvino"):
        runtime.load(model, backend="torch", precision="int8")
    from vitlab.runtime import quantize

    monkeypatch.setattr(quantize, "cpu_int8_isa", lambda: "vnni")  # made here as on a CPU with VNNI: 8-bit weights
    dynamic = runtime.load(model, backend="onnxruntime", precision="int8", cache_dir=tmp_path / "graphs")
    got, expected = dynamic(*inputs), reference("vit", model, inputs)["logits"]
    assert float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected)) <= TOLERANCE["logits"]
    assert "dynamically" in capsys.readouterr().err
    assert np.isfinite(got.numpy()).all()
    again = runtime.load(model, backend="onnxruntime", precision="int8", cache_dir=tmp_path / "graphs")
    torch.testing.assert_close(again(*inputs), got)  # the graph the first call made, said to be a dynamic one
    assert "is quantized dynamically, as an earlier call made it" in capsys.readouterr().err
    # the file on a CPU without 8-bit dot products, whose kernels can saturate on 8-bit weights: said, not refused
    (written,) = (tmp_path / "graphs").glob("*-int8.onnx")
    monkeypatch.setattr(quantize, "cpu_int8_isa", lambda: "none")
    torch.testing.assert_close(runtime.load(written)(*inputs), got)
    assert "quantized on a CPU with 8-bit dot products (vnni)" in capsys.readouterr().err
    monkeypatch.setattr(quantize, "cpu_int8_isa", lambda: "vnni")
    runtime.load(written)
    assert "quantized on a CPU" not in capsys.readouterr().err
