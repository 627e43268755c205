"""`--runtime` on the commands people use (predict, eval, restore, serve) gives torch's answers, `vitlab export`
writes every format for every family, and a missing runtime names the extra that installs it. The runs are the
session's small trained runs of every image task (tests/conftest.py)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab import runtime
from vitlab.cli.main import main
from vitlab.engine.run import RunDir

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "docs" / "examples").glob("*.png"))


def run_json(capsys, *argv: str):
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_predict_classification_on_a_runtime_equals_torch(trained, capsys, backend):
    args = ["predict", str(trained["cls"]), *map(str, EXAMPLES), "--top-k", "10"]
    expected = run_json(capsys, *args)
    got = run_json(capsys, *args, "--runtime", backend)
    for want, have in zip(expected, got):
        probabilities = {p["class"]: p["probability"] for p in want["top_k"]}
        assert {p["class"] for p in have["top_k"]} == set(probabilities)
        for p in have["top_k"]:
            assert abs(p["probability"] - probabilities[p["class"]]) <= 1e-4
    if backend == "onnxruntime":  # the graph of the weights predict reads by default is kept for the next call
        assert list((trained["cls"] / "runtime").glob(f"{RunDir(trained['cls']).kept_weights('best')}-*.onnx"))


# the tests that run the trained DETR on onnxruntime share its graph in the run (made by the first): one worker
SHARES_DETR_GRAPH = pytest.mark.xdist_group("trained-detr-onnxruntime")


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("onnxruntime", marks=SHARES_DETR_GRAPH), "openvino"])
def test_predict_detection_on_a_runtime_equals_torch_for_photos_of_different_sizes(trained, capsys, tmp_path,
                                                                                  backend):
    """One graph, made at the first photo's size, answers the second, of another size and orientation, as torch."""
    scenes = sorted((trained["scenes"] / "images" / "val").glob("*.png"))[:2]
    images = []
    for scene, size in zip(scenes, [(96, 64), (64, 112)]):
        images.append(tmp_path / f"{scene.stem}-{size[0]}x{size[1]}.png")
        Image.open(scene).resize(size).save(images[-1])
    args = ["predict", str(trained["detr"]), *map(str, images), "--threshold", "0.05"]
    expected = run_json(capsys, *args)
    got = run_json(capsys, *args, "--runtime", backend)
    assert sum(len(item["detections"]) for item in expected) > 0
    for want, have in zip(expected, got):
        assert_same_detections(want, have)


def assert_same_detections(want: dict, have: dict) -> None:
    """The same labels in the same order, scores and boxes as equal as their rounding lets them be."""
    assert [d["label"] for d in have["detections"]] == [d["label"] for d in want["detections"]]
    for a, b in zip(want["detections"], have["detections"]):
        assert abs(a["score"] - b["score"]) <= 2e-4  # both rounded to 4 places
        assert np.allclose(a["box"], b["box"], atol=0.15)  # both rounded to 0.1 pixel


@pytest.mark.slow
def test_eval_segmentation_and_vqgan_on_onnxruntime_equal_torch(trained, capsys):
    for name, key in (("setr", "miou"), ("vqgan", "psnr")):
        expected = run_json(capsys, "eval", str(trained[name]))
        got = run_json(capsys, "eval", str(trained[name]), "--runtime", "onnxruntime")
        assert abs(got[key] - expected[key]) <= 1e-4, name


@pytest.mark.slow
def test_restore_on_openvino_equals_torch(trained, tmp_path, capsys):
    image = sorted((trained["photos"] / "test").glob("*.png"))[0]
    for backend in ("torch", "openvino"):
        assert main(["restore", str(trained["ipt"]), str(image), "--degradation", "sr2", "--out",
                     str(tmp_path / backend), "--runtime", backend]) == 0
    torch_png, runtime_png = (np.asarray(Image.open(tmp_path / b / f"{image.stem}_sr2.png"), dtype=int)
                              for b in ("torch", "openvino"))
    assert torch_png.shape == runtime_png.shape
    assert np.abs(torch_png - runtime_png).max() <= 1  # outputs within 1e-4 can round to neighbouring levels


