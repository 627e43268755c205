"""DeiT training from the command line on the committed Fashion-MNIST slice: a convnet teacher, then a distilled
student with every recipe option on; the teacher's mismatches are clear errors."""

import json
from pathlib import Path

import pytest
import torch

import vitlab
from vitlab.cli.main import main
from vitlab.engine.run import read_metrics
from vitlab.interop import load_model, read_state_dict

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
DATA = ["--data-dir", str(MINI), "--allow-partial-data", "--batch-size", "16"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "teacher"
    assert main(["train", *DATA, "--model", "resnet18_28", "--epochs", "1", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_distilled_student_with_the_whole_recipe(teacher, tmp_path, capsys):
    out = tmp_path / "student"
    code = main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--epochs", "2", "--out", str(out),
                 "--distill", "hard", "--teacher", str(teacher), "--randaugment", "9", "--mixup", "0.8",
                 "--cutmix", "1.0", "--random-erasing", "0.25", "--repeated-aug", "3", "--ema-decay", "0.99",
                 "--drop-path", "0.1"])
    assert code == 0, capsys.readouterr().err
    *rows, test = read_metrics(out)
    assert [r["epoch"] for r in rows] == [1, 2] and "test_acc" in test
    assert all(0 <= r["val_acc_ema"] <= 1 for r in rows)
    info = json.loads((out / "config.json").read_text())
    assert info["config"]["distill"] == "hard" and info["config"]["teacher"] == str(teacher.resolve())
    # the EMA file holds other weights than the trained model, and evaluates from the command line
    ema, last = read_state_dict(out / "ema.safetensors")[0], read_state_dict(out / "last.safetensors")[0]
    assert not torch.equal(ema["head_dist.weight"], last["head_dist.weight"])
    assert load_model(out / "ema.safetensors").num_prefix_tokens == 2
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["accuracy"] <= 1


@pytest.mark.slow
def test_fine_tuning_from_weights_with_layer_decay(teacher, tmp_path, capsys):
    base = tmp_path / "base"
    assert main(["train", *DATA, "--model", "deit_mini_patch7_28", "--epochs", "1", "--out", str(base)]) == 0
    tuned = tmp_path / "tuned"
    assert main(["train", *DATA, "--model", "deit_mini_patch7_28", "--epochs", "1", "--out", str(tuned),
                 "--weights", str(base), "--layer-decay", "0.75", "--lr", "1e-4"]) == 0
    # it started from the base run's weights, not from a fresh model: it is far closer to them
    torch.manual_seed(0)
    fresh = vitlab.create_model("deit_mini_patch7_28").state_dict()
    a, b = read_state_dict(base / "last.safetensors")[0], read_state_dict(tuned / "last.safetensors")[0]
    key = "blocks.0.attn.qkv.weight"
    assert (b[key] - a[key]).abs().mean() < 0.2 * (a[key] - fresh[key]).abs().mean()


def test_distill_without_teacher_and_a_mismatched_teacher_are_clear_errors(teacher, tmp_path, capsys):
    assert main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--distill", "hard",
                 "--out", str(tmp_path / "a")]) == 2
    assert "--teacher" in capsys.readouterr().err
    assert main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--distill", "hard", "--teacher",
                 str(tmp_path / "nowhere"), "--out", str(tmp_path / "b")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # a teacher trained at another image size sees other inputs than the student
    assert main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--distill", "soft", "--teacher",
                 str(teacher), "--img-size", "56", "--out", str(tmp_path / "c")]) == 2
    assert "other inputs" in capsys.readouterr().err
    # its weights file alone says as much: its preprocessing (the image size), its labels (the classes, in order)
    weights = teacher / "best.safetensors"
    assert main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--distill", "soft", "--teacher",
                 str(weights), "--img-size", "56", "--out", str(tmp_path / "d")]) == 2
    assert "img_size: teacher 28, student 56" in capsys.readouterr().err
    from safetensors.torch import save_file

    from vitlab.checkpoint import CONFIG_KEY

    tensors, metadata = read_state_dict(weights)
    config = json.loads(metadata[CONFIG_KEY])
    config["labels"] = list(reversed(config["labels"]))  # the same ten classes in another order
    save_file(tensors, str(tmp_path / "reordered.safetensors"), metadata={**metadata, CONFIG_KEY: json.dumps(config)})
    assert main(["train", *DATA, "--model", "deit_mini_distilled_patch7_28", "--distill", "soft", "--teacher",
                 str(tmp_path / "reordered.safetensors"), "--out", str(tmp_path / "e")]) == 2
    assert "classes: teacher ['Ankle boot'" in capsys.readouterr().err
