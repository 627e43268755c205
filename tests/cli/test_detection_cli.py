"""`vitlab train --task detection`, `vitlab eval` and `vitlab predict` on a tiny scenes set, through main([...])."""

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from vitlab.cli.main import main

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
TINY = ["--epochs", "2", "--batch-size", "8", "--eval-batch-size", "4", "--num-queries", "8"]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    assert main(["make-scenes", "--out", str(out), "--train", "16", "--val", "4", "--test", "3", "--size", "64",
                 "--scale", "16-32", "--objects", "1-3", "--data-dir", str(MINI), "--allow-partial-data"]) == 0
    return out


@pytest.fixture(scope="module")
def run_dir(scenes, tmp_path_factory):
    out = tmp_path_factory.mktemp("detr") / "run"
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(out), *TINY]) == 0
    return out


@pytest.mark.slow
def test_train_writes_coco_metrics_each_epoch(run_dir):
    *rows, test = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    for key in ("val_map", "val_map_50", "val_map_75", "val_map_small", "val_map_medium", "val_map_large",
                "val_mar_100", "train_loss_ce", "train_loss_bbox", "train_loss_giou", "train_class_error",
                "train_cardinality_error"):
        assert key in rows[-1], key
    assert {"test_map", "test_map_50"} <= set(test) and not any(k.startswith("test_") for r in rows for k in r)
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["task"] == "detection" and saved["model_config"]["num_queries"] == 8
    assert saved["data"]["classes"][:2] == ["T-shirt/top", "Trouser"]


