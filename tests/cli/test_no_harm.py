"""No command deletes or corrupts what it was given, and every ordinary mistake is one clear line: exit status 2,
one line on stderr naming the path, no traceback, and nothing written (the folder's checksum unchanged)."""

import hashlib
import os
import socket
import stat
from pathlib import Path

import pytest
import torch

import vitlab
from vitlab.checkpoint import save_weights
from vitlab.cli.main import main


def checksum(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: its relative path -> the sha256 of a file's bytes, or its kind."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif not path.is_symlink():
            found[str(path.relative_to(folder))] = "dir" if path.is_dir() else stat.filemode(path.lstat().st_mode)
    return found


def refused(capsys, argv: list[str], folder: Path, *said: str) -> str:
    """Run `vitlab argv`: it must fail with status 2, in one line that says each of `said`, leaving `folder` as it
    was."""
    before = checksum(folder)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"vitlab {argv[0]}: error: ") and "Traceback" not in err
    for text in said:
        assert text in err, err
    assert checksum(folder) == before
    return err


@pytest.fixture
def weights(tmp_path) -> Path:
    torch.manual_seed(0)
    return save_weights(vitlab.create_model("vit_mini_patch7_28", depth=1), tmp_path / "given" / "mini.safetensors")


# -- the three destructive cases ------------------------------------------------------------------------------------
def test_train_refuses_an_out_folder_holding_its_weights_and_deletes_nothing(tmp_path, weights, capsys):
    """A folder of weights and notes, no run: --out on it with --weights from it is refused by name; without
    --weights, the files a run would replace are named (and --overwrite is the way to replace them)."""
    folder = tmp_path / "W"
    folder.mkdir()
    for name in ("best.safetensors", "last.safetensors"):
        (folder / name).write_bytes(weights.read_bytes())
    (folder / "notes.txt").write_text("what these weights are")
    refused(capsys, ["train", "--out", str(folder), "--weights", str(folder / "best.safetensors")], tmp_path,
            "--weights", "best.safetensors", "nothing was written")
    refused(capsys, ["train", "--out", str(folder), "--epochs", "1"], tmp_path,
            "best.safetensors", "last.safetensors", "--overwrite")


def test_fine_tuning_a_run_into_itself_is_refused_before_the_folder_is_emptied(tmp_path, weights, capsys):
    run = tmp_path / "RUN"
    run.mkdir()
    (run / "best.safetensors").write_bytes(weights.read_bytes())
    (run / "config.json").write_text('{"task": "classification"}')
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    refused(capsys, ["train", "--out", str(run), "--overwrite", "--weights", str(run / "best.safetensors")],
            tmp_path, "--weights", "nothing was written")


def test_convert_refuses_to_write_over_its_source(tmp_path, capsys):
    source = tmp_path / "X.pth"
    torch.save(vitlab.create_model("vit_mini_patch7_28", depth=1).state_dict(), source)
    refused(capsys, ["convert", str(source), str(source), "--model", "vit_mini_patch7_28"], tmp_path, "X.pth")
    same = tmp_path / "X.safetensors"
    save_weights(vitlab.create_model("vit_mini_patch7_28", depth=1), same)
    refused(capsys, ["convert", str(same), str(same)], tmp_path, "the source itself")


def test_a_failed_start_leaves_no_folder_behind(tmp_path, capsys):
    damaged = tmp_path / "cut.safetensors"
    damaged.write_bytes(b"")
    out = tmp_path / "new-run"
    refused(capsys, ["train", "--out", str(out), "--weights", str(damaged), "--model", "vit_mini_patch7_28"],
            tmp_path, "cut.safetensors", "0 bytes")
    assert not out.exists()


