"""From options to runs and back: a run's length in optimizer steps for a task with epochs, options checked
against the chosen task, run folders written before tasks shared one loop still evaluated, and the weights a run
loads by default."""

import json

import pytest
import torch

from tests.engine.conftest import MINI, tiny_options
from vitlab.cli.main import main
from vitlab.data.sequences import SequenceTask
from vitlab.engine.run import RunDir
from vitlab.tasks import resume, train
from vitlab.tasks.seq2seq import Seq2SeqConfig, Seq2SeqTask


def test_steps_end_a_classification_run_mid_epoch_and_resume_exactly(tmp_path):
    # 183 training images in batches of 32: 5 steps an epoch; 7 steps end two fifths into the second epoch
    straight = train(**tiny_options(tmp_path / "straight", epochs=None, steps=8))
    assert straight["step"] == 8 and straight["epoch"] == pytest.approx(8 / 5, abs=1e-4)
    rows = RunDir(tmp_path / "straight").read_metrics()
    assert [row["step"] for row in rows] == [5, 8, 8]  # two validations, then the test, once
    train(**tiny_options(tmp_path / "split", epochs=None, steps=8, max_steps_this_run=7))
    assert RunDir(tmp_path / "split").load_state()["step"] == 7
    resume(tmp_path / "split")
    a, b = RunDir(tmp_path / "straight").read_weights(), RunDir(tmp_path / "split").read_weights()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0, msg=key)


def test_a_folder_run_resumed_mid_epoch_draws_as_the_uninterrupted_one(tmp_path):
    from tests.cli.test_train_eval_predict import make_folder

    folder = make_folder(tmp_path / "images", per_class=16)
    options = dict(data=str(folder), model="vit_tiny_patch4_28", img_size=16, batch_size=4, drop_path=0.2,
                   model_overrides={"dim": 32, "depth": 2, "num_heads": 2}, epochs=2, threads=1)
    train(**options, out=str(tmp_path / "straight"))  # 28 training images: 7 steps an epoch
    train(**options, out=str(tmp_path / "split"), max_steps_this_run=10)
    resume(tmp_path / "split")
    a, b = RunDir(tmp_path / "straight").read_weights(), RunDir(tmp_path / "split").read_weights()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=0, rtol=0, msg=key)


def test_an_option_of_another_task_is_refused(tmp_path, capsys):
    assert main(["train", "--task", "seq2seq", "--model", "vit_tiny_patch4_28", "--out", str(tmp_path / "r")]) == 2
    assert ("--model is an option of --task classification / detection / segmentation / restoration / vqgan / prior"
            " / mim, not of --task seq2seq"
            in capsys.readouterr().err)
    with pytest.raises(TypeError, match=r"unknown option.*'modle'"):
        train(modle="vit_tiny_patch4_28", out=str(tmp_path / "r"))


def test_a_classification_config_that_names_no_task_is_refused_with_the_way_out(tmp_path, capsys):
    """A layout of development versions before any release (no task recorded): no command reads it, each says so
    in one line and names the weights a new run can start from."""
    run = tmp_path / "old"
    train(**tiny_options(run, epochs=1))
    data = json.loads((run / "config.json").read_text())["data"]
    old = {"data": data, "recipe": {"model": "vit_tiny_patch4_28", "epochs": 2, "batch_size": 32, "img_size": 28,
                                    "crop_padding": 0, "hflip": True},
           "options": {"data": "fashion-mnist", "data_dir": str(MINI), "allow_partial_data": True, "seed": 0,
                       "skip_bad_images": False, "val_fraction": 0.1}, "model_overrides": {}}
    (run / "config.json").write_text(json.dumps(old))
    capsys.readouterr()
    for command in (["eval", str(run), "--json", "--no-plot"], ["train", "--resume", str(run)],
                    ["predict", str(run), str(MINI)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "names no task" in err and f"--weights {run / 'best.safetensors'}" in err and len(err.splitlines()) == 1


def test_a_seq2seq_config_that_names_no_task_is_refused(tmp_path, capsys):
    run = tmp_path / "old"
    config = Seq2SeqConfig(problem="copy", dim=16, depth=1, num_heads=2)
    model = Seq2SeqTask(config).build_model()
    RunDir(run).path.mkdir()
    RunDir(run).save_weights("last", model)
    problem = SequenceTask("copy", 10, 1, 10)
    old = {"options": {"task": "copy", "dim": 16, "depth": 1, "num_heads": 2, "steps": 20, "seed": 0},
           "task": {"name": "copy", "num_symbols": 10, "min_len": 1, "max_len": 10},
           "model": {}, "vocab": list(problem.vocab.symbols)}
    (run / "config.json").write_text(json.dumps(old))
    assert main(["translate", str(run), "1 2 3"]) == 2
    assert "names no task" in capsys.readouterr().err


def test_a_run_loads_its_selected_weights_by_default_and_its_last_without_a_best(tmp_path):
    from vitlab import runtime
    from vitlab.tasks.launch import load_run_model

    run = tmp_path / "run"
    train(**tiny_options(run, epochs=1))
    best = RunDir(run).load_model("last")
    with torch.no_grad():
        for parameter in best.parameters():
            parameter.add_(0.01)  # a best that differs from the last weights
    RunDir(run).save_weights("best", best)
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        expected, last = best(x), RunDir(run).load_model("last")(x)
        torch.testing.assert_close(load_run_model(run)(x), expected)
        torch.testing.assert_close(runtime.load(run)(x), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(load_run_model(run, "last")(x), last)  # a name asked for is what loads
        (run / "best.safetensors").unlink()  # a run that kept no best: its last
        torch.testing.assert_close(load_run_model(run)(x), last)
        with pytest.raises(FileNotFoundError):
            load_run_model(run, "best")
