"""The commands end to end on the committed Fashion-MNIST slice and on a generated image folder."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.cli.main import main
from vitlab.data import load_fashion_mnist
from vitlab.data.fashion_mnist import FASHION_MNIST_MEAN, FASHION_MNIST_STD
from vitlab.engine.run import RunDir
from vitlab.interop import load_model, read_state_dict

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
TINY = ["--data-dir", str(MINI), "--allow-partial-data", "--model", "vit_tiny_patch4_28", "--batch-size", "32"]


PRINTED: dict[Path, str] = {}  # what `vitlab train` printed while making a run of this module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "fm"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["train", *TINY, "--epochs", "2", "--out", str(out)]) == 0
    PRINTED[out] = printed.getvalue()
    return out


def test_train_prints_the_final_accuracy(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and "val_acc" in rows[1] and "test_acc" in rows[2]  # two epochs, then the test once
    last = PRINTED[run_dir].strip().splitlines()[-1]  # the main job's line: the test figure of metrics.jsonl
    assert last.startswith(f"test accuracy: {rows[2]['test_acc']:.4f} after 2 epochs, "), last


def test_eval_json_equals_accuracy_computed_by_hand(run_dir, capsys):
    """The Fashion-MNIST recipe scores with test-time flip: each image by the mean of its own logits and its
    mirror image's; `--test-time-flip false` scores the image alone. Both by hand, from the model's two calls."""
    assert main(["eval", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main(["eval", str(run_dir), "--json", "--no-plot", "--test-time-flip", "false"]) == 0
    plain = json.loads(capsys.readouterr().out)
    images, labels = load_fashion_mnist("test", MINI, download=False, strict_counts=False)
    model = load_model(run_dir / f"{RunDir(run_dir).kept_weights('best')}.safetensors").eval()  # eval's default
    x = (images[:, None].float() / 255 - FASHION_MNIST_MEAN[0]) / FASHION_MNIST_STD[0]
    with torch.no_grad():
        logits, mirrored = model(x), model(torch.flip(x, dims=[3]))
    averaged = (logits + mirrored) / 2
    assert result["test_time_flip"] is True and plain["test_time_flip"] is False

    def right_and_near_ties(scores: torch.Tensor) -> tuple[int, int]:
        """The images right by hand, and those whose two best classes are within float noise of each other (eval
        batches the images otherwise, and on a model this young such a pair may swap places)."""
        top2 = scores.topk(2, dim=-1).values
        return int((scores.argmax(-1) == labels).sum()), int(((top2[:, 0] - top2[:, 1]) < 1e-4).sum())

    right, ties = right_and_near_ties(averaged)
    assert abs(round(result["accuracy"] * len(labels)) - right) <= ties, (result["accuracy"], right, ties)
    assert result["loss"] == pytest.approx(torch.nn.functional.cross_entropy(averaged, labels).item(), rel=1e-5)
    right, ties = right_and_near_ties(logits)
    assert abs(round(plain["accuracy"] * len(labels)) - right) <= ties, (plain["accuracy"], right, ties)
    assert plain["loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits, labels).item(), rel=1e-5)
    assert result["num_images"] == 100 and len(result["confusion"]) == 10
    assert sum(map(sum, result["confusion"])) == 100
    assert Image.open(run_dir / "confusion.png").size[0] > 100


def test_eval_text_output(run_dir, capsys):
    assert main(["eval", str(run_dir), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accuracy: ") and "Ankle boot" in out and "confusion matrix" in out


def test_predict_top_k_matches_the_model(run_dir, tmp_path, capsys):
    images, _ = load_fashion_mnist("test", MINI, download=False, strict_counts=False)
    paths = []
    for i in range(2):
        path = tmp_path / f"item{i}.png"
        Image.fromarray(images[i].numpy()).convert("RGB").save(path)  # an RGB file: converted to grayscale
        paths.append(str(path))
    assert main(["predict", str(run_dir), *paths, "--top-k", "3", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    model = load_model(run_dir / f"{RunDir(run_dir).kept_weights('best')}.safetensors").eval()  # predict's default
    x = (images[:2, None].float() / 255 - FASHION_MNIST_MEAN[0]) / FASHION_MNIST_STD[0]
    with torch.no_grad():  # the run's test-time flip: the mean of the image's and its mirror's logits
        probs = ((model(x) + model(torch.flip(x, dims=[3]))) / 2).softmax(-1)
    for item, row in zip(results, probs):
        top = item["top_k"]
        assert len(top) == 3 and top[0]["index"] == int(row.argmax())
        assert top[0]["probability"] == pytest.approx(row.max().item(), abs=1e-4)
        assert top[0]["probability"] >= top[1]["probability"] >= top[2]["probability"]
    assert main(["predict", str(run_dir), paths[0]]) == 0
    assert capsys.readouterr().out.startswith(paths[0] + ": ")


@pytest.mark.parametrize("command", ["train", "eval", "predict"])
def test_help_shows_every_option_with_its_default(command, capsys):
    from vitlab.cli.main import build_parser

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "usage:" in capsys.readouterr().out
    subparser = build_parser()._subparsers._group_actions[0].choices[command]
    for action in subparser._actions:  # a switch (no value) is off until given: only the others say their default
        if action.option_strings and action.dest != "help" and action.nargs != 0:
            assert "default" in (action.help or ""), f"{command} {action.option_strings} does not say its default"


def test_existing_run_folder_is_not_overwritten_silently(run_dir, capsys):
    assert main(["train", *TINY, "--epochs", "1", "--out", str(run_dir)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["train", "--resume", str(run_dir), "--lr", "0.1"]) == 2
    assert "cannot change: --lr" in capsys.readouterr().err


def test_bad_option_values_are_clear_errors(tmp_path, capsys):
    assert main(["train", *TINY, "--batch-size", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--batch-size must be at least 1, got 0" in capsys.readouterr().err


def test_wrong_model_name_lists_close_matches(tmp_path, capsys):
    assert main(["train", *TINY[:3], "--model", "vit_tiny_patch4", "--out", str(tmp_path / "x")]) == 2
    assert "did you mean vit_tiny_patch4_28" in capsys.readouterr().err


def test_eval_of_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "not a vitlab run folder" in capsys.readouterr().err


def make_folder(root: Path, per_class: int = 12, bad: bool = False) -> Path:
    """Two classes a ViT can tell apart: bright top half vs bright bottom half, in RGB, L and RGBA files."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(["top", "bottom"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (20, 20), dtype=np.uint8)
            if label == 0:
                pixels[:10] += 180
            else:
                pixels[10:] += 180
            mode = ["RGB", "L", "RGBA"][i % 3]
            Image.fromarray(pixels).convert(mode).save(root / name / f"{i}.png")
    if bad:
        (root / "top" / "broken.png").write_bytes(b"not an image at all")
    return root


