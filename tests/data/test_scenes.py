"""The scenes set: the same options give the same bytes; every box is the tight extent of its item's visible pixels;
the pixels are the item's own (train items in train scenes, test items in val scenes); the semantic masks agree;
pycocotools reads the annotations and decodes the same masks."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitlab.cli.main import main
from vitlab.data import load_fashion_mnist
from vitlab.data.scenes import SceneOptions, _rescaled, make_scenes, rle_decode, rle_encode

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


def make(out, **options):
    return make_scenes(out, SceneOptions(**{"train": 12, "val": 6, "test": 4, **options}), str(MINI),
                       allow_partial_data=True)


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    make(out)
    return out


def test_same_seed_same_bytes_and_another_seed_other_scenes(scenes, tmp_path):
    make(tmp_path / "again")
    make(tmp_path / "other", seed=1)
    assert digests(scenes) == digests(tmp_path / "again")
    assert digests(scenes)["images/train/000000.png"] != digests(tmp_path / "other")["images/train/000000.png"]


@pytest.mark.parametrize("split", ["train", "val"])
def test_boxes_are_tight_and_pixels_are_the_items_own(scenes, split):
    coco = json.loads((scenes / "annotations" / f"instances_{split}.json").read_text())
    source = {"train": "train", "val": "test"}[split]
    items, labels = load_fashion_mnist(source, MINI, download=False, strict_counts=False)
    by_image = {image["id"]: image for image in coco["images"]}
    assert len(coco["images"]) == {"train": 12, "val": 6}[split] and coco["annotations"]
    covered = {}
    for ann in coco["annotations"]:
        image = np.asarray(Image.open(scenes / "images" / split / by_image[ann["image_id"]]["file_name"]))
        mask = rle_decode(ann["segmentation"])
        rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
        assert ann["bbox"] == [cols[0], rows[0], cols[-1] - cols[0] + 1, rows[-1] - rows[0] + 1]
        assert ann["area"] == mask.sum() > 0 and (image[mask] > 0).all()  # visible pixels are non-zero
        origin = ann["fashion_mnist"]
        assert origin["split"] == source and ann["category_id"] == int(labels[origin["index"]]) + 1
        # the pixels under the mask are the rescaled item's, at the place the box says (its side is unknown here:
        # find the side whose rescaled item matches)
        item = items[origin["index"]].numpy()
        assert any(_matches(image, mask, item, side) for side in range(16, 65)), ann["id"]
        assert not (covered.get(ann["image_id"], np.zeros_like(mask)) & mask).any()  # one owner per pixel
        covered[ann["image_id"]] = covered.get(ann["image_id"], np.zeros_like(mask)) | mask
    for image_id, union in covered.items():
        name = by_image[image_id]["file_name"]
        image = np.asarray(Image.open(scenes / "images" / split / name))
        semantic = np.asarray(Image.open(scenes / "masks" / split / name))
        assert ((image > 0) == union).all() and ((semantic > 0) == union).all()
    for ann in coco["annotations"]:
        name = by_image[ann["image_id"]]["file_name"]
        semantic = np.asarray(Image.open(scenes / "masks" / split / name))
        assert (semantic[rle_decode(ann["segmentation"])] == ann["category_id"]).all()  # class + 1


def _matches(image, mask, item, side):
    """Whether the rescaled item, placed so that its non-zero pixels cover the mask, shows those pixels."""
    pixels = _rescaled(item, side)
    shape = pixels > 0
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    for y in range(max(0, rows[-1] - side + 1), rows[0] + 1):
        for x in range(max(0, cols[-1] - side + 1), cols[0] + 1):
            if y + side > image.shape[0] or x + side > image.shape[1]:
                continue
            window = np.zeros_like(mask)
            window[y:y + side, x:x + side] = shape
            if (mask <= window).all() and (image[mask] == pixels[(mask[y:y + side, x:x + side])]).all():
                return True
    return False


def test_pycocotools_reads_the_annotations_and_the_same_masks(scenes):
    from pycocotools.coco import COCO

    coco = COCO(str(scenes / "annotations" / "instances_train.json"))
    assert len(coco.getImgIds()) == 12 and len(coco.getCatIds()) == 10
    for ann in coco.loadAnns(coco.getAnnIds()):
        assert (coco.annToMask(ann).astype(bool) == rle_decode(ann["segmentation"])).all()


def test_rle_round_trip_by_hand():
    mask = np.array([[1, 0, 0], [1, 1, 0]], dtype=bool)  # column-major: 1 1 | 0 1 | 0 0 -> 0 0s, 2 1s, 1, 1, 2
    assert rle_encode(mask) == {"counts": [0, 2, 1, 1, 2], "size": [2, 3]}
    assert (rle_decode(rle_encode(mask)) == mask).all()
    empty_first = np.array([[0, 1]], dtype=bool)
    assert rle_encode(empty_first)["counts"] == [1, 1]


def test_the_command_and_its_errors(tmp_path, capsys):
    argv = ["make-scenes", "--out", str(tmp_path / "s"), "--train", "3", "--val", "2", "--test", "2",
            "--objects", "2-3", "--data-dir", str(MINI), "--allow-partial-data"]
    assert main(argv) == 0
    assert "3 train" in capsys.readouterr().out
    counts = [len(json.loads((tmp_path / "s" / "annotations" / f"instances_{s}.json").read_text())["annotations"])
              for s in ("train", "val")]
    assert 6 <= counts[0] <= 9 and 4 <= counts[1] <= 6
    assert main([*argv[:3], "--size", "32", "--data-dir", str(MINI), "--allow-partial-data"]) == 2
    assert "must fit the 32 px canvas" in capsys.readouterr().err


def test_scenes_of_some_classes_hold_only_those_with_ids_in_their_order(tmp_path):
    make(tmp_path / "five", classes=(9, 5, 7))
    items, labels = load_fashion_mnist("train", MINI, download=False, strict_counts=False)
    coco = json.loads((tmp_path / "five" / "annotations" / "instances_train.json").read_text())
    assert coco["categories"] == [{"id": 1, "name": "Ankle boot"}, {"id": 2, "name": "Sandal"},
                                  {"id": 3, "name": "Sneaker"}]
    assert coco["annotations"]
    for ann in coco["annotations"]:  # the item's own class, renumbered by its place in `classes`
        assert ann["category_id"] == (9, 5, 7).index(int(labels[ann["fashion_mnist"]["index"]])) + 1
    masks = [np.asarray(Image.open(p)) for p in (tmp_path / "five" / "masks" / "train").iterdir()]
    assert set(np.unique(np.concatenate([m.ravel() for m in masks]))) <= {0, 1, 2, 3}
    with pytest.raises(ValueError, match="distinct Fashion-MNIST class numbers"):
        SceneOptions(classes=(1, 1))


def test_a_folder_holding_another_set_is_refused_and_the_same_set_is_written_again(scenes, tmp_path):
    """The same options into the same folder: the same bytes, each split whole. Other options (another size, a
    split fewer, another seed) would mix two sets: refused, the folder as it was. Images without their annotation
    file (a make that was stopped) are refused too, rather than mixed with the new ones."""
    import shutil

    out = tmp_path / "set"
    shutil.copytree(scenes, out)
    before = digests(out)
    make(out)
    assert digests(out) == before
    for other in ({"size": 96}, {"test": 0}, {"seed": 1}):
        with pytest.raises(ValueError, match="made otherwise"):
            make(out, **other)
        assert digests(out) == before
    (out / "annotations" / "instances_val.json").unlink()
    with pytest.raises(ValueError, match=r"holds val images or masks but no instances_val\.json"):
        make(out)
