"""Fixtures shared by several test folders: small runs of every image task, trained once per session."""

from pathlib import Path

import pytest
from PIL import Image

from vitlab.cli.main import main

from .engine.conftest import MINI

DATA = ["--data-dir", str(MINI), "--allow-partial-data"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict[str, Path]:
    """Run folders by name: cls, detr, setr, ipt, vqgan, prior (each task's tiny preset, a few steps), and the
    data they came from: scenes (a detection and segmentation set), photos (train/ and test/ photographs)."""
    from vitlab.data.photos import skimage_photos

    root = tmp_path_factory.mktemp("served")
    assert main(["train", "--model", "vit_tiny_patch4_28", *DATA, "--epochs", "1", "--batch-size", "32",
                 "--out", str(root / "cls")]) == 0
    assert main(["make-scenes", "--out", str(root / "scenes"), "--train", "16", "--val", "4", "--size", "64",
                 "--scale", "16-32", "--objects", "1-3", *DATA]) == 0
    assert main(["train", "--task", "detection", "--data", str(root / "scenes"), "--out", str(root / "detr"),
                 "--epochs", "1", "--batch-size", "8", "--eval-batch-size", "4", "--num-queries", "8"]) == 0
    assert main(["train", "--task", "segmentation", "--model", "setr_mla_small", "--data", str(root / "scenes"),
                 "--out", str(root / "setr"), "--epochs", "1", "--batch-size", "4", "--crop-size", "64",
                 "--eval-batch-size", "2"]) == 0
    for i, (name, array) in enumerate(skimage_photos().items()):  # small crops: a request takes a second
        split = root / "photos" / ("test" if i >= 3 else "train")
        split.mkdir(parents=True, exist_ok=True)
        side = 96 if i >= 3 else 200  # training halves them first, and takes 96-pixel patches for ×2
        Image.fromarray(array).crop((100, 100, 100 + side, 100 + side)).save(split / f"{name}.png")
    assert main(["train", "--task", "restoration", "--model", "ipt_small", "--data", str(root / "photos"),
                 "--degradations", "sr2,denoise30", "--out", str(root / "ipt"), "--steps", "2", "--batch-size", "2",
                 "--patches-per-task", "2", "--eval-crop", "48"]) == 0
    assert main(["train", "--task", "vqgan", *DATA, "--epochs", "1", "--batch-size", "16", "--disc-start", "6",
                 "--eval-images", "0", "--out", str(root / "vqgan")]) == 0
    assert main(["train", "--task", "prior", "--vqgan", str(root / "vqgan"), "--epochs", "1", "--batch-size", "16",
                 "--eval-samples", "0", "--out", str(root / "prior")]) == 0
    return {name: root / name for name in ("cls", "detr", "setr", "ipt", "vqgan", "prior", "scenes", "photos")}
