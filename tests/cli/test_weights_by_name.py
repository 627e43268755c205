"""Every command that loads a run's model takes other weights for it by name (`--weights TAG`, hf-hub:...), served
here by the local Hub; `vitlab export` takes a release itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vitlab
from vitlab.checkpoint import save_weights
from vitlab.cli.main import main
from vitlab.models.family import Release
from vitlab.models.registry import list_families

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
TINY = ["--data-dir", str(MINI), "--allow-partial-data", "--model", "vit_tiny_patch4_28", "--batch-size", "32"]
IMAGE = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "fm"
    assert main(["train", *TINY, "--epochs", "1", "--out", str(out)]) == 0
    return out


def list_release(monkeypatch, local_hub, tag: str, path: Path) -> None:
    repo = f"vitlab-test/{tag.replace('.', '-')}"
    sha = local_hub.publish(repo, {"model.safetensors": path})
    listing = vars(next(f for f in list_families() if f.family == "vit"))["releases"]
    monkeypatch.setitem(listing, tag, Release(tag, repo, "vitlab", "model.safetensors", revision=sha, licence="test",
                                              metric={"top1": 1.0}, dataset="none"))


def test_eval_and_predict_with_a_release_of_the_runs_model_equal_its_own_weights(run_dir, local_hub, monkeypatch,
                                                                                  capsys):
    list_release(monkeypatch, local_hub, "vit_tiny_patch4_28.test", run_dir / "last.safetensors")
    answers = []
    for weights in ("last", "vit_tiny_patch4_28.test", "hf-hub:vitlab-test/vit_tiny_patch4_28-test"):
        assert main(["eval", str(run_dir), "--weights", weights, "--json", "--no-plot"]) == 0
        evaluation = json.loads(capsys.readouterr().out)
        image = next(IMAGE.glob("*.png"))
        assert main(["predict", str(run_dir), str(image), "--weights", weights, "--json"]) == 0
        answers.append((evaluation["accuracy"], json.loads(capsys.readouterr().out)))
    assert answers[0] == answers[1] == answers[2]


def test_weights_for_another_class_count_are_refused_for_inference(run_dir, local_hub, monkeypatch, tmp_path, capsys):
    other = save_weights(vitlab.create_model("vit_tiny_patch4_28", num_classes=7), tmp_path / "model.safetensors")
    list_release(monkeypatch, local_hub, "vit_tiny_patch4_28.seven", other)
    assert main(["eval", str(run_dir), "--weights", "vit_tiny_patch4_28.seven"]) == 2
    assert "fine-tune them: vitlab train --weights vit_tiny_patch4_28.seven" in capsys.readouterr().err


def test_export_takes_a_release_by_name(run_dir, local_hub, monkeypatch, tmp_path):
    list_release(monkeypatch, local_hub, "vit_tiny_patch4_28.test", run_dir / "last.safetensors")
    out = tmp_path / "release.onnx"
    assert main(["export", "vit_tiny_patch4_28.test", "--out", str(out), "--no-optimize"]) == 0
    import numpy as np
    import onnxruntime as ort
    import torch

    from vitlab.interop import load_model

    model = load_model(run_dir / "last.safetensors").eval()
    x = torch.randn(2, 1, 28, 28)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(got, model(x).detach().numpy(), atol=1e-4, rtol=1e-4)
    # the graph says how to prepare an image for it: what the release's file records, the run's own
    from vitlab.runtime.export import read_metadata

    run_preprocessing = json.loads((run_dir / "config.json").read_text())["data"]["preprocessing"]
    assert read_metadata(out)["preprocessing"] == run_preprocessing
