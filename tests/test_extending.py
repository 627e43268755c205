"""Extending vitlab without editing it: a family of one's own (a convnet classifier), a detector family of one's
own and a task of one's own (tests/toy_extension.py), registered with the public API; `vitlab models`, `train`,
`eval`, `predict`, `export` (ONNX), `convert` and `serve` then work with them, and the task's own command
(`vitlab brighten`) and page layout are vitlab's; a second task of one's own, which takes no image
(tests/toy_numbers.py: a number in, a number out), is served on the generic page with its options. Each result is
checked against the toy's own model, computed here: the same logits from the exported graph and the converted file,
the same predictions from the server as from `vitlab predict`."""

import importlib
import json
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.cli.main import main
from vitlab.engine.run import RunDir
from vitlab.interop import load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy():
    """The extension registered for this module's tests, and forgotten after them (the registries are the
    library's; other tests in the process must not see the toy)."""
    from vitlab.commands import COMMANDS
    from vitlab.interop.converters import CONVERTERS
    from vitlab.models import registry
    from vitlab.serve.page import PAGES
    from vitlab.tasks.base import TASKS

    module = importlib.import_module("tests.toy_extension")
    importlib.import_module("tests.toy_numbers")
    yield module
    for name in ("toynet_28", "toydet_small", "toyline", "toytwin"):
        registry.PRESETS.unregister(name)
    for family in ("toynet", "toydet", "toyline", "toytwin"):
        registry.FAMILIES.unregister(family)
    CONVERTERS.unregister(module.FOREIGN_TOYNET.name)
    for task in ("brightness", "affine"):
        TASKS.unregister(task)
    COMMANDS.unregister("brighten")
    PAGES.unregister("brightness")
    for name in ("tests.toy_extension", "tests.toy_numbers"):
        sys.modules.pop(name, None)


def out_json(capsys):
    return json.loads(capsys.readouterr().out)


def test_models_lists_the_toy_families(toy, capsys):
    assert main(["models", "toy*"]) == 0
    out = capsys.readouterr().out
    assert "── toynet: a test's own convnet" in out and "── toydet: a test's own set-prediction" in out
    parameters = sum(p.numel() for p in toy.toynet_28().build().parameters())
    assert f"{parameters:,}" in out


def test_a_toy_classifier_trains_evaluates_predicts_exports_and_converts(toy, tmp_path, capsys):
    from tests.cli.test_train_eval_predict import make_folder

    folder = make_folder(tmp_path / "images")
    run = tmp_path / "run"
    assert main(["train", "--data", str(folder), "--model", "toynet_28", "--img-size", "16", "--batch-size", "8",
                 "--epochs", "1", "--out", str(run), "--val-fraction", "0.25"]) == 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["model_config"]["family"] == "toynet"
    capsys.readouterr()
    assert main(["eval", str(run), "--json", "--no-plot"]) == 0
    assert out_json(capsys)["classes"] == ["bottom", "top"]
    image = folder / "top" / "1.png"
    assert main(["predict", str(run), str(image), "--json", "--top-k", "2"]) == 0
    predicted = out_json(capsys)[0]["top_k"]
    assert len(predicted) == 2
    # its weights file by name: a family that trains two tasks is used for the one named, and refused without it
    weights = str(run / "last.safetensors")
    assert main(["predict", weights, str(image), "--json"]) == 2
    assert "does several tasks (classification, brightness): say which with --task" in capsys.readouterr().err
    assert main(["predict", weights, str(image), "--task", "classification", "--json", "--top-k", "2"]) == 0
    assert sorted(p["class"] for p in out_json(capsys)[0]["top_k"]) == ["bottom", "top"]  # its labels, by name

    model = load_model(run / "last.safetensors").eval()
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        expected = model(images)
    assert main(["export", str(run), "--format", "onnx"]) == 0
    import onnxruntime

    session = onnxruntime.InferenceSession(str(run / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"images": images.numpy()})[0]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)

    assert main(["convert", str(run / "last.safetensors"), str(tmp_path / "converted.safetensors")]) == 0
    assert "ToyNet 8 wide, 2 deep" in capsys.readouterr().out
    with torch.no_grad():
        torch.testing.assert_close(load_model(tmp_path / "converted.safetensors")(images), expected)