FOLDER_MODEL = ["--model", "vit_tiny_patch4_28", "--img-size", "16", "--batch-size", "8", "--epochs", "2"]


def test_train_on_an_image_folder(tmp_path, capsys):
    folder = make_folder(tmp_path / "images")
    out = tmp_path / "run"
    assert main(["train", "--data", str(folder), *FOLDER_MODEL, "--out", str(out), "--val-fraction", "0.25"]) == 0
    info = json.loads((out / "config.json").read_text())
    assert info["data"]["classes"] == ["bottom", "top"] and info["data"]["channels"] == 3
    capsys.readouterr()
    assert main(["eval", str(out), "--json", "--no-plot", "--weights", "last"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_images"] == 6 and result["classes"] == ["bottom", "top"]
    assert result["split"] == "val"  # a flat folder has no test part: eval says it scored the validation images
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert result["accuracy"] == pytest.approx(last["val_acc"])  # same held-out images, same preprocessing
    assert main(["predict", str(out), str(folder / "top" / "1.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["top_k"][0]["class"] in ("bottom", "top")


def test_bad_image_is_named_or_skipped(tmp_path, capsys):
    folder = make_folder(tmp_path / "images", bad=True)
    assert main(["train", "--data", str(folder), *FOLDER_MODEL, "--out", str(tmp_path / "a")]) == 2
    assert "broken.png" in capsys.readouterr().err
    assert main(["train", "--data", str(folder), *FOLDER_MODEL, "--out", str(tmp_path / "b"),
                 "--skip-bad-images"]) == 0
    info = json.loads((tmp_path / "b" / "config.json").read_text())
    assert info["data"]["skipped_images"] == 1


@pytest.mark.slow
def test_a_preempted_training_exits_resumable_and_resume_auto_finishes_it_bit_for_bit(tmp_path, capsys):
    """`vitlab train --resume auto --out DIR` as a requeued job runs it: SIGTERM (a scheduler taking the machine)
    stops the first process after its step, with a checkpoint and the resume command, exit status 75; the same
    command again resumes there and ends on the weights of an uninterrupted run, bit for bit. The same command
    with other options is refused, naming what differs."""
    options = ["train", *TINY, "--epochs", "3", "--seed", "1", "--threads", "1", "--checkpoint-every-steps", "2"]
    straight = tmp_path / "straight"
    assert main([*options, "--out", str(straight)]) == 0

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "vitlab", *options, "--resume", "auto", "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run / "state.pt").exists() and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr[-2000:]
    assert "(SIGTERM)" in stderr and f"vitlab train --resume {run}" in stderr
    steps = torch.load(run / "state.pt", weights_only=True)["step"]
    capsys.readouterr()
    assert main([*options, "--resume", "auto", "--out", str(run), "--lr", "0.5"]) == 2
    assert "holds another run (lr: " in capsys.readouterr().err
    assert main([*options, "--resume", "auto", "--out", str(run)]) == 0
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] > steps  # it went on from there
    a = read_state_dict(straight / "last.safetensors")[0]
    b = read_state_dict(run / "last.safetensors")[0]
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=0, rtol=0, msg=key)


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_weights(tmp_path):
    """SIGKILL a real training process at an arbitrary moment; the checkpoint left behind is readable and
    resuming from it gives the weights of an uninterrupted run. (The uninterrupted run and the resumption run in
    this process, on its one thread, as the killed process does: only the one killed needs a process of its own.)"""
    options = ["train", *TINY, "--epochs", "3", "--seed", "1"]
    straight = tmp_path / "straight"
    assert main([*options, "--out", str(straight)]) == 0

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "vitlab", *options, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "state.pt").exists() and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # right after the first checkpoint: epochs are still to come
    proc.wait()
    epochs_done = torch.load(killed / "state.pt", weights_only=True)["epoch"]
    assert 1 <= epochs_done < 3
    assert main(["train", "--resume", str(killed)]) == 0
    a = read_state_dict(straight / "last.safetensors")[0]
    b = read_state_dict(killed / "last.safetensors")[0]
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0)
