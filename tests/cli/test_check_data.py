"""Bad data from the command line: `vitlab check-data` lists every problem (exit 2) or none (exit 0), and `vitlab
train` / `vitlab predict` stop on each bad input with one line that names the file and says what to do (exit 2),
never a traceback. The scenes set is made small here and broken by hand, one problem at a time."""

import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitlab.cli.main import main

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    assert main(["make-scenes", "--out", str(out), "--train", "8", "--val", "4", "--test", "2", "--size", "64",
                 "--scale", "16-32", "--objects", "1-3", "--data-dir", str(MINI), "--allow-partial-data"]) == 0
    return out


@pytest.fixture
def copy(scenes, tmp_path):
    """A copy of the scenes to break, and a way to edit its train annotations."""
    root = tmp_path / "set"
    shutil.copytree(scenes, root)
    return root


def edit_train(root: Path, change) -> Path:
    path = root / "annotations" / "instances_train.json"
    coco = json.loads(path.read_text())
    change(coco)
    path.write_text(json.dumps(coco))  # NaN is written as NaN, as Python's json and many tools do
    return path


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_check_data_on_clean_scenes_exits_0(scenes, capsys):
    for task in ("detection", "segmentation"):
        assert main(["check-data", "--task", task, "--data", str(scenes)]) == 0
        out = capsys.readouterr().out
        # train, val and test, then the summary line
        assert out.count("no problems found") == 4 and ("8 images" in out or "8 pairs" in out), out
        assert "in 3 split(s)" in out


def test_check_data_on_a_broken_copy_lists_every_problem_and_exits_2(copy, capsys):
    def breaks(coco):
        anns = coco["annotations"]
        anns[0]["bbox"] = "10, 10, 5, 5"
        anns[1]["bbox"] = [1, 2, float("nan"), 4]
        anns[2]["category_id"] = 999
        anns[3]["image_id"] = 12345
        anns[4]["id"] = anns[5]["id"]
        coco["images"][7]["file_name"] = "not_there.png"
    edit_train(copy, breaks)
    (copy / "images" / "train" / "000003.png").write_bytes(b"%PDF-1.4 a scan, not a picture")
    masks = copy / "masks" / "train"
    Image.fromarray(np.full((64, 64), 42, dtype=np.uint8), mode="L").save(masks / "000001.png")
    Image.new("L", (10, 10)).save(masks / "000002.png")
    (masks / "000004.png").unlink()

    assert main(["check-data", "--task", "detection", "--data", str(copy)]) == 2
    out = capsys.readouterr().out
    for text in ("2 × bad box", '"10, 10, 5, 5"', "NaN", "1 × unknown category", "category_id 999",
                 "1 × unknown image", "image_id 12345", "1 × duplicate annotation id", "1 × image missing",
                 "not_there.png", "1 × unreadable image", "000003.png", "starts with b'%PDF-1.4'",
                 "instances_train.json", "val.json", "; no problems found"):  # the val split is clean
        assert text in out, (text, out)

    assert main(["check-data", "--task", "segmentation", "--data", str(copy)]) == 2
    out = capsys.readouterr().out
    for text in ("1 × mask value out of range", "000001.png", "has values [42]", "1 × mask size differs",
                 "000002.png: is 10×10 pixels", "1 × mask missing", "000004.png", "1 × unreadable image"):
        assert text in out, (text, out)


