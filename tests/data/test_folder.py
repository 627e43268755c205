"""ImageFolderDataset on a generated folder of PNG/JPEG images in several modes, plus one corrupt file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitlab.data import BadImageError, ImageFolderDataset


def make_folder(root: Path) -> Path:
    """zebra/ (created first, sorts last), cat/, dog/ with one image of each kind, a corrupt PNG and decoys."""
    for name in ("zebra", "cat", "dog", ".ipynb_checkpoints"):
        (root / name).mkdir(parents=True)
    Image.new("RGB", (6, 4), (200, 100, 50)).save(root / "zebra" / "rgb.png")
    Image.new("RGB", (8, 8), (0, 128, 255)).save(root / "zebra" / "photo.JPG")  # upper-case extension
    Image.new("L", (5, 7), 100).save(root / "cat" / "gray.png")
    palette = Image.new("P", (3, 3), 1)
    palette.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    palette.save(root / "cat" / "palette.png")
    rgba = Image.new("RGBA", (4, 2), (10, 20, 30, 0))  # transparent
    rgba.putpixel((1, 0), (0, 0, 255, 255))  # opaque blue
    rgba.putpixel((2, 0), (255, 0, 0, 128))  # half-transparent red
    rgba.save(root / "dog" / "rgba.png")
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG not really an image" * 10)
    (root / "dog" / "notes.txt").write_text("not an image")
    Image.new("L", (2, 2)).save(root / ".ipynb_checkpoints" / "hidden.png")
    return root


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path / "images")


def item(ds: ImageFolderDataset, name: str) -> tuple[torch.Tensor, int]:
    index = next(i for i, (path, _) in enumerate(ds.samples) if path.name == name)
    return ds[index]


def test_scan_order_and_classes(folder: Path) -> None:
    ds = ImageFolderDataset(folder)
    assert ds.classes == ["cat", "dog", "zebra"]  # sorted names, hidden folder ignored
    assert ds.class_to_idx == {"cat": 0, "dog": 1, "zebra": 2}
    names = [(p.parent.name, p.name) for p, _ in ds.samples]
    assert names == [
        ("cat", "gray.png"),
        ("cat", "palette.png"),
        ("dog", "broken.png"),
        ("dog", "rgba.png"),
        ("zebra", "photo.JPG"),
        ("zebra", "rgb.png"),
    ]
    assert ds.targets == [0, 0, 1, 1, 2, 2]
    assert ds.num_skipped == 0  # without skip_bad_images nothing is opened at scan time


def test_corrupt_image_error_names_the_file(folder: Path) -> None:
    ds = ImageFolderDataset(folder)
    with pytest.raises(BadImageError, match=r"broken\.png.*skip_bad_images=True") as info:
        item(ds, "broken.png")
    assert info.value.path == folder / "dog" / "broken.png"
    assert isinstance(info.value, ValueError)


def test_skip_bad_images(folder: Path) -> None:
    ds = ImageFolderDataset(folder, skip_bad_images=True)
    assert ds.num_skipped == 1
    assert ds.skipped_files == [folder / "dog" / "broken.png"]
    assert len(ds) == 5 and ds.targets == [0, 0, 1, 2, 2]
    assert all(ds[i][0].shape[0] == 3 for i in range(len(ds)))  # every remaining file loads


def test_rgb_output(folder: Path) -> None:
    ds = ImageFolderDataset(folder, channels=3)
    gray, label = item(ds, "gray.png")
    assert gray.shape == (3, 7, 5) and gray.dtype == torch.float32 and label == 0
    assert torch.allclose(gray, torch.full((3, 7, 5), 100 / 255))
    palette, _ = item(ds, "palette.png")
    assert palette[:, 0, 0].mul(255).round().tolist() == [10, 20, 30]
    rgba, _ = item(ds, "rgba.png")
    pixels = rgba.mul(255).round()
    assert pixels[:, 0, 0].tolist() == [255, 255, 255]  # transparent -> white background
    assert pixels[:, 0, 1].tolist() == [0, 0, 255]  # opaque stays
    # Half-transparent red over white: 255 * 128/255 + 255 * 127/255 = 255 for red, 255 * 127/255 = 127 for G, B.
    assert pixels[0, 0, 2] == 255 and abs(pixels[1, 0, 2] - 127) <= 1 and abs(pixels[2, 0, 2] - 127) <= 1


def test_grayscale_output(folder: Path) -> None:
    ds = ImageFolderDataset(folder, channels=1)
    rgb, label = item(ds, "rgb.png")
    assert rgb.shape == (1, 4, 6) and label == 2
    # ITU-R 601-2 luma: 200 * 0.299 + 100 * 0.587 + 50 * 0.114 = 124.2
    assert rgb.mul(255).round().unique().tolist() == [124]
    palette, _ = item(ds, "palette.png")
    assert palette.mul(255).round().unique().tolist() == [18]  # 10 * .299 + 20 * .587 + 30 * .114 = 18.15
    assert item(ds, "photo.JPG")[0].shape == (1, 8, 8)


def test_transform_receives_converted_pil_image(folder: Path) -> None:
    ds = ImageFolderDataset(folder, transform=lambda im: (im.mode, im.size), channels=1)
    assert item(ds, "rgba.png")[0] == ("L", (4, 2))
    copy = ds.with_transform(None)
    assert copy.samples is ds.samples and item(copy, "rgba.png")[0].shape == (1, 2, 4)
    assert item(ds, "rgba.png")[0] == ("L", (4, 2))  # the original keeps its transform


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nowhere does not exist"):
        ImageFolderDataset(tmp_path / "nowhere")


def test_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file.png").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=r"file\.png is a file"):
        ImageFolderDataset(tmp_path / "file.png")


def test_folder_without_class_folders(tmp_path: Path) -> None:
    Image.new("L", (2, 2)).save(tmp_path / "loose.png")
    with pytest.raises(ValueError, match=r"no class sub-folders.*root/<class name>/<image>"):
        ImageFolderDataset(tmp_path)


def test_class_folder_without_images(folder: Path) -> None:
    (folder / "empty-class").mkdir()
    with pytest.raises(ValueError, match=r"\['empty-class'\] contain no images"):
        ImageFolderDataset(folder)


def test_all_images_bad(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"none of the 1 image files could be read"):
        ImageFolderDataset(tmp_path, skip_bad_images=True)


def test_channels_checked(folder: Path) -> None:
    with pytest.raises(ValueError, match=r"channels must be 1 \(grayscale\) or 3 \(RGB\), got 4"):
        ImageFolderDataset(folder, channels=4)
