"""`vitlab train --task mim` (MAE pretraining) on a tiny scenes set, resumed exactly, then a SETR started from it,
through main([...])."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vitlab.cli.main import main
from vitlab.data.unlabelled import unlabelled_split

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
TINY = ["--epochs", "2", "--batch-size", "4", "--img-size", "64", "--eval-batch-size", "4"]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    assert main(["make-scenes", "--out", str(out), "--train", "8", "--val", "3", "--test", "2", "--size", "64",
                 "--data-dir", str(MINI), "--allow-partial-data"]) == 0
    return out


@pytest.fixture(scope="module")
def run_dir(scenes, tmp_path_factory):
    out = tmp_path_factory.mktemp("mim") / "run"
    assert main(["train", "--task", "mim", "--data", str(scenes), "--out", str(out), *TINY]) == 0
    return out


def test_the_splits_of_a_segmentation_folder_are_its_images(scenes, tmp_path):
    assert [p.parent.name for p in unlabelled_split(scenes, "train")] == ["train"] * 8
    assert len(unlabelled_split(scenes, "val")) == 3 and len(unlabelled_split(scenes, "test")) == 2
    flat = tmp_path / "flat" / "deep"
    flat.mkdir(parents=True)
    for image in unlabelled_split(scenes, "train")[:3]:
        (flat / image.name).write_bytes(image.read_bytes())
    assert len(unlabelled_split(tmp_path / "flat", "train")) == 3 and unlabelled_split(tmp_path / "flat", "val") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="holds no images"):
        unlabelled_split(empty, "train")


@pytest.mark.slow
def test_pretraining_logs_the_reconstruction_loss_and_selects_on_val(run_dir):
    *rows, test = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert all(math.isfinite(row["val_loss"]) and row["val_loss"] > 0 for row in rows)
    assert test["selected_by"] == "val_loss" and math.isfinite(test["test_loss"])
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["task"] == "mim" and saved["data"]["num_train"] == 8 and saved["data"]["num_test"] == 2
    assert saved["loop"]["betas"] == [0.9, 0.95]  # MAE's AdamW


@pytest.mark.slow
def test_a_resumed_pretraining_ends_where_a_straight_one_does(scenes, run_dir, tmp_path):
    stopped = tmp_path / "stopped"
    assert main(["train", "--task", "mim", "--data", str(scenes), "--out", str(stopped), *TINY,
                 "--max-epochs-this-run", "1"]) == 0
    assert main(["train", "--resume", str(stopped)]) == 0
    a, b = load_file(run_dir / "last.safetensors"), load_file(stopped / "last.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    # its record keeps the command that started it, and says what resumed it
    saved = json.loads((stopped / "config.json").read_text())
    assert saved["command"].startswith("vitlab train --task mim") and saved["command"].endswith("1")
    assert saved["resumed_with"] == f"vitlab train --resume {stopped}"


@pytest.mark.slow
def test_setr_starts_from_the_pretraining_run(scenes, run_dir, tmp_path):
    import vitlab
    from vitlab.tasks.segmentation.task import load_start

    model = vitlab.create_model("setr_mla_small", img_size=64)
    load_start(model, str(run_dir))  # what `--weights RUN` does: the run's best weights, strictly
    encoder, setr = load_file(run_dir / "best.safetensors"), model.state_dict()
    for key in ("blocks.0.attn.qkv.weight", "blocks.5.mlp.fc1.weight", "patch_embed.proj.weight"):
        assert torch.equal(setr[f"backbone.{key}"], encoder[key]), key
    out = tmp_path / "setr"
    assert main(["train", "--task", "segmentation", "--model", "setr_mla_small", "--data", str(scenes), "--out",
                 str(out), "--weights", str(run_dir), "--epochs", "1", "--batch-size", "4", "--crop-size", "64",
                 "--eval-batch-size", "2"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["weights"] == str(run_dir)


def test_user_errors_give_one_line_and_rc_2(scenes, tmp_path, capsys):
    assert main(["train", "--task", "mim", "--out", str(tmp_path / "a")]) == 2
    assert "--data is needed" in capsys.readouterr().err
    assert main(["train", "--task", "mim", "--data", str(scenes), "--mask-ratio", "1", "--out",
                 str(tmp_path / "b")]) == 2
    assert "--mask-ratio must be in (0, 1)" in capsys.readouterr().err
    assert main(["train", "--task", "mim", "--data", str(scenes), "--model", "vit_tiny_patch4_28", "--out",
                 str(tmp_path / "c")]) == 2
    assert "must be a masked autoencoder" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_and_predict_a_pretraining_run(run_dir, scenes, tmp_path, capsys):
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    test = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert result["split"] == "test" and result["num_images"] == 2
    assert result["loss"] == pytest.approx(test["test_loss"], rel=1e-5)  # the same masks, the selected weights
    image = unlabelled_split(scenes, "val")[0]
    assert main(["predict", str(run_dir), str(image), "--out", str(tmp_path / "drawn"), "--json"]) == 0
    item = json.loads(capsys.readouterr().out)[0]
    from PIL import Image

    assert Image.open(item["output"]).size == (3 * 64, 64) and item["hidden"] == 0.75
