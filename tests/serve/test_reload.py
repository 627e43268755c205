"""`vitlab serve --reload`: a server following a run that is still training answers from one complete checkpoint,
the old or the new, never a half-written one, while the run's weights file is replaced under it."""

import copy
import shutil
import threading
import warnings

import pytest
import torch
from PIL import Image

from vitlab.checkpoint import save_weights
from vitlab.serve.runs import load_runs, predict

from ..conftest import EXAMPLES


def answer(run, image) -> list:
    return predict(run, image, "item.png")["top_k"]


def test_a_followed_run_answers_from_one_whole_checkpoint_while_training_replaces_it(trained, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(trained["cls"], folder)
    image = Image.open(EXAMPLES / "test0-ankle-boot.png")
    (run,) = load_runs([folder], reload=True)
    assert run.follows == folder / "best.safetensors"
    first = run.model
    second = copy.deepcopy(first)  # other weights: the checkpoint training writes next
    torch.manual_seed(1)
    with torch.no_grad():
        for param in second.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    expected = {}
    for name, model in (("first", first), ("second", second)):
        other = shutil.copytree(folder, tmp_path / name)
        save_weights(model, other / "best.safetensors")
        expected[name] = answer(load_runs([other])[0], image)
    assert expected["first"] != expected["second"]

    writes = 60
    done = threading.Event()

    def train_on() -> None:  # the loop's own writer: a whole new file, renamed over the old one
        for i in range(writes):
            save_weights(second if i % 2 == 0 else first, folder / "best.safetensors")
        done.set()

    writer = threading.Thread(target=train_on)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a half-written file would warn ("could not be loaded")
        writer.start()
        while not done.is_set():
            seen.append(answer(run, image))
        writer.join()
        seen.append(answer(run, image))
    assert all(top in (expected["first"], expected["second"]) for top in seen)
    assert expected["first"] in seen and expected["second"] in seen  # it followed the file, both ways
    assert seen[-1] == expected["first"]  # the last write (odd: first) is what it answers from now


def test_a_damaged_replacement_keeps_the_weights_it_had_with_a_warning(trained, tmp_path):
    folder = shutil.copytree(trained["cls"], tmp_path / "run")
    image = Image.open(EXAMPLES / "test0-ankle-boot.png")
    (run,) = load_runs([folder], reload=True)
    before = answer(run, image)
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\0" * 100)
    broken.replace(folder / "best.safetensors")  # an older writer's half file, renamed in by hand
    with pytest.warns(UserWarning, match="could not be loaded"):
        assert answer(run, image) == before
    assert answer(run, image) == before  # no second warning until the file is replaced again


def test_reload_follows_run_folders_on_torch_only(trained):
    with pytest.raises(ValueError, match="--reload follows run folders"):
        load_runs(["vit_tiny_patch16_224.augreg_in21k_ft_in1k"], reload=True)
    with pytest.raises(ValueError, match="--reload serves runs on torch"):
        load_runs([trained["cls"]], reload=True, runtime=lambda model, source: model)
