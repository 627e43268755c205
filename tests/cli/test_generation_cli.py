"""VQGAN's two stages from the command line on the 200-image Fashion-MNIST slice: `vitlab train --task vqgan`,
`vitlab train --task prior --vqgan RUN --classifier RUN`, `vitlab eval --json`, `vitlab sample`, `vitlab
reconstruct`, through main([...]). The scores are checked against torchmetrics, torch.cdist and the files."""

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.cli.main import main
from vitlab.data.fashion_mnist import load_fashion_mnist
from vitlab.engine.run import RunDir

from ..engine.conftest import MINI

DATA = ["--data-dir", str(MINI), "--allow-partial-data"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, trained):
    """The session's classifier and VQGAN runs (tests/conftest.py: a ViT-Tiny/4 for an epoch; a VQGAN for an epoch
    of batches of 16, its discriminator from step 6) and a prior trained here on that VQGAN, scored by that
    classifier."""
    root = tmp_path_factory.mktemp("generation")
    (root / "classifier").symlink_to(trained["cls"], target_is_directory=True)
    (root / "vqgan").symlink_to(trained["vqgan"], target_is_directory=True)
    assert main(["train", "--task", "prior", "--vqgan", str(root / "vqgan"), "--classifier", str(root / "classifier"),
                 "--epochs", "1", "--batch-size", "16", "--eval-samples", "20", "--out", str(root / "prior")]) == 0
    return root


@pytest.mark.slow
def test_train_both_stages_then_eval(runs, capsys):
    *vq_rows, vq_test = RunDir(runs / "vqgan").read_metrics()
    logged = {"val_psnr", "val_ssim", "val_usage", "val_perplexity", "train_loss_g", "train_loss_d", "train_gan_weight"}
    assert logged <= set(vq_rows[-1]) and {"test_psnr", "test_ssim"} <= set(vq_test)
    assert vq_rows[-1]["train_loss_d"] > 0  # the discriminator started at step 6 of 11
    *prior_rows, prior_test = RunDir(runs / "prior").read_metrics()
    assert {"val_loss", "val_fid", "val_fid_floor", "val_class_acc"} <= set(prior_rows[-1])
    assert {"test_loss", "test_fid", "test_fid_floor", "test_class_acc"} <= set(prior_test)
    capsys.readouterr()
    assert main(["eval", str(runs / "vqgan"), "--json"]) == 0
    vq = json.loads(capsys.readouterr().out)
    assert {"psnr", "ssim", "usage", "perplexity"} <= set(vq) and vq["num_images"] == 100 and vq["split"] == "test"
    assert vq["psnr"] == pytest.approx(vq_test["test_psnr"], rel=1e-5)  # the same 100 test images and weights
    assert main(["eval", str(runs / "prior"), "--json", "--samples", "30"]) == 0
    prior = json.loads(capsys.readouterr().out)
    assert {"psnr", "ssim", "usage", "perplexity", "fid", "class_acc", "fid_floor", "code_loss"} <= set(prior)
    assert prior["code_loss"] == pytest.approx(prior_test["test_loss"], rel=1e-5)
    assert prior["samples"] == 30 and 0 <= prior["class_acc"] <= 1 and prior["fid"] > 0
    assert prior["psnr"] == pytest.approx(vq["psnr"], rel=1e-5)  # the prior's VQGAN is that run's best


@pytest.mark.slow
def test_sample_grid_and_cache_equivalence(runs, tmp_path, capsys):
    assert main(["sample", str(runs / "prior"), "--class", "3", "--n", "4", "--top-k", "20", "--out",
                 str(tmp_path / "a.png")]) == 0
    assert main(["sample", str(runs / "prior"), "--class", "3", "--n", "4", "--top-k", "20", "--no-cache",
                 "--out", str(tmp_path / "b.png")]) == 0
    a, b = np.asarray(Image.open(tmp_path / "a.png")), np.asarray(Image.open(tmp_path / "b.png"))
    assert a.shape == (2 + 34, 2 + 4 * 34) and np.array_equal(a, b)  # 4 samples of 32 px in a row, 2 px apart
    assert main(["sample", str(runs / "prior"), "--n", "2", "--out", str(tmp_path / "all.png"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["samples"] == 20 and len(result["classes"]) == 10
    assert np.asarray(Image.open(tmp_path / "all.png")).shape == (2 + 10 * 34, 2 + 2 * 34)
    assert main(["sample", str(runs / "prior"), "--class", "10", "--out", str(tmp_path / "x.png")]) == 2
    assert "--class must be one of 0 … 9" in capsys.readouterr().err
    assert main(["sample", str(runs / "vqgan"), "--out", str(tmp_path / "x.png")]) == 2
    assert "takes a prior run" in capsys.readouterr().err


@pytest.mark.slow
def test_reconstruct_writes_pairs_and_their_psnr(runs, tmp_path, capsys):
    images, _ = load_fashion_mnist("test", MINI, download=False, strict_counts=False)
    path = tmp_path / "item.png"
    Image.fromarray(images[0].numpy()).save(path)
    capsys.readouterr()
    assert main(["reconstruct", str(runs / "vqgan"), str(path), "--out", str(tmp_path / "rec"), "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    pair = np.asarray(Image.open(item["out"])).astype(np.float64) / 255
    assert pair.shape == (2 + 30, 2 + 2 * 30)  # the 28 data pixels of input and reconstruction, side by side
    original, rebuilt = pair[2:30, 2:30], pair[2:30, 32:60]
    assert np.allclose(original, images[0].numpy() / 255, atol=1 / 255)
    mse = ((original - rebuilt) ** 2).mean()  # PNG rounding moves it by little
    assert item["psnr"] == pytest.approx(10 * math.log10(1 / mse), abs=0.1)
    assert np.asarray(item["codes"]).shape == (8, 8)
    with torch.no_grad():  # the codes are the nearest codebook entries of the encoder's latents
        vqgan = RunDir(runs / "vqgan").load_model("best")
        x = torch.nn.functional.pad(images[:1, None], (2, 2, 2, 2)).float() / 127.5 - 1  # a black border
        z = vqgan.encode(x).permute(0, 2, 3, 1).reshape(-1, vqgan.config.embed_dim)
        nearest = torch.cdist(z, vqgan.quantize.embedding.weight).argmin(1).view(8, 8)
    # all equal here; a near tie may round the other way between cdist and the quantiser's expanded formula
    assert (nearest == torch.tensor(item["codes"])).float().mean() >= 0.95
