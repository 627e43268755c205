"""Images for the generation tasks: Fashion-MNIST padded to 32×32 (and cropped back exactly), an image folder
resized, both held in memory as uint8."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.data.fashion_mnist import load_fashion_mnist
from vitlab.data.generation import load_generation_images, pad_to

from ..engine.conftest import MINI


def test_fashion_mnist_is_padded_and_crops_back_to_the_original():
    data = load_generation_images("fashion-mnist", MINI, size=32, strict_counts=False)
    original, labels = load_fashion_mnist("test", MINI, download=False, strict_counts=False)
    assert data.test.shape == (len(original), 1, 32, 32) and data.test.dtype == torch.uint8
    assert data.pad == 2 and data.channels == 1 and data.size == 32
    assert torch.equal(data.crop(data.test)[:, 0], original)
    assert torch.equal(data.test_labels, labels) and len(data.classes) == 10
    assert int(data.test[:, :, :2].max()) == 0 and int(data.test[:, :, :, -2:].max()) == 0  # a black border


def test_a_folder_is_resized_and_split(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (tmp_path / name).mkdir()
        for i in range(5):
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    data = load_generation_images(str(tmp_path), size=16, val_fraction=0.2)
    assert data.classes == ["cats", "dogs"] and data.pad == 0
    assert data.train.shape[1:] == (3, 16, 16) and data.train.dtype == torch.uint8
    assert len(data.train) + len(data.val) == 10 and len(data.val) == 2 and data.test is None  # flat: no test
    assert set(data.train_labels.tolist()) == {0, 1} and sorted(data.val_labels.tolist()) == [0, 1]  # stratified
    assert data.held_out("test")[2] == "val"  # where there is no test part, eval reads the validation part


def test_fashion_mnist_holds_validation_out_of_the_training_images():
    data = load_generation_images("fashion-mnist", MINI, size=32, strict_counts=False)
    train, _ = load_fashion_mnist("train", MINI, download=False, strict_counts=False)
    assert (len(data.train), len(data.val)) == (183, 17) and data.split["val"] == 17
    rows = {tuple(x.flatten().tolist()) for x in train}
    parts = [{tuple(x.flatten().tolist()) for x in data.crop(images)[:, 0]} for images in (data.train, data.val)]
    assert parts[0] | parts[1] <= rows and not parts[0] & parts[1]


def test_bad_data_says_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="fashion-mnist or a folder"):
        load_generation_images(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="even number"):
        pad_to(torch.zeros(1, 1, 28, 28, dtype=torch.uint8), 31)