@pytest.mark.parametrize(("break_it", "says"), [
    (lambda c: c["annotations"][0].update(bbox="10, 10, 5, 5"), 'has bbox "10, 10, 5, 5", not four finite numbers'),
    (lambda c: c["annotations"][0].update(bbox=[1, 2, float("nan"), 4]), "has bbox [1, 2, NaN, 4], not four finite"),
    (lambda c: c["annotations"][0].update(category_id=999), "has category_id 999, which is not among the categories"),
    (lambda c: c["annotations"][0].update(image_id=12345), "names image_id 12345, which is not among the images"),
    (lambda c: c["images"][0].pop("file_name"), "image 1 has no file_name"),
    (lambda c: c["annotations"][1].update(id=c["annotations"][0]["id"]), "repeats an earlier annotation's id"),
])
def test_train_stops_at_start_on_each_bad_annotation_with_one_line(copy, tmp_path, capsys, break_it, says):
    path = edit_train(copy, break_it)
    assert main(["train", "--task", "detection", "--data", str(copy), "--out", str(tmp_path / "run"),
                 "--epochs", "1"]) == 2
    err = one_line_error(capsys)
    assert str(path) in err and says in err and "--skip-bad-annotations" in err, err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_duplicate_image_ids_are_listed_together(copy, tmp_path, capsys):
    """Both entries of a repeated id are reported (which one the annotations meant is unknown), and the annotations
    of the id that no longer exists: every problem in one message."""
    path = edit_train(copy, lambda c: c["images"][1].update(id=1))
    assert main(["train", "--task", "detection", "--data", str(copy), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path) in err
    assert "2 × duplicate image id" in err and "image 1 (000000.png) shares its id with 1 other entry" in err
    assert "image 1 (000001.png) shares" in err and "× unknown image" in err and "--skip-bad-annotations" in err


def test_train_stops_on_an_image_missing_on_disk(copy, tmp_path, capsys):
    (copy / "images" / "train" / "000002.png").unlink()
    assert main(["train", "--task", "detection", "--data", str(copy), "--out", str(tmp_path / "run")]) == 2
    err = one_line_error(capsys)
    assert "000002.png: image 3 is listed in the annotations but is not on disk" in err and "--skip-bad-images" in err


@pytest.mark.parametrize(("damage", "says"), [
    (lambda masks: Image.new("L", (64, 64), 99).save(masks / "000001.png"), "000001.png: has values [99], but"),
    (lambda masks: Image.new("L", (32, 64)).save(masks / "000001.png"), "000001.png: is 32×64 pixels but its image"),
    (lambda masks: (masks / "000001.png").unlink(), "000001.png: is not on disk, but its image"),
])
def test_segmentation_stops_at_start_on_each_bad_mask_with_one_line(copy, tmp_path, capsys, damage, says):
    damage(copy / "masks" / "train")
    assert main(["train", "--task", "segmentation", "--data", str(copy), "--out", str(tmp_path / "run"),
                 "--epochs", "1"]) == 2
    err = one_line_error(capsys)
    assert says in err and "--skip-bad-annotations" in err, err


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header declares width × height pixels, with almost no data behind it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


@pytest.mark.slow
def test_predict_of_a_detection_run_refuses_bad_files_in_one_line(scenes, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--task", "detection", "--data", str(scenes), "--out", str(run), "--epochs", "1",
                 "--batch-size", "8", "--eval-batch-size", "4", "--num-queries", "4"]) == 0
    (tmp_path / "notes.png").write_text("meeting notes, saved with the wrong name")
    (tmp_path / "bomb.png").write_bytes(huge_png(40000, 40000))
    capsys.readouterr()
    assert main(["predict", str(run), str(tmp_path / "notes.png")]) == 2
    err = one_line_error(capsys)
    assert "notes.png: it is not an image (it starts with b'meeting '" in err and "give an image file" in err
    assert main(["predict", str(run), str(tmp_path / "bomb.png")]) == 2
    err = one_line_error(capsys)
    assert "bomb.png: it is 1,600,000,000 (1.6 G) pixels, above the limit of 67,108,864" in err, err
    assert "downscale it" in err


def test_an_unreadable_image_in_a_coco_folder_stops_with_one_line(copy, tmp_path, capsys):
    (copy / "images" / "train" / "000005.png").write_bytes(b"\x89PNG\r\n\x1a\n and then nothing useful")
    assert main(["train", "--task", "detection", "--data", str(copy), "--out", str(tmp_path / "run"), "--epochs", "1",
                 "--batch-size", "8", "--num-queries", "4"]) == 2
    err = one_line_error(capsys)
    assert "000005.png" in err and "--skip-bad-images" in err, err