# -- every command, each kind of bad path ---------------------------------------------------------------------------
def bad_path(kind: str, root: Path, weights: Path) -> Path:
    """A path of `kind` under `root`: whose parent is a file, a folder where a file is wanted, a file that cannot be
    read, a weights file cut in half, an empty one."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == "parent-is-file":
        (root / "a-file").write_text("not a folder")
        return root / "a-file" / "x.safetensors"
    if kind == "folder":
        (root / "x.safetensors").mkdir()
        return root / "x.safetensors"
    if kind == "unreadable":
        path = root / "x.safetensors"
        if os.geteuid() == 0:  # root reads a file of mode 000; a socket file nobody can read as a file
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            server.close()
        else:
            path.write_bytes(weights.read_bytes())
            path.chmod(0)
        return path
    data = weights.read_bytes()
    path = root / "x.safetensors"
    path.write_bytes(data[: len(data) // 2] if kind == "truncated" else b"")
    return path


READ_KINDS = ["parent-is-file", "folder", "unreadable", "truncated", "empty"]
READERS = {  # command line with {bad} the path a command reads, {out} a fresh output path
    "train": ["train", "--weights", "{bad}", "--model", "vit_mini_patch7_28", "--out", "{out}"],
    "convert": ["convert", "{bad}", "{out}.safetensors"],
    "export": ["export", "{bad}", "--format", "onnx", "--out", "{out}.onnx"],
    "predict": ["predict", "{bad}", "{image}"],
}


@pytest.mark.parametrize("kind", READ_KINDS)
@pytest.mark.parametrize("command", list(READERS))
def test_every_command_says_a_bad_input_path_in_one_line(command, kind, tmp_path, weights, capsys):
    bad = bad_path(kind, tmp_path / "bad", weights)
    image = tmp_path / "given" / "shirt.png"
    from PIL import Image

    Image.new("L", (28, 28)).save(image)
    argv = [part.format(bad=bad, out=tmp_path / "out", image=image) for part in READERS[command]]
    refused(capsys, argv, tmp_path, bad.name if kind != "parent-is-file" else "a-file")
    assert not (tmp_path / "out").exists()


WRITERS = {  # command line with {bad} the path a command writes
    "train": ["train", "--weights", "{weights}", "--model", "vit_mini_patch7_28", "--out", "{bad}"],
    "convert": ["convert", "{weights}", "{bad}"],
    "export": ["export", "{weights}", "--format", "onnx", "--out", "{bad}"],
}


@pytest.mark.parametrize("kind", ["parent-is-file", "folder"])
@pytest.mark.parametrize("command", list(WRITERS))
def test_every_command_says_a_bad_output_path_in_one_line(command, kind, tmp_path, weights, capsys):
    bad = bad_path(kind, tmp_path / "bad", weights)
    if command == "export":
        bad = bad.with_suffix(".onnx")
        if kind == "folder":
            bad.mkdir()
    if command == "train" and kind == "folder":  # a run folder is a folder: a file is what is wrong there
        bad = tmp_path / "bad" / "a-run"
        bad.write_text("a file where the run folder goes")
    argv = [part.format(bad=bad, weights=weights) for part in WRITERS[command]]
    refused(capsys, argv, tmp_path, "a-file" if kind == "parent-is-file" else bad.name)


def test_files_are_written_with_the_users_umask(tmp_path):
    from vitlab.atomic import write_json

    for mask, mode in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
        before = os.umask(mask)
        try:
            write_json(tmp_path / f"{mask:o}.json", {"a": 1})
            weights = save_weights(vitlab.create_model("vit_mini_patch7_28", depth=1), tmp_path / f"{mask:o}.st")
        finally:
            os.umask(before)
        assert stat.S_IMODE((tmp_path / f"{mask:o}.json").stat().st_mode) == mode
        assert stat.S_IMODE(weights.stat().st_mode) == mode


def test_output_files_are_named_by_stem_and_never_over_an_input_or_each_other(tmp_path):
    from vitlab.atomic import output_files

    a, b = tmp_path / "in" / "a.png", tmp_path / "other" / "b.jpg"
    assert output_files([a, b], tmp_path / "out") == [(tmp_path / "out" / "a.png",), (tmp_path / "out" / "b.png",)]
    assert output_files([a], tmp_path, "_mask", "_overlay") == [(tmp_path / "a_mask.png", tmp_path / "a_overlay.png")]
    assert output_files([a, a], tmp_path / "out") == [(tmp_path / "out" / "a.png",)] * 2  # one image given twice
    with pytest.raises(ValueError, match=r"writing .*in/a\.png would replace .*in/a\.png, an input of this command"):
        output_files([a, b], tmp_path / "in")
    with pytest.raises(ValueError, match=r"a_mask\.png would replace"):  # another input's name
        output_files([a, tmp_path / "in" / "a_mask.png"], tmp_path / "in", "_mask")
    for twins in ([a, tmp_path / "other" / "a.png"], [a, tmp_path / "in" / "a.jpg"]):
        with pytest.raises(ValueError, match=r"would both be written to .*out/a\.png"):
            output_files(twins, tmp_path / "out")


def test_predicting_into_the_images_own_folder_is_refused_and_the_images_kept(trained, tmp_path, capsys):
    """A detector's pictures are NAME.png: drawn into the folder of the PNGs they come from, they would replace
    them. Refused, as two images of one name from two folders are, before anything is read or written; the same
    for a ViT's attention strips (NAME_attention.png) beside an image of that name."""
    import shutil

    images = tmp_path / "images"
    images.mkdir()
    scenes = sorted((trained["scenes"] / "images" / "test").glob("*.png"))[:2]
    for scene in scenes:
        shutil.copy(scene, images / scene.name)
    given = [str(images / scene.name) for scene in scenes]
    detector, classifier = trained["detr"], trained["cls"]
    capsys.readouterr()  # what making the runs printed
    refused(capsys, ["predict", str(detector), *given, "--out", str(images)], tmp_path,
            f"{scenes[0].name} would replace", "nothing was written")
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(scenes[0], tmp_path / "elsewhere" / scenes[0].name)
    refused(capsys, ["predict", str(detector), given[0], str(tmp_path / "elsewhere" / scenes[0].name),
                     "--out", str(tmp_path / "drawn")], tmp_path, "would both be written to")
    shirt = images / "shirt.png"
    from PIL import Image

    Image.new("L", (28, 28)).save(shirt)
    shutil.copy(shirt, images / "shirt_attention.png")
    refused(capsys, ["attention", str(classifier), str(shirt), str(images / "shirt_attention.png"), "--out",
                     str(images)], tmp_path, "shirt_attention.png would replace")


def test_convert_refuses_a_destination_inside_the_source_folder(tmp_path, weights, capsys):
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(weights.read_bytes())
    (folder / "config.json").write_text("{}")
    refused(capsys, ["convert", str(folder), str(folder / "model.safetensors")], tmp_path, "lies in the source folder")