def served(run_dir, backend: str) -> tuple:
    """The run as `vitlab serve` loads it on torch, and on `backend` (its graphs kept in the run, as serve keeps
    them: a graph another test made of the same weights is read, not made again)."""
    from argparse import Namespace

    from vitlab.serve.runs import load_runs
    from vitlab.tasks.runtime_flags import on_runtime

    flags = Namespace(runtime=backend, precision="fp32", threads=None)  # `vitlab serve --runtime BACKEND`

    def on_backend(model, source):
        return on_runtime(model, flags, source)

    return load_runs([run_dir])[0], load_runs([run_dir], runtime=on_backend)[0]


@pytest.mark.slow
def test_serve_loads_runs_onto_a_runtime(trained):
    from vitlab.serve.runs import predict

    torch_run, runtime_run = served(trained["cls"], "openvino")
    assert hasattr(runtime_run.model, "runtime") and not hasattr(torch_run.model, "runtime")
    picture = Image.open(EXAMPLES[0])
    want, have = predict(torch_run, picture, "a.png"), predict(runtime_run, picture, "a.png")
    assert [p["class"] for p in have["top_k"]] == [p["class"] for p in want["top_k"]]
    assert np.allclose([p["probability"] for p in have["top_k"]], [p["probability"] for p in want["top_k"]],
                       atol=1e-4)


@pytest.mark.slow
@SHARES_DETR_GRAPH
def test_serve_on_onnxruntime_answers_uploads_of_different_sizes_as_torch(trained):
    """Two uploads of other sizes and orientations than each other: one graph, torch's boxes and scores."""
    from vitlab.serve.runs import predict

    torch_run, runtime_run = served(trained["detr"], "onnxruntime")
    scene = Image.open(sorted((trained["scenes"] / "images" / "val").glob("*.png"))[0])
    for size in [(96, 64), (64, 120)]:
        picture = scene.resize(size)
        want = predict(torch_run, picture, "a.png", threshold=0.05)
        have = predict(runtime_run, picture, "a.png", threshold=0.05)
        assert want["detections"], "the test needs detections to compare"
        assert_same_detections(want, have)


@pytest.mark.parametrize("backend,extra", [("openvino", "openvino"), ("onnxruntime", "onnx")])
def test_a_missing_runtime_names_its_extra(trained, capsys, monkeypatch, backend, extra):
    monkeypatch.setitem(sys.modules, backend, None)  # import fails as if it were not installed
    assert main(["predict", str(trained["cls"]), str(EXAMPLES[0]), "--runtime", backend]) == 2
    assert f"pip install 'vitlab[{extra}]'" in capsys.readouterr().err
    with pytest.raises(ImportError, match=rf"vitlab\[{extra}\]"):
        runtime.load(trained["cls"], backend=backend)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,backend", [("onnx", "onnxruntime"), ("onnx", "openvino"), ("openvino", "openvino"),
                                         ("exported-program", "torch")])
def test_exported_files_load_and_equal_torch(trained, tmp_path, capsys, fmt, backend):
    from vitlab.engine.run import RunDir
    from vitlab.runtime.export import FORMATS

    out = tmp_path / f"cls{FORMATS[fmt]}"
    assert main(["export", str(trained["cls"]), "--format", fmt, "--out", str(out)]) == 0
    assert "outputs logits" in capsys.readouterr().out
    model = RunDir(trained["cls"]).load_model("last")
    images = torch.randn(5, 1, 28, 28)
    with torch.inference_mode():
        expected = model(images)
    engine = runtime.load(out, backend=backend)
    assert engine.kind == "classifier" and engine.output_names == ("logits",)
    torch.testing.assert_close(torch.as_tensor(engine(images)), expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_export_writes_one_graph_per_restoration_task_and_refuses_a_prior(trained, tmp_path, capsys):
    assert main(["export", str(trained["ipt"]), "--format", "onnx", "--out", str(tmp_path / "ipt.onnx")]) == 0
    files = sorted(p.name for p in tmp_path.glob("ipt-*.onnx"))
    assert files == ["ipt-denoise30.onnx", "ipt-sr2.onnx"]
    engine = runtime.load(tmp_path / "ipt-sr2.onnx")
    assert engine.backend == "onnxruntime" and engine(np.random.rand(2, 3, 48, 48).astype(np.float32)).shape == \
        (2, 3, 96, 96)
    capsys.readouterr()
    assert main(["export", str(trained["prior"]), "--format", "onnx"]) == 2
    assert "export its VQGAN run instead" in capsys.readouterr().err
