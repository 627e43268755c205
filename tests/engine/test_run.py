"""RunDir: every kind of damaged file gives an error that names it and says what to do; starting over removes every
file a run writes; a write killed half way leaves the previous file readable."""

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch

import vitlab.checkpoint
from tests.engine.conftest import tiny_options
from vitlab.cli.main import main
from vitlab.engine.run import RUN_FILES, RunDir, RunFileError
from vitlab.models import create_model
from vitlab.tasks import train
from vitlab.tasks.classification import ClassificationTask


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    train(**tiny_options(out, epochs=1, ema_decay=0.9), curves="end")  # every file a run writes, its picture too
    return out


def copy_run(source, target):
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_weights_name_the_file_and_the_way_out(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path / "run")
    cut_in_half(run / "last.safetensors")
    with pytest.raises(RunFileError, match=r"last\.safetensors is damaged.*--weights best"):
        RunDir(run).load_model("last")
    assert main(["eval", str(run), "--weights", "last"]) == 2
    err = capsys.readouterr().err.strip()
    assert "last.safetensors is damaged" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert main(["eval", str(run), "--weights", "best", "--no-plot"]) == 0  # the way out works


def test_truncated_state_cannot_resume_and_says_to_start_from_the_weights(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path / "run")
    (run / "state.prev.pt").unlink(missing_ok=True)  # a folder an older vitlab wrote: no previous checkpoint
    cut_in_half(run / "state.pt")
    with pytest.raises(RunFileError, match=r"state\.pt is damaged.*--weights .*last\.safetensors"):
        RunDir(run).load_state()
    assert main(["train", "--resume", str(run), "--epochs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "state.pt is damaged" in err and len(err.splitlines()) == 1
    (run / "state.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(RunFileError, match=r"state\.pt is damaged"):
        RunDir(run).load_state()


def test_a_damaged_last_checkpoint_falls_back_to_the_one_before_and_says_so(tmp_path):
    """Each save keeps the checkpoint before it whole (state.prev.pt); a state.pt cut short (a machine that died
    while an older writer wrote it) or missing resumes from that one, with a warning naming it."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.save_state({"step": 8, "weights": torch.arange(4.0)})
    assert not run.file("state.prev.pt").exists()
    run.save_state({"step": 16, "weights": torch.arange(4.0) * 2})
    assert run.load_state()["step"] == 16 and torch.load(run.file("state.prev.pt"))["step"] == 8
    cut_in_half(run.file("state.pt"))
    with pytest.warns(UserWarning, match=r"state\.pt is damaged.*resuming from the checkpoint before it, "
                                         r"state\.prev\.pt \(step 8\)"):
        assert run.load_state()["step"] == 8
    run.file("state.pt").unlink()
    with pytest.warns(UserWarning, match=r"state\.pt is missing.*state\.prev\.pt"):
        assert run.load_state()["step"] == 8
    cut_in_half(run.file("state.prev.pt"))  # nothing whole left: the error is the last file's own
    run.save_state({"step": 24})
    cut_in_half(run.file("state.pt"))
    with pytest.raises(RunFileError, match=r"state\.pt is damaged"):
        run.load_state()


def test_a_disk_that_fills_up_mid_save_leaves_the_checkpoint_as_it_was_and_says_how_much_is_needed(tmp_path,
                                                                                                  monkeypatch):
    import errno

    from vitlab.atomic import DiskFullError

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.save_state({"step": 8, "weights": torch.zeros(300_000)})
    before = run.file("state.pt").read_bytes()

    def full_disk(obj, f):
        f.write(b"x" * 100_000)  # part of the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(DiskFullError, match=r"the disk filled up while writing .*state\.pt \(0 MiB written, "
                                            r"\d+ MiB free now\); state\.pt is intact.*Free about 1 MiB"):
        run.save_state({"step": 16, "weights": torch.ones(300_000)})
    assert run.file("state.pt").read_bytes() == before and not run.file("state.prev.pt").exists()
    assert sorted(p.name for p in run.path.iterdir()) == ["state.pt"]  # no partial file left behind
    monkeypatch.undo()
    assert run.load_state()["step"] == 8


def test_invalid_config_json_is_named(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path / "run")
    text = (run / "config.json").read_text()
    (run / "config.json").write_text(text[: len(text) // 2])
    with pytest.raises(RunFileError, match=r"config\.json is damaged: it is not valid JSON"):
        RunDir(run).read_config()
    for argv in (["eval", str(run)], ["predict", str(run), "x.png"], ["train", "--resume", str(run)]):
        assert main(argv) == 2
        assert "config.json is damaged" in capsys.readouterr().err


def test_overwrite_removes_every_file_a_run_writes(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    assert main(["eval", str(run), "--json"]) == 0  # adds confusion.png
    (run / ".last.safetensors.abc.tmp").write_bytes(b"left by a killed write")
    (run / ".notes.tmp").write_text("the user's own, which no run writes")
    shutil.copyfile(run / "state.pt", run / "state.prev.pt")  # a run with a second checkpoint keeps its first
    written = {path.name for path in run.iterdir()}
    assert {"ema.safetensors", "confusion.png", *RUN_FILES} <= written
    RunDir(run).prepare(overwrite=True, extra_files=ClassificationTask.extra_files)
    assert list(run.iterdir()) == [run / ".notes.tmp"]
    # through a real second run without EMA: no stale ema.safetensors is left to be mistaken for this run's
    run2 = copy_run(finished_run, tmp_path / "run2")
    with pytest.raises(ValueError, match="already holds a run"):
        train(**tiny_options(run2, epochs=1))
    train(**tiny_options(run2, epochs=1), overwrite=True)
    assert not (run2 / "ema.safetensors").exists()


def test_overwrite_removes_the_detections_eval_wrote_into_a_detection_run(trained, tmp_path, capsys):
    """`vitlab eval` writes a detector's COCO results into its run, one file per split: a run started over in that
    folder removes them with the rest of the old run's files (they would read as the new run's), and keeps the
    user's own."""
    from vitlab.tasks.detection import DetectionTask

    run = tmp_path / "run"
    shutil.copytree(trained["detr"], run, ignore=shutil.ignore_patterns("runtime"))
    written = set()
    for split in ("test", "val"):
        capsys.readouterr()
        assert main(["eval", str(run), "--split", split, "--json"]) == 0
        written.add(Path(json.loads(capsys.readouterr().out)["results_file"]).name)
    assert written == {"coco-results-test.json", "coco-results-val.json"}
    assert written <= set(DetectionTask.extra_files)
    (run / "notes.txt").write_text("the user's own")
    RunDir(run).prepare(overwrite=True, extra_files=DetectionTask.extra_files)
    assert [p.name for p in run.iterdir() if p.is_file()] == ["notes.txt"]


def test_a_write_killed_half_way_leaves_the_previous_file(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    model = create_model("vit_tiny_patch4_28", dim=32, depth=1, num_heads=2)
    run.save_weights("last", model)
    run.write_config({"task": "classification", "n": 1})
    before = (tmp_path / "last.safetensors").read_bytes()

    def writes_half_then_dies(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(safetensors.torch.save(tensors, metadata=metadata)[:100])
        raise KeyboardInterrupt("killed while writing")

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(vitlab.checkpoint, "save_file", writes_half_then_dies)  # where save_weights writes
    with pytest.raises(KeyboardInterrupt):
        run.save_weights("last", model)
    monkeypatch.setattr(json, "dumps", dies)
    with pytest.raises(KeyboardInterrupt):
        run.write_config({"task": "classification", "n": 2})
    monkeypatch.undo()
    assert (tmp_path / "last.safetensors").read_bytes() == before
    assert run.load_model("last") is not None and run.read_config()["n"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "last.safetensors"]  # no temporary files


def test_metrics_skip_a_cut_line_and_are_truncated_atomically(tmp_path):
    run = RunDir(tmp_path)
    for step in (1, 2, 3):
        run.append_metrics({"step": step, "loss": 1.0 / step})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "lo')  # a kill in the middle of a line
    assert [row["step"] for row in run.read_metrics()] == [1, 2, 3]
    run.keep_metrics(until_step=2)
    assert [row["step"] for row in run.read_metrics()] == [1, 2]
    assert (tmp_path / "metrics.jsonl").read_text().endswith("\n")


def test_missing_files_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a vitlab run folder"):
        RunDir(tmp_path).read_config()
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        RunDir(tmp_path).load_state()
    with pytest.raises(FileNotFoundError, match="has not reached its first evaluation"):
        RunDir(tmp_path).load_model("best")