@pytest.mark.slow
def test_eval_prints_the_coco_table_and_json(run_dir, capsys):
    capsys.readouterr()
    assert main(["eval", str(run_dir)]) == 0
    assert "AP @[IoU=0.50]" in capsys.readouterr().out
    assert main(["eval", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_100"):
        assert 0.0 <= result[key] <= 1.0 or result[key] == -1.0
    assert result["num_images"] == 3 and result["split"] == "test"  # the 3 test scenes, not the 4 val ones


@pytest.mark.slow
def test_predict_draws_boxes_and_gives_pixels(run_dir, scenes, tmp_path, capsys):
    images = sorted((scenes / "images" / "val").glob("*.png"))[:2]
    capsys.readouterr()
    assert main(["predict", str(run_dir), *map(str, images), "--out", str(tmp_path / "drawn"), "--threshold", "0.0",
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 2
    for item in results:
        assert Path(item["output"]).is_file()
        assert len(item["detections"]) == 8  # every query scores above 0
        for detection in item["detections"]:
            x0, y0, x1, y1 = detection["box"]
            assert -1 <= x0 <= x1 <= 65 and -1 <= y0 <= y1 <= 65  # pixels of the 64-pixel scene
            assert detection["label"] in json.loads((run_dir / "config.json").read_text())["data"]["classes"]
    assert main(["predict", str(run_dir), str(images[0]), "--threshold", "1.5"]) == 2


@pytest.mark.slow
def test_a_resumed_run_ends_where_a_straight_one_does(scenes, tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(straight), *TINY]) == 0
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(stopped), *TINY,
                 "--max-epochs-this-run", "1"]) == 0
    assert main(["train", "--resume", str(stopped)]) == 0
    a, b = load_file(straight / "last.safetensors"), load_file(stopped / "last.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.slow
def test_denoising_training_resumes_exactly_and_its_run_evaluates_and_predicts(scenes, tmp_path, capsys):
    dn = ["--dn-groups", "2", "--dn-box-noise", "0.4", "--dn-label-noise", "0.2"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(straight), *TINY, *dn]) == 0
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(stopped), *TINY, *dn,
                 "--max-epochs-this-run", "1"]) == 0
    assert main(["train", "--resume", str(stopped)]) == 0
    a, b = load_file(straight / "last.safetensors"), load_file(stopped / "last.safetensors")
    assert any(key.startswith("denoising.") for key in a)  # the run trained the denoising embeddings
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    rows = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(row["train_loss_ce_dn"]) for row in rows if "train_loss_ce_dn" in row)
    assert any("train_loss_ce_dn" in row for row in rows)
    capsys.readouterr()
    assert main(["eval", str(straight), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_detections"] == 3 * 8  # the matching queries only, as without
    assert main(["predict", str(straight), str(sorted((scenes / "images" / "val").glob("*.png"))[0]), "--json"]) == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--task", "detection"], "--data is needed"),
    (["train", "--task", "detection", "--data", "MISSING"], "has no COCO-format train split"),
    (["train", "--task", "detection", "--data", "SCENES", "--model", "vit_mini_patch7_28"], "must be a detector"),
    (["train", "--task", "detection", "--data", "SCENES", "--eos-coef", "0"], "--eos-coef must be in (0, 1]"),
    (["train", "--task", "detection", "--data", "SCENES", "--dn-groups", "-1"], "--dn-groups must be >= 0"),
    (["train", "--task", "detection", "--data", "SCENES", "--dn-box-noise", "2"], "--dn-box-noise must be in [0, 1]"),
])
def test_user_errors_give_one_line_and_rc_2(scenes, tmp_path, capsys, argv, message):
    argv = [str(tmp_path / "missing") if a == "MISSING" else str(scenes) if a == "SCENES" else a for a in argv]
    assert main([*argv, "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.whole_machine  # two processes, one per core
@pytest.mark.slow
def test_torchrun_two_processes_evaluate_the_whole_val_split(scenes, tmp_path, monkeypatch, capsys):
    """Each process detects on its shard; the gathered AP equals the AP of one process on the whole split."""
    import subprocess

    from tests.engine.test_distributed import torchrun

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "ddp"
    done = subprocess.run(torchrun("--task", "detection", "--data", str(scenes), "--out", str(out), "--threads", "1",
                                   *TINY), check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])  # the test, on the selected weights
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert row["test_num_detections"] == alone["num_detections"] == 3 * 8  # every query of every test image, once
    assert alone["map"] == pytest.approx(row["test_map"], abs=1e-9)
    assert alone["mar_100"] == pytest.approx(row["test_mar_100"], abs=1e-9)


@pytest.mark.slow
def test_pictures_script_draws_truth_above_predictions(run_dir, tmp_path):
    import importlib.util

    from PIL import Image

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "detr_pictures.py"
    spec = importlib.util.spec_from_file_location("detr_pictures", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main([str(run_dir), "--images", "2", "--out", str(tmp_path / "sheet.png")])
    width, height = Image.open(out).size
    assert width == height == 2 * 384  # two 64-pixel scenes enlarged to 384, side by side; truth above predictions
    assert not (tmp_path / ".detr_pictures").exists()


@pytest.mark.slow
def test_deformable_detr_trains_evaluates_and_predicts(scenes, tmp_path, capsys):
    out = tmp_path / "deformable"
    assert main(["train", "--task", "detection", "--model", "deformable_detr_small", "--data", str(scenes), "--out",
                 str(out), *TINY]) == 0
    *rows, test = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2] and all(0 <= row["val_map_50"] <= 1 for row in rows)
    assert 0 <= test["test_map_50"] <= 1
    assert "train_loss_ce_enc" not in rows[-1] and rows[-1]["train_loss"] > 0
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_images"] == 3 and result["num_detections"] == 3 * min(100, 8 * 10)  # top-100 of 8 × 10
    image = sorted((scenes / "images" / "val").glob("*.png"))[0]
    assert main(["predict", str(out), str(image), "--threshold", "0.0", "--json"]) == 0
    detections = json.loads(capsys.readouterr().out)[0]["detections"]
    assert len(detections) == 80 and detections[0]["score"] >= detections[-1]["score"]


@pytest.mark.slow
def test_backbone_weights_start_detr_from_a_classifier_run(scenes, tmp_path):
    classifier = tmp_path / "classifier"
    assert main(["train", "--model", "resnet18_tv_28", "--data-dir", str(MINI), "--allow-partial-data", "--epochs",
                 "1", "--batch-size", "64", "--out", str(classifier)]) == 0
    out = tmp_path / "detr"
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(out), "--backbone-weights",
                 str(classifier), *TINY, "--epochs", "1", "--backbone-lr", "0"]) == 0
    trained, started = load_file(out / "last.safetensors"), load_file(classifier / "last.safetensors")
    # the backbone kept the classifier's filters (backbone lr 0), spread over three channels
    assert (trained["backbone.layer2.0.conv1.weight"] == started["net.layer2.0.conv1.weight"]).all()
    assert (trained["backbone.conv1.weight"] * 3 - started["net.conv1.weight"]).abs().max() < 1e-5
