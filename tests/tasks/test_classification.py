"""Classification on the loop: the run folder it writes, repeatable seeds, exact resume after a kill, atomic
state writes, bf16."""

import json
import os

import pytest
import torch
from PIL import Image

from tests.engine.conftest import tiny_options
from vitlab.engine.loaders import TensorLoader
from vitlab.engine.run import RunDir, read_metrics
from vitlab.interop import read_state_dict
from vitlab.tasks import load_run, resume, train
from vitlab.tasks.classification import ClassificationTask


def weights(run_dir, which="last"):
    return read_state_dict(run_dir / f"{which}.safetensors")[0]


def test_tensor_loader_order_is_a_permutation_fixed_by_seed_and_epoch():
    images = torch.arange(10, dtype=torch.uint8).view(10, 1, 1).expand(10, 2, 2).contiguous()
    labels = torch.arange(10)
    loader = TensorLoader(images, labels, batch_size=4, mean=[0.0], std=[1.0], shuffle=True, seed=3)
    epoch0 = torch.cat([y for _, y in loader])
    assert sorted(epoch0.tolist()) == list(range(10)) and len(loader) == 3
    assert torch.equal(epoch0, torch.cat([y for _, y in loader]))
    loader.set_epoch(1)
    assert not torch.equal(epoch0, torch.cat([y for _, y in loader]))
    x, y = next(iter(loader))
    torch.testing.assert_close(x[:, 0, 0, 0], y.float() / 255)  # pixels scaled to [0, 1] and normalised


def test_run_folder_contents_and_metrics(tmp_path):
    result = train(**tiny_options(tmp_path / "run"), curves="end")
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "last.safetensors", "best.safetensors", "state.pt", "curves.png"):
        assert (run / name).is_file(), name
    *rows, test_row = read_metrics(run)
    assert [r["epoch"] for r in rows] == [1, 2]
    assert {"train_loss", "train_acc", "val_loss", "val_acc", "lr", "elapsed_s"} <= set(rows[0])
    assert not any(key.startswith("test_") for row in rows for key in row)  # the test set is not looked at ...
    assert {"test_loss", "test_acc"} <= set(test_row) and test_row["selected_by"] == "val_acc"  # ... until the end
    assert result["test_acc"] == test_row["test_acc"] and result["val_acc"] == rows[-1]["val_acc"]
    assert Image.open(run / "curves.png").size == (1000, 400)
    info = json.loads((run / "config.json").read_text())
    assert info["data"]["classes"][0] == "T-shirt/top" and info["loop"]["epochs"] == 2
    # 5,000 of Fashion-MNIST's 60,000 training images for validation: of the 200-image fixture, 17
    assert info["data"]["split"] == {"train": 183, "val": 17, "test": 100, "val_from": "train",
                                     "val_fraction": 5000 / 60000, "seed": 0}
    assert info["task"] == "classification"
    model, _ = load_run(run)
    assert model.config.dim == 32


def test_seed_makes_a_run_repeatable(tmp_path):
    train(**tiny_options(tmp_path / "a", epochs=1))
    train(**tiny_options(tmp_path / "b", epochs=1))
    train(**tiny_options(tmp_path / "c", epochs=1, seed=1))
    a, b, c = weights(tmp_path / "a"), weights(tmp_path / "b"), weights(tmp_path / "c")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)
    assert not torch.equal(a["blocks.0.attn.qkv.weight"], c["blocks.0.attn.qkv.weight"])


def test_interrupted_then_resumed_equals_straight_run(tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    train(**tiny_options(straight, epochs=3))

    # a run that dies in the middle of its second epoch, after one checkpoint
    resumed = tmp_path / "resumed"
    real = ClassificationTask.loss
    calls = []

    def dying(self, model, batch):  # 183 training images in batches of 32: 5 steps an epoch; die in the second
        calls.append(1)
        if len(calls) == 8:
            raise KeyboardInterrupt("killed")
        return real(self, model, batch)

    monkeypatch.setattr(ClassificationTask, "loss", dying)
    with pytest.raises(KeyboardInterrupt):
        train(**tiny_options(resumed, epochs=3))
    monkeypatch.setattr(ClassificationTask, "loss", real)
    assert [r["epoch"] for r in read_metrics(resumed)] == [1]
    resume(resumed)  # what `vitlab train --resume RUN_DIR` does
    a, b = weights(straight), weights(resumed)
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0)
    assert [r["epoch"] for r in read_metrics(resumed)] == [1, 2, 3, 3]  # the last row: the test, once
    assert read_metrics(resumed)[-1]["test_acc"] == read_metrics(straight)[-1]["test_acc"]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    run.save_state({"step": 1})
    real_save = torch.save

    def crash(obj, f, *a, **kw):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        run.save_state({"step": 2})
    monkeypatch.setattr(torch, "save", real_save)
    assert run.load_state()["step"] == 1  # the last good one, intact
    assert os.listdir(tmp_path) == ["state.pt"]  # no temporary file left behind


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        RunDir(tmp_path).load_state()


@pytest.mark.slow
def test_bf16_autocast_trains(tmp_path):
    result = train(**tiny_options(tmp_path / "bf16", epochs=1, bf16=True))
    assert 0.0 <= result["test_acc"] <= 1.0 and result["train_loss"] < 10
    fp32 = train(**tiny_options(tmp_path / "fp32", epochs=1))
    assert result["train_loss"] != fp32["train_loss"]  # autocast really changed the arithmetic


def test_int8_agreement_under_test_time_flip_compares_each_images_mean_answer():
    """With test-time flip a call holds the images, then their mirrors; int8 agrees where the mean answers agree.
    Built so that int8 keeps the top-1 class of each view, yet the mean of the views flips to the other class."""
    from vitlab.tasks.classification.config import ClassificationConfig
    from vitlab.tasks.classification.evaluate import MirrorAveraged

    flipping = ClassificationTask(ClassificationConfig(data="fashion-mnist"))  # the recipe scores with the flip
    plain = ClassificationTask(ClassificationConfig(data="fashion-mnist", test_time_flip=False))
    fp32 = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 0.5], [1.0, 0.0]])  # image 0, image 1, their mirrors
    int8 = torch.tensor([[0.9, 0.0], [3.0, 0.0], [0.0, 0.95], [1.0, 0.0]])
    assert flipping.int8_agreement(fp32, int8) == (1.0, 2)  # image 0's means: (0.5, 0.25) against (0.45, 0.475)
    assert plain.int8_agreement(fp32, int8) == (4.0, 4)  # every view alone keeps its class

    class RowsApart(torch.nn.Module):  # each image's logits from its own pixels: the left column, the right one
        def forward(self, x):
            return torch.stack([x[:, 0, :, 0].sum(1), x[:, 0, :, -1].sum(1)], -1)

    images = torch.randn(3, 1, 4, 5)
    model = RowsApart()
    expected = (model(images) + model(torch.flip(images, dims=[3]))) / 2
    torch.testing.assert_close(MirrorAveraged(model)(images), expected)