def test_a_family_with_a_new_kind_of_graph_runs_on_onnxruntime_through_its_own_export_spec(toy, tmp_path):
    from vitlab import create_model, runtime

    torch.manual_seed(0)
    model = create_model("toytwin").eval()
    engine = runtime.load(model, backend="onnxruntime", cache_dir=tmp_path)
    for shape in [(2, 3, 32, 48), (1, 3, 40, 24), (3, 3, 32, 48)]:  # the graph's size, then others: its axes are free
        images = torch.randn(*shape)
        with torch.no_grad():
            expected = model(images)
        out = engine(images)  # packed by the family's own pack_outputs
        assert isinstance(out, toy.TwinOutput)
        torch.testing.assert_close(out.scores, expected.scores, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out.heat, expected.heat, atol=1e-5, rtol=1e-4)
        named = engine.named(images)
        assert list(named) == ["scores", "heat"] and tuple(named["heat"].shape) == (shape[0], 1, shape[2] // 2,
                                                                                    shape[3] // 2)


def test_a_converter_registered_outside_vitlab_reads_a_foreign_layout(toy, tmp_path, capsys):
    from safetensors.torch import save_file

    from vitlab import create_model
    from vitlab.interop import model_from_checkpoint, read_checkpoint

    torch.manual_seed(0)
    original = create_model("toynet_28", num_classes=4, width=6).eval()
    theirs = {f"{ {v: k for k, v in toy.FOREIGN_KEYS.items()}[key.rpartition('.')[0]] }.{key.rpartition('.')[2]}": value
              for key, value in original.state_dict().items()}
    assert toy.is_foreign_toynet(theirs) and not set(theirs) & set(original.state_dict())
    path = tmp_path / "foreign.safetensors"
    save_file(theirs, str(path))
    assert read_checkpoint(path)[1].format == "foreign"
    loaded = model_from_checkpoint(path).eval()  # the architecture from the converter, the weights converted
    assert (loaded.config.width, loaded.config.num_classes) == (6, 4)
    images = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), original(images))
    assert main(["convert", str(path), str(tmp_path / "ours.safetensors")]) == 0
    assert "ToyNet 6 wide, 2 deep, image 28, 4 classes" in capsys.readouterr().out
    with torch.no_grad():
        torch.testing.assert_close(load_model(tmp_path / "ours.safetensors")(images), original(images))


