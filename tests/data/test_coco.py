"""The COCO-format loader on a hand-written instances file: ids mapped to contiguous labels and back, crowd boxes
and boxes clamped to nothing left out, grayscale and RGB images of any size; boxes follow flips and resizes; padded
batches."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from vitlab.data.coco import CocoDetection, detection_transforms, pad_collate


@pytest.fixture
def coco_dir(tmp_path):
    Image.fromarray(np.full((40, 60), 200, dtype=np.uint8), mode="L").save(tmp_path / "gray.png")
    Image.fromarray(np.full((30, 20, 3), 100, dtype=np.uint8), mode="RGB").save(tmp_path / "color.jpg")
    coco = {
        "images": [{"id": 7, "file_name": "gray.png", "width": 60, "height": 40},
                   {"id": 3, "file_name": "color.jpg", "width": 20, "height": 30}],
        "categories": [{"id": 90, "name": "kite"}, {"id": 3, "name": "car"}, {"id": 17, "name": "cat"}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 90, "bbox": [10, 5, 20, 10], "iscrowd": 0},
            {"id": 2, "image_id": 7, "category_id": 3, "bbox": [50, 30, 20, 20], "iscrowd": 0},  # runs off the edge
            {"id": 3, "image_id": 7, "category_id": 17, "bbox": [0, 0, 60, 40], "iscrowd": 1},  # crowd: left out
            # wholly outside the 20-pixel-wide image: clamped to it, no area left, dropped (a box written without
            # area is a problem of the file: tests/data/test_checks.py)
            {"id": 4, "image_id": 3, "category_id": 17, "bbox": [25, 2, 4, 5], "iscrowd": 0},
            {"id": 5, "image_id": 3, "category_id": 17, "bbox": [2, 3, 4, 5]},
        ],
    }
    (tmp_path / "instances.json").write_text(json.dumps(coco))
    return tmp_path


def test_ids_labels_boxes_and_images(coco_dir):
    data = CocoDetection(coco_dir, coco_dir / "instances.json")
    assert data.label_to_category == [3, 17, 90] and data.category_names == ["car", "cat", "kite"]
    assert len(data) == 2 and data.num_classes == 3
    image, target = data[1]  # sorted by image id: 3 (color), then 7 (gray)
    assert target["image_id"] == 7 and image.shape == (3, 40, 60) and image.max() <= 1
    torch.testing.assert_close(target["boxes"], torch.tensor([[10.0, 5, 30, 15], [50, 30, 60, 40]]))
    assert target["labels"].tolist() == [2, 0]  # kite (id 90) -> 2, car (id 3) -> 0
    assert [data.label_to_category[label] for label in target["labels"]] == [90, 3]  # and back
    image, target = data[0]
    assert image.shape == (3, 30, 20) and target["labels"].tolist() == [1]
    gray = CocoDetection(coco_dir, coco_dir / "instances.json", channels=1)
    assert gray[0][0].shape == (1, 30, 20)


def test_boxes_move_with_flips_and_resizes(coco_dir):
    flip = CocoDetection(coco_dir, coco_dir / "instances.json", transforms=v2.RandomHorizontalFlip(p=1.0))
    image, target = flip[1]
    torch.testing.assert_close(target["boxes"], torch.tensor([[30.0, 5, 50, 15], [0, 30, 10, 40]]))  # x -> 60 - x
    resized = CocoDetection(coco_dir, coco_dir / "instances.json", transforms=detection_transforms(False, 30))
    image, target = resized[1]
    assert image.shape[1:] == (20, 30)  # the longer side (60) to 30
    torch.testing.assert_close(target["boxes"], torch.tensor([[5.0, 2.5, 15, 7.5], [25, 15, 30, 20]]))


def test_padded_batches_have_a_mask(coco_dir):
    data = CocoDetection(coco_dir, coco_dir / "instances.json")
    images, padding_mask, targets = pad_collate([data[0], data[1]])
    assert images.shape == (2, 3, 40, 60) and padding_mask.shape == (2, 40, 60)
    assert not padding_mask[1].any() and padding_mask[0, :30, :20].logical_not().all()
    assert padding_mask[0].sum() == 40 * 60 - 30 * 20 and (images[0][:, padding_mask[0]] == 0).all()
    assert [t["image_id"] for t in targets] == [3, 7]


def test_bad_files_explain_themselves(tmp_path):
    with pytest.raises(FileNotFoundError, match="no COCO annotations"):
        CocoDetection(tmp_path, tmp_path / "missing.json")
    (tmp_path / "x.json").write_text(json.dumps({"images": []}))
    with pytest.raises(ValueError, match="has no annotations, categories"):
        CocoDetection(tmp_path, tmp_path / "x.json")


def test_the_scenes_set_loads(tmp_path):
    from tests.data.test_scenes import make

    make(tmp_path / "s")
    data = CocoDetection(tmp_path / "s" / "images" / "train", tmp_path / "s" / "annotations" / "instances_train.json",
                         channels=1)
    coco = json.loads((tmp_path / "s" / "annotations" / "instances_train.json").read_text())
    image, target = data[0]
    first = [ann for ann in coco["annotations"] if ann["image_id"] == coco["images"][0]["id"]]
    expected = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (ann["bbox"] for ann in first)], dtype=torch.float)
    torch.testing.assert_close(target["boxes"], expected)
    assert target["labels"].tolist() == [ann["category_id"] - 1 for ann in first] and image.shape == (1, 128, 128)
