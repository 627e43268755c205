from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_vqgan.md"
FIGURES = ("vqgan_nearest_code.png", "vqgan_beta.png", "vqgan_restarts.png", "vqgan_autoencoder.png",
           "vqgan_prior_writing.png", "vqgan_prior_samples.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 15
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]
    for figure in FIGURES:
        assert f"(img/{figure})" in text


@pytest.mark.slow
@pytest.mark.skipif(not fashion_mnist_installed(), reason="Fashion-MNIST is not installed (scripts/setup.sh does it)")
def test_the_walkthrough_runs_top_to_bottom_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_DOCS_IMG", str(tmp_path))
    ns = run_markdown(DOC)
    text = DOC.read_text()
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in text  # and the page shows it

    # 1. the nearest code by hand (the expanded squared distance) is the quantiser's
    assert torch.equal(ns["quantizer"](ns["flat"].T.reshape(1, 2, 3, 4)).indices.flatten(), ns["nearest"])
    assert torch.allclose(ns["direct"], ns["expanded"], atol=1e-5)
    # 3. β: the same loss value, gradients scaled on opposite sides
    grad_z_paper, grad_codes_paper, _ = ns["gradients"][False]
    grad_z_taming, grad_codes_taming, _ = ns["gradients"][True]
    assert torch.allclose(grad_z_taming * ns["beta"], grad_z_paper, atol=1e-7)
    assert torch.allclose(grad_codes_paper * ns["beta"], grad_codes_taming, atol=1e-7)
    # 4. usage and perplexity by hand; dead codes restarted onto the batch's latents
    assert torch.allclose(ns["first"].perplexity, ns["perplexity"]) and torch.equal(ns["first"].usage, ns["usage"])
    assert len(ns["dead"]) > 0 and torch.equal(ns["after"][ns["dead"]], ns["batch_latents"][ns["picks"]])
    assert ns["runs"]["restart_every=10"][1][-1] > ns["runs"]["no remedy"][1][-1]
    # 5.–6. the models learned something in their seconds of training
    assert ns["out"].usage > 0.5
    assert ns["prior_loss"] < 2.5  # nats per code; uniform over 64 codes is 4.16
    # 7. the cached step-by-step loop is generate(), with and without the cache
    assert torch.equal(ns["sampled"], ns["written"].view(10, 7, 7))
    assert torch.equal(ns["sampled"], ns["recomputed_codes"])
    assert ns["caches"][0].length == 49 and torch.allclose(ns["caches"][0].self_k, ns["keys"], atol=1e-5)
    assert ns["samples"].shape == (60, 1, 28, 28)
