"""`vitlab train --task restoration`, `vitlab eval` and `vitlab restore` on scikit-image's photographs (three to
train on, of which one validates, two to test), through main([...])."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.cli.main import main
from vitlab.data.degradations import bicubic_downscale, modcrop
from vitlab.data.photos import skimage_photos
from vitlab.data.restoration import load_photos
from vitlab.tasks.restoration.metrics import restoration_scores


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    for i, (name, array) in enumerate(skimage_photos().items()):
        split = "test" if i >= 3 else "train"
        (root / split).mkdir(exist_ok=True)
        Image.fromarray(array).save(root / split / f"{name}.png")
    return root


@pytest.fixture(scope="module")
def run_dir(photos, tmp_path_factory):
    out = tmp_path_factory.mktemp("ipt") / "run"
    assert main(["train", "--task", "restoration", "--model", "ipt_small", "--data", str(photos), "--degradations",
                 "sr2,denoise30", "--out", str(out), "--steps", "4", "--batch-size", "2", "--patches-per-task", "4",
                 "--eval-crop", "64"]) == 0
    return out


@pytest.mark.slow
def test_train_then_eval_reports_each_degradation(run_dir, capsys):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last, test = rows[-2:]
    assert last["step"] == 4 and {"val_sr2_psnr_y", "val_sr2_ssim_y", "val_sr2_psnr_rgb",
                                  "val_denoise30_psnr_y"} <= set(last)
    assert last["val_psnr_y"] == pytest.approx((last["val_sr2_psnr_y"] + last["val_denoise30_psnr_y"]) / 2)
    assert test["step"] == 4 and {"test_sr2_psnr_y", "test_denoise30_psnr_y"} <= set(test)
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["task"] == "restoration" and saved["data"]["degradations"] == ["sr2", "denoise30"]
    assert [Path(p).name for p in saved["data"]["test"]] == ["motorcycle.png", "rocket.png"]
    # one whole photograph of the three held out of training to validate
    assert len(saved["data"]["val"]) == 1 and len(saved["data"]["train"]) == 2
    assert not set(saved["data"]["val"]) & set(saved["data"]["train"])

    capsys.readouterr()
    assert main(["eval", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result["degradations"]) == ["sr2", "denoise30"] and result["num_images"] == 2
    for name, scores in result["degradations"].items():
        assert {"psnr_y", "ssim_y", "psnr_rgb", "input_psnr_y"} <= set(scores)
        assert scores["psnr_y"] == pytest.approx(test[f"test_{name}_psnr_y"])  # the same images, seed and weights
    assert main(["eval", str(run_dir), "--degradation", "denoise30"]) == 0
    text = capsys.readouterr().out
    assert "denoise30" in text and "sr2 " not in text and "PSNR-Y" in text


@pytest.mark.slow
def test_eval_with_given_lr_images_scores_them_as_the_downscaling_here(run_dir, photos, tmp_path, capsys):
    """An HR folder with an LR folder (DIV2K's names, 0001x2.png) gives the figures of the same images downscaled
    here with the same PIL bicubic: the pairing, the crop to a multiple of the scale and the shave agree."""
    hr, lr = tmp_path / "HR", tmp_path / "LR_bicubic" / "X2"
    hr.mkdir()
    lr.mkdir(parents=True)
    for path in sorted((photos / "test").glob("*.png")):
        image = load_photos([path], halve_first=False)[0][:, :101, :131]  # odd sides: modcrop must happen
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(hr / path.name)
        small = bicubic_downscale(modcrop(image, 2), 2)
        Image.fromarray(small.permute(1, 2, 0).numpy()).save(lr / f"{path.stem}x2.png")
    assert main(["eval", str(run_dir), "--data", str(hr), "--lr", str(lr), "--degradation", "sr2", "--json"]) == 0
    given = json.loads(capsys.readouterr().out)["degradations"]["sr2"]
    assert main(["eval", str(run_dir), "--data", str(hr), "--crop", "0", "--degradation", "sr2", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)["degradations"]["sr2"]
    for key in ("psnr_y", "ssim_y", "psnr_rgb", "input_psnr_y", "input_ssim_y"):
        assert given[key] == pytest.approx(made[key], abs=1e-6)
    assert main(["eval", str(run_dir), "--data", str(hr), "--lr", str(lr)]) == 2  # which scale? it says
    assert "--degradation" in capsys.readouterr().err


@pytest.mark.slow
def test_restore_writes_images_of_any_size(run_dir, tmp_path, capsys):
    rng = np.random.default_rng(0)
    image = tmp_path / "odd.png"
    Image.fromarray(rng.integers(0, 256, (50, 61, 3), dtype=np.uint8)).save(image)
    capsys.readouterr()
    assert main(["restore", str(run_dir), str(image), "--degradation", "sr2", "--out", str(tmp_path / "out"),
                 "--batch-size", "5", "--json"]) == 0
    item = json.loads(capsys.readouterr().out)[0]
    assert item["output_size"] == [100, 122] and Image.open(item["output"]).size == (122, 100)

    from vitlab.engine.run import RunDir

    model = RunDir(run_dir).load_model("best")
    with torch.no_grad():
        expected = model.forward_chop(torch.from_numpy(np.asarray(Image.open(image))).permute(2, 0, 1)[None] / 255,
                                      "sr2")
    written = torch.from_numpy(np.asarray(Image.open(item["output"]))).permute(2, 0, 1)
    assert (written.float() - expected[0].mul(255).clamp(0, 255).round()).abs().max() <= 1  # 8-bit, ±rounding

    reference = tmp_path / "clean"
    reference.mkdir()
    Image.open(image).save(reference / "odd.png")
    assert main(["restore", str(run_dir), str(image), "--degradation", "denoise30", "--out", str(tmp_path / "out"),
                 "--reference", str(reference), "--json"]) == 0
    item = json.loads(capsys.readouterr().out)[0]
    restored = torch.from_numpy(np.asarray(Image.open(item["output"]))).permute(2, 0, 1)[None].float() / 255
    clean = torch.from_numpy(np.asarray(Image.open(image))).permute(2, 0, 1)[None].float() / 255
    assert item["psnr_y"] == pytest.approx(float(restoration_scores(restored, clean)["psnr_y"][0]))
    assert main(["restore", str(run_dir), str(image), "--degradation", "sr4", "--out", str(tmp_path)]) == 2
    assert "sr2, denoise30" in capsys.readouterr().err  # the run's tasks, named


@pytest.mark.slow
def test_restore_blends_the_tiles_as_asked_and_the_global_residual_is_an_option(run_dir, photos, tmp_path, capsys):
    from vitlab.engine.run import RunDir

    image = tmp_path / "odd.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (70, 61, 3), dtype=np.uint8)).save(image)
    assert main(["restore", str(run_dir), str(image), "--degradation", "sr2", "--out", str(tmp_path / "out"),
                 "--blend", "centre", "--json"]) == 0
    item = json.loads(capsys.readouterr().out)[0]
    model = RunDir(run_dir).load_model("best")
    assert model.global_residual  # ipt_small's default
    with torch.no_grad():
        expected = model.forward_chop(torch.from_numpy(np.asarray(Image.open(image))).permute(2, 0, 1)[None] / 255,
                                      "sr2", blend="centre")
    written = torch.from_numpy(np.asarray(Image.open(item["output"]))).permute(2, 0, 1)
    assert (written.float() - expected[0].mul(255).clamp(0, 255).round()).abs().max() <= 1

    out = tmp_path / "plain"
    assert main(["train", "--task", "restoration", "--model", "ipt_small", "--data", str(photos), "--degradations",
                 "sr2", "--global-residual", "false", "--out", str(out), "--steps", "1", "--batch-size", "2",
                 "--patches-per-task", "2", "--eval-crop", "48"]) == 0
    assert not RunDir(out).load_model("last").global_residual


@pytest.mark.whole_machine  # two processes, one per core
@pytest.mark.slow
def test_torchrun_two_processes_train_different_tasks_in_one_step(photos, tmp_path, monkeypatch, capsys):
    """Batches alternate by task, so in each step one process trains sr2's head and tail and the other
    denoise30's (DistributedDataParallel must allow unused parameters); the shards of the evaluation add up to one
    process's figures on the whole test set."""
    import subprocess

    from tests.engine.test_distributed import torchrun

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "ddp"
    done = subprocess.run(torchrun("--task", "restoration", "--model", "ipt_small", "--data", str(photos),
                                   "--degradations", "sr2,denoise30", "--out", str(out), "--threads", "1",
                                   "--steps", "2", "--batch-size", "2", "--patches-per-task", "4",
                                   "--eval-crop", "48"), check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])  # the test, on the selected weights
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)["degradations"]
    for name in ("sr2", "denoise30"):
        assert alone[name]["psnr_y"] == pytest.approx(row[f"test_{name}_psnr_y"], abs=1e-6)
