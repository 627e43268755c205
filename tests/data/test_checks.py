"""Up-front checks (vitlab/data/checks.py) on hand-broken COCO files and mask folders: every problem is found, of
the right kind, naming the file and the entry, all at once; the skip options drop exactly the bad entries."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitlab.data.checks import DataCheckError, check_coco, check_masks
from vitlab.data.coco import CocoDetection
from vitlab.data.segmentation import SegmentationDataset, find_segmentation_split


def coco_folder(tmp_path: Path, images=None, annotations=None, categories=None) -> Path:
    """Three 20×10 grey images (a.png, b.png, c.png, ids 1-3), two categories (5, 9), one good box on each image;
    any list given replaces the default one."""
    for name in ("a", "b", "c"):
        Image.new("L", (20, 10), 100).save(tmp_path / f"{name}.png")
    coco = {
        "images": images if images is not None else [{"id": i + 1, "file_name": f"{n}.png", "width": 20, "height": 10}
                                                      for i, n in enumerate("abc")],
        "annotations": annotations if annotations is not None else [
            {"id": i + 1, "image_id": i + 1, "category_id": 5, "bbox": [1, 1, 5, 5]} for i in range(3)],
        "categories": categories if categories is not None else [{"id": 5, "name": "cat"}, {"id": 9, "name": "dog"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(coco, allow_nan=True))
    return tmp_path / "instances.json"


def good_annotations(**changes_of_the_second):
    anns = [{"id": i + 1, "image_id": i + 1, "category_id": 5, "bbox": [1, 1, 5, 5]} for i in range(3)]
    anns[1] = {**anns[1], **changes_of_the_second}
    return anns


def test_a_clean_file_has_no_problems(tmp_path):
    report, coco = check_coco(tmp_path, coco_folder(tmp_path), decode=True)
    assert report.ok and report.counts == {"images": 3, "annotations": 3, "categories": 2}
    assert "no problems found" in report.format()


@pytest.mark.parametrize(("changes", "kind", "says"), [
    ({"bbox": "1, 1, 5, 5"}, "bad box", 'bbox "1, 1, 5, 5", not four finite numbers'),
    ({"bbox": [1, 1, float("nan"), 5]}, "bad box", "bbox [1, 1, NaN, 5], not four finite numbers"),
    ({"bbox": [1, 1, float("inf"), 5]}, "bad box", "not four finite numbers"),
    ({"bbox": [1, 1, 5]}, "bad box", "bbox [1, 1, 5], not four"),
    ({"bbox": [1, 1, 0, 5]}, "box without area", "width and height must be above 0"),
    ({"category_id": 77}, "unknown category", "category_id 77, which is not among the categories [5, 9]"),
    ({"image_id": 42}, "unknown image", "image_id 42, which is not among the images"),
    ({"id": 1}, "duplicate annotation id", "repeats an earlier annotation's id"),
])
def test_each_bad_annotation_is_one_problem_naming_the_file_and_the_annotation(tmp_path, changes, kind, says):
    path = coco_folder(tmp_path, annotations=good_annotations(**changes))
    report, _ = check_coco(tmp_path, path)
    assert list(report.problems) == [kind] and report.num_problems == 1
    problem = report.problems[kind][0]
    assert problem.file == str(path) and problem.entry.startswith(f"annotation {changes.get('id', 2)}")
    assert says in problem.detail, problem.detail
    with pytest.raises(DataCheckError) as raised:  # the dataset refuses it when built, before any batch
        CocoDetection(tmp_path, path)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and str(path) in message and says in message
    assert "--skip-bad-annotations" in message
    with pytest.warns(UserWarning, match=f"left out 1: 1 {kind}"):
        data = CocoDetection(tmp_path, path, skip_bad_annotations=True)
    assert data.num_skipped == 1 and len(data) == 3
    kept = [ann["id"] for ann in data.coco["annotations"]]
    assert len(kept) == 2 and [a for image in data.annotations.values() for a in image if a is None] == []


def test_a_bad_box_never_reaches_a_batch(tmp_path):
    path = coco_folder(tmp_path, annotations=good_annotations(bbox=[1, 1, float("nan"), 5]))
    with pytest.warns(UserWarning):
        data = CocoDetection(tmp_path, path, skip_bad_annotations=True)
    boxes = [data[i][1]["boxes"] for i in range(len(data))]
    assert [len(b) for b in boxes] == [1, 0, 1] and all(b.isfinite().all() for b in boxes)


def test_image_entries_missing_files_and_duplicate_ids(tmp_path):
    images = [{"id": 1, "file_name": "a.png"}, {"id": 2}, {"id": 3, "file_name": "gone.png"},
              {"id": 4, "file_name": "b.png"}, {"id": 4, "file_name": "c.png"}]
    annotations = [{"id": i, "image_id": i, "category_id": 5, "bbox": [1, 1, 2, 2]} for i in range(1, 5)]
    categories = [{"id": 5, "name": "cat"}, {"id": 5, "name": "cat again"}]
    path = coco_folder(tmp_path, images, annotations, categories)
    report, _ = check_coco(tmp_path, path)
    assert {kind: len(found) for kind, found in report.problems.items()} == {
        "duplicate category id": 1, "image entry incomplete": 1, "duplicate image id": 2, "image missing": 1}
    assert str(report.problems["image entry incomplete"][0]) == f"{path}: image 2 has no file_name"
    assert report.problems["image missing"][0].file == str(tmp_path / "gone.png")
    assert "unknown image" not in report.problems  # annotations of a bad image go with it, reported once
    with pytest.raises(DataCheckError) as raised:
        CocoDetection(tmp_path, path, skip_bad_images=True, skip_bad_annotations=True)
    message = str(raised.value)  # a category listed twice cannot be skipped; every problem is listed together
    for text in ("1 × duplicate category id", "2 × duplicate image id", "1 × image entry incomplete",
                 "1 × image missing", "gone.png", "image 2 has no file_name"):
        assert text in message, message


def test_skipping_drops_an_image_with_its_annotations(tmp_path):
    images = [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "gone.png"}, {"id": 3, "file_name": "c.png"}]
    path = coco_folder(tmp_path, images)
    with pytest.raises(DataCheckError, match=r"gone\.png: image 2 is listed .* not on disk; .*--skip-bad-images"):
        CocoDetection(tmp_path, path, skip_bad_annotations=True)
    with pytest.warns(UserWarning, match=r"1 image missing \(.*gone\.png"):
        data = CocoDetection(tmp_path, path, skip_bad_images=True)
    assert [image["id"] for image in data.images] == [1, 3] and sorted(data.annotations) == [1, 3]
    assert [ann["image_id"] for ann in data.coco["annotations"]] == [1, 3]


def test_an_unreadable_image_is_found_when_decoding(tmp_path):
    path = coco_folder(tmp_path)
    (tmp_path / "b.png").write_bytes(b"GIF89a but then nothing")
    assert check_coco(tmp_path, path)[0].ok  # a stat only: the file is there
    report, _ = check_coco(tmp_path, path, decode=True)
    assert [str(p) for p in report.problems["unreadable image"]] == [
        f"{tmp_path / 'b.png'}: image 2 is not an image (it starts with b'GIF89a b'); expected a PNG, JPEG, WebP, BMP, "
        "GIF or TIFF file"]
    with pytest.warns(UserWarning, match="1 unreadable image"):
        data = CocoDetection(tmp_path, path, skip_bad_images=True)  # skipping decodes up front: a fixed length
    assert len(data) == 2 and data.num_skipped == 1


def test_not_a_coco_file(tmp_path):
    (tmp_path / "x.json").write_text("{\"images\": [")
    with pytest.raises(DataCheckError, match=r"x\.json: is not valid JSON"):
        CocoDetection(tmp_path, tmp_path / "x.json", skip_bad_annotations=True)


# -- masks ---------------------------------------------------------------------------------------------------------
def mask_folder(root: Path, count: int = 4, classes: int = 3) -> list[tuple[Path, Path]]:
    (root / "images" / "train").mkdir(parents=True)
    (root / "masks" / "train").mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", (16, 12), (i, 0, 0)).save(root / "images" / "train" / f"{i:03d}.png")
        values = np.full((12, 16), i % classes, dtype=np.uint8)
        values[0, 0] = 255  # ignored: never out of range
        Image.fromarray(values, mode="L").save(root / "masks" / "train" / f"{i:03d}.png")
    return find_segmentation_split(root, "train")[0]


def test_mask_problems_are_all_found_by_kind(tmp_path):
    mask_folder(tmp_path)
    masks = tmp_path / "masks" / "train"
    Image.fromarray(np.full((12, 16), 7, dtype=np.uint8), mode="L").save(masks / "001.png")  # 7 ≥ 3 classes
    Image.new("L", (5, 5)).save(masks / "002.png")  # the wrong size
    (masks / "003.png").unlink()  # missing
    pairs = find_segmentation_split(tmp_path, "train")[0]  # the missing mask is the check's to report
    report = check_masks(pairs, 3, "train")
    assert {kind: [p.file for p in found] for kind, found in report.problems.items()} == {
        "mask value out of range": [str(masks / "001.png")], "mask size differs": [str(masks / "002.png")],
        "mask missing": [str(masks / "003.png")]}
    assert "has values [7], but there are 3 classes" in report.problems["mask value out of range"][0].detail
    assert "is 5×5 pixels but its image" in report.problems["mask size differs"][0].detail
    with pytest.raises(DataCheckError) as raised:
        SegmentationDataset(pairs, num_classes=3)
    message = str(raised.value)
    assert "3 problem(s)" in message and "001.png" in message and "002.png" in message and "003.png" in message
    with pytest.warns(UserWarning, match="left out 3"):
        data = SegmentationDataset(pairs, num_classes=3, skip_bad_annotations=True)
    assert [p[0].name for p in data.pairs] == ["000.png"] and data.num_skipped == 3


def test_a_clean_mask_split_and_a_single_problem_in_one_line(tmp_path):
    pairs = mask_folder(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(SegmentationDataset(pairs, num_classes=3)) == 4 and check_masks(pairs, 3, "t").ok
    Image.new("L", (16, 12), 3).save(pairs[1][1])
    with pytest.raises(DataCheckError) as raised:
        SegmentationDataset(pairs, num_classes=3)
    assert len(str(raised.value).splitlines()) == 1 and "001.png" in str(raised.value)