def test_a_toy_detector_trains_and_detects(toy, trained, tmp_path, capsys):
    run = tmp_path / "det"
    assert main(["train", "--task", "detection", "--model", "toydet_small", "--data", str(trained["scenes"]),
                 "--epochs", "1", "--batch-size", "8", "--eval-batch-size", "4", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--json"]) == 0
    assert "map" in out_json(capsys)
    image = sorted((trained["scenes"] / "images" / "val").glob("*.png"))[0]
    assert main(["predict", str(run), str(image), "--threshold", "0.0", "--json"]) == 0
    detections = out_json(capsys)[0]["detections"]
    assert len(detections) == toy.toydet_small().num_queries  # softmax scores: one detection per query
    assert main(["predict", str(run), str(image), "--runtime", "onnxruntime", "--threshold", "0.0", "--json"]) == 0
    on_runtime = out_json(capsys)[0]["detections"]
    assert [d["label"] for d in on_runtime] == [d["label"] for d in detections]


def test_a_toy_task_trains_evaluates_predicts_and_is_served(toy, trained, tmp_path, capsys):
    trained_cls = trained["cls"]
    from fastapi.testclient import TestClient

    from vitlab.serve.app import create_app
    from vitlab.serve.runs import load_runs

    run = tmp_path / "bright"
    assert main(["train", "--task", "brightness", "--samples", "64", "--out", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "val_mae" in rows[-2] and "test_mae" in rows[-1]  # selected on validation, the test scored once
    capsys.readouterr()
    assert main(["eval", str(run), "--json", "--samples", "16"]) == 0
    assert out_json(capsys)["samples"] == 16
    path = tmp_path / "grey.png"
    Image.fromarray(np.full((28, 28), 128, np.uint8)).save(path)
    assert main(["predict", str(run), str(path), "--top-k", "2"]) == 2  # another task's option: refused, by name
    assert "--top-k is not an option of a brightness run; it takes --scale" in capsys.readouterr().err
    assert main(["predict", str(run), str(path), "--json", "--scale", "2"]) == 0
    doubled = out_json(capsys)[0]["brightness"]
    model = load_model(run / f"{RunDir(run).kept_weights('best')}.safetensors").eval()  # what predict reads
    with torch.no_grad():
        expected = float(model(torch.full((1, 1, 28, 28), 128 / 255))[0, 0])
    assert doubled == pytest.approx(2 * expected, rel=1e-5)

    # the task's own command, registered from outside vitlab: listed by `vitlab --help`, refused for another task's run
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "brighten" in capsys.readouterr().out
    assert main(["brighten", str(run), str(path), "--target", "0.25", "--out", str(tmp_path / "out")]) == 0
    assert "scaled by" in capsys.readouterr().out
    brightened = np.asarray(Image.open(tmp_path / "out" / "grey.png"), dtype=np.float32)
    assert np.abs(brightened - round(128 * 0.25 / expected)).max() <= 1  # the model's reading of the grey image
    before = path.read_bytes()
    assert main(["brighten", str(run), str(path), "--out", str(path.parent)]) == 2  # its own input: refused
    assert "would overwrite it" in capsys.readouterr().err and path.read_bytes() == before
    assert main(["brighten", str(trained_cls), str(path), "--out", str(tmp_path / "no")]) == 2
    assert "`vitlab brighten` takes a brightness run" in capsys.readouterr().err

    app = create_app(load_runs([run]), page=False)  # best, as predict above
    with TestClient(app) as client:
        listed = client.get("/api/runs").json()["runs"][0]
        assert listed["task"] == "brightness" and listed["options"] == {}
        answer = client.post(f"/api/runs/{run.name}/predict", files={"image": ("grey.png", path.read_bytes())})
        assert answer.status_code == 200, answer.text
        assert answer.json()["brightness"] == pytest.approx(expected, rel=1e-5)

    # the task's own page layout: its button gives the number the API gives
    from vitlab.serve.page import build_page
    from vitlab.serve.pool import WorkerPool
    from vitlab.serve.uploads import ImageLimits

    pool = WorkerPool()
    try:
        page = build_page(load_runs([run]), pool, ImageLimits())
        measure = clicked(page, f"{run.name}-run")
        assert type(element(page, f"{run.name}-output")).__name__ == "Number"
        assert measure.fn(Image.open(path)) == pytest.approx(expected, rel=1e-5)
    finally:
        pool.shutdown()


def element(page, elem_id: str):
    return next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == elem_id)


def clicked(page, elem_id: str):
    """What the page runs when the button `elem_id` is clicked (its inputs, its function)."""
    button = element(page, elem_id)
    return next(fn for fn in page.fns.values() if (button._id, "click") in fn.targets)


def test_a_toy_task_without_images_is_served_on_the_generic_page_with_its_options(toy, tmp_path, capsys):
    from fastapi.testclient import TestClient

    from vitlab.serve.app import create_app
    from vitlab.serve.page import build_page
    from vitlab.serve.pool import WorkerPool
    from vitlab.serve.runs import load_runs
    from vitlab.serve.uploads import ImageLimits

    run = tmp_path / "line"
    assert main(["train", "--task", "affine", "--out", str(run)]) == 0
    line = load_model(run / f"{RunDir(run).kept_weights('best')}.safetensors").eval()
    with torch.no_grad():
        expected = -float(line(line(torch.tensor([[2.0]]))))  # x = 2, the line twice, negated
        assert abs(float(line(torch.tensor([[2.0]]))) - 5.0) < 0.1  # it learned y = 3x - 1
    app = create_app(load_runs([run]), page=False)
    with TestClient(app) as client:
        listed = client.get("/api/runs").json()["runs"][0]
        assert listed["needs_image"] is False and set(listed["options"]) == {"x", "repeat", "negate"}
        answer = client.post(f"/api/runs/{run.name}/predict", data={"x": "2", "repeat": "2", "negate": "true"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["y"] == pytest.approx(expected, rel=1e-5)
        refused = client.post(f"/api/runs/{run.name}/predict", data={"x": "2", "repeat": "two"})
        assert refused.status_code == 422 and "repeat must be a int" in refused.text

    pool = WorkerPool()
    try:
        page = build_page(load_runs([run]), pool, ImageLimits())
        respond = clicked(page, f"{run.name}-run")
        # no image input: one widget per option, each of its option's kind and default
        assert [block.elem_id for block in respond.inputs] == [f"{run.name}-x", f"{run.name}-repeat",
                                                                f"{run.name}-negate"]
        assert [type(block).__name__ for block in respond.inputs] == ["Number", "Number", "Checkbox"]
        assert [block.value for block in respond.inputs] == [0.0, 1, False]
        pictures, shown = respond.fn(2.0, 2.0, True)  # gr.Number gives floats
        assert pictures == [] and shown["y"] == pytest.approx(expected, rel=1e-5)
    finally:
        pool.shutdown()
