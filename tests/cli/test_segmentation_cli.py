"""`vitlab train --task segmentation`, `vitlab eval` and `vitlab predict` on a tiny scenes set, through main([...])."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitlab.cli.main import main

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    assert main(["make-scenes", "--out", str(out), "--train", "8", "--val", "3", "--test", "2", "--size", "64",
                 "--data-dir", str(MINI), "--allow-partial-data"]) == 0
    return out


@pytest.fixture(scope="module")
def run_dir(scenes, tmp_path_factory):
    out = tmp_path_factory.mktemp("setr") / "run"
    assert main(["train", "--task", "segmentation", "--model", "setr_mla_small", "--data", str(scenes), "--out",
                 str(out), "--epochs", "2", "--batch-size", "4", "--crop-size", "64", "--eval-batch-size", "2"]) == 0
    return out


@pytest.mark.slow
def test_train_eval_and_predict(run_dir, scenes, tmp_path, capsys):
    *rows, test = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert 0 <= rows[-1]["val_miou"] <= 1 and 0 <= rows[-1]["val_pixel_acc"] <= 1 and "train_loss_aux" in rows[-1]
    assert 0 <= test["test_miou"] <= 1 and test["selected_by"] == "val_miou"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["task"] == "segmentation" and saved["loop"]["optimizer"] == "sgd"
    assert saved["data"]["classes"][:2] == ["background", "T-shirt/top"]

    capsys.readouterr()
    assert main(["eval", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"miou", "pixel_acc", "iou_per_class"} and result["num_images"] == 2
    assert list(result["iou_per_class"]) == saved["data"]["classes"] and result["split"] == "test"
    assert result["miou"] == pytest.approx(test["test_miou"])  # the same test split, the same selected weights
    assert main(["eval", str(run_dir), "--json", "--split", "val", "--weights", "last"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_images"] == 3 and result["miou"] == pytest.approx(rows[-1]["val_miou"])
    assert main(["eval", str(run_dir)]) == 0
    assert "mIoU" in capsys.readouterr().out

    image = sorted((scenes / "images" / "val").glob("*.png"))[0]
    assert main(["predict", str(run_dir), str(image), "--out", str(tmp_path / "out"), "--json"]) == 0
    item = json.loads(capsys.readouterr().out)[0]
    mask = np.asarray(Image.open(item["mask"]))  # palette indices are the classes
    assert mask.shape == (64, 64) and Image.open(item["overlay"]).size == (64, 64)
    shares = {saved["data"]["classes"][i]: round(float(c) / mask.size, 4)
              for i, c in enumerate(np.bincount(mask.ravel())) if c}
    assert item["classes"] == shares
