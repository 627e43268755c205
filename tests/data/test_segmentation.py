"""Segmentation data: the three layouts, palette masks, the errors that name the file, and transforms that move the
mask with the image."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.data.checks import DataCheckError
from vitlab.data.scenes import SceneOptions, make_scenes, rle_decode
from vitlab.data.segmentation import (
    IGNORE_INDEX,
    VOC_CLASSES,
    BadMaskError,
    SegmentationDataset,
    count_classes,
    find_segmentation_split,
    pad_collate_masks,
    segmentation_transforms,
)

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    make_scenes(out, SceneOptions(train=6, val=3, test=2, size=64), str(MINI), allow_partial_data=True)
    return out


def test_scenes_masks_are_the_union_of_the_instance_masks(scenes):
    pairs, classes = find_segmentation_split(scenes, "val")
    coco = json.loads((scenes / "annotations" / "instances_val.json").read_text())
    assert classes == ["background"] + [c["name"] for c in sorted(coco["categories"], key=lambda c: c["id"])]
    dataset = SegmentationDataset(pairs, num_classes=len(classes))
    files = {image["file_name"]: image["id"] for image in coco["images"]}
    for index, (image_path, _) in enumerate(pairs):
        image, mask = dataset[index]
        expected = np.zeros(mask.shape, dtype=np.int64)
        for ann in coco["annotations"]:
            if ann["image_id"] == files[image_path.name]:
                expected[rle_decode(ann["segmentation"])] = ann["category_id"]  # category ids are 1 … 10
        assert image.shape == (3, 64, 64) and image.dtype == torch.float32 and 0 <= image.min() <= image.max() <= 1
        np.testing.assert_array_equal(mask.numpy(), expected)


def palette_png(path: Path, values: np.ndarray) -> None:
    image = Image.fromarray(values.astype(np.uint8), mode="P")
    image.putpalette([(i * 37) % 256 for i in range(256 * 3)])  # colours unrelated to the indices
    image.save(path)


def test_voc_layout_reads_palette_indices_and_keeps_the_ignore_border(tmp_path):
    root = tmp_path / "VOC2012"
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / folder).mkdir(parents=True)
    rng = np.random.default_rng(0)
    written = {}
    for stem in ("2007_000032", "2007_000039", "2007_000063"):
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(root / "JPEGImages" / f"{stem}.jpg")
        values = rng.integers(0, 21, (20, 30))
        values[5, :] = IGNORE_INDEX
        palette_png(root / "SegmentationClass" / f"{stem}.png", values)
        written[stem] = values
    (root / "ImageSets/Segmentation/train.txt").write_text("2007_000032\n2007_000063\n")
    (root / "ImageSets/Segmentation/val.txt").write_text("2007_000039\n")
    pairs, classes = find_segmentation_split(root, "train")
    assert classes == list(VOC_CLASSES) and [p[0].stem for p in pairs] == ["2007_000032", "2007_000063"]
    dataset = SegmentationDataset(pairs, num_classes=21)
    np.testing.assert_array_equal(dataset[1][1].numpy(), written["2007_000063"])
    assert count_classes(pairs) == 1 + max(int(v[v != IGNORE_INDEX].max()) for s, v in written.items()
                                           if s != "2007_000039")


def flat_folder(root: Path, count: int, size=(16, 12), classes=3) -> None:
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(count):
        Image.new("RGB", size, (i, 0, 0)).save(root / "images" / f"{i:03d}.png")
        mask = Image.fromarray(np.full(size[::-1], i % classes, dtype=np.uint8), mode="L")
        mask.save(root / "masks" / f"{i:03d}.png")


def test_flat_folder_holds_every_tenth_pair_out(tmp_path):
    flat_folder(tmp_path, 25)
    (tmp_path / "classes.txt").write_text("sky\nroad\ncar\n")
    train, classes = find_segmentation_split(tmp_path, "train")
    val, _ = find_segmentation_split(tmp_path, "val")
    assert classes == ["sky", "road", "car"]
    assert [p[0].name for p in val] == ["009.png", "019.png"] and len(train) == 23
    assert not {p[0] for p in train} & {p[0] for p in val}


def test_bad_masks_are_errors_that_name_the_file(tmp_path):
    """Found when the dataset is built (tests/data/test_checks.py); a dataset built without the check still refuses
    a bad pair when it reaches it."""
    flat_folder(tmp_path, 10)
    pairs, _ = find_segmentation_split(tmp_path, "train")
    with pytest.raises(BadMaskError, match=r"002\.png has values \[2\], but there are 2 classes"):
        SegmentationDataset(pairs, num_classes=2, check=False)[2]
    with pytest.raises(DataCheckError, match=r"002\.png: has values \[2\], but there are 2 classes"):
        SegmentationDataset(pairs, num_classes=2)
    Image.new("L", (5, 5)).save(tmp_path / "masks" / "001.png")
    with pytest.raises(BadMaskError, match=r"001\.png is 5×5 pixels but its image .*001\.png is 16×12"):
        SegmentationDataset(pairs, num_classes=3, check=False)[1]
    Image.new("RGB", (16, 12)).save(tmp_path / "masks" / "000.png")
    with pytest.raises(BadMaskError, match=r"000\.png is a RGB image"):
        SegmentationDataset(pairs, num_classes=3, check=False)[0]
    (tmp_path / "masks" / "003.png").unlink()
    with pytest.raises(DataCheckError, match=r"3 problem\(s\)(.|\n)*mask missing(.|\n)*003\.png"):
        SegmentationDataset(find_segmentation_split(tmp_path, "train")[0], num_classes=3)
    with pytest.raises(FileNotFoundError, match="is not a segmentation folder"):
        find_segmentation_split(tmp_path / "nothing", "train")


def encoded_pair(size=96, block=12):
    """An image whose red channel says the class of its mask, in block × block squares."""
    classes = torch.arange((size // block) ** 2).remainder(7).view(size // block, size // block)
    mask = classes.repeat_interleave(block, 0).repeat_interleave(block, 1)
    image = torch.stack([mask / 10.0, torch.rand(size, size), torch.zeros(size, size)])
    return image, mask


def test_training_transforms_move_the_mask_with_the_image():
    from torchvision import tv_tensors

    torch.manual_seed(0)
    image, mask = encoded_pair()
    flip_only = segmentation_transforms(True, 96, scale=(1.0, 1.0))
    for _ in range(4):
        out_image, out_mask = flip_only(tv_tensors.Image(image), tv_tensors.Mask(mask))
        torch.testing.assert_close((out_image[0] * 10).round().long(), out_mask)
    jitter = segmentation_transforms(True, 96)  # the shorter side to 48 … 192 pixels, then a 96² crop
    for _ in range(6):
        out_image, out_mask = jitter(tv_tensors.Image(image), tv_tensors.Mask(mask))
        assert out_image.shape == (3, 96, 96) and out_mask.shape == (96, 96)
        labelled = out_mask != IGNORE_INDEX
        assert ((out_mask[labelled] >= 0) & (out_mask[labelled] < 7)).all()  # nearest: no new values
        agree = ((out_image[0] * 10).round().long() == out_mask)[labelled].float().mean()
        assert agree > 0.8  # bilinear image vs nearest mask differ only along the block edges
        assert (out_image[:, ~labelled] == 0).all()  # the padding: image 0, mask ignored


def test_padded_batches_ignore_the_padding():
    images, masks = pad_collate_masks([(torch.ones(3, 4, 5), torch.zeros(4, 5, dtype=torch.long)),
                                       (torch.ones(3, 6, 3), torch.ones(6, 3, dtype=torch.long))])
    assert images.shape == (2, 3, 6, 5) and masks.shape == (2, 6, 5)
    assert (masks[0, 4:] == IGNORE_INDEX).all() and (masks[1, :, 3:] == IGNORE_INDEX).all()
    assert (images[0, :, 4:] == 0).all() and (masks[0, :4] == 0).all() and (masks[1, :, :3] == 1).all()
