import tempfile
from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_setr.md"
FIGURES = ("setr_patches.png", "setr_decoders.png", "setr_prediction.png", "setr_taps.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 10
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]


@pytest.mark.slow
@pytest.mark.skipif(not fashion_mnist_installed(), reason="Fashion-MNIST is not installed (scripts/setup.sh does it)")
def test_the_walkthrough_runs_top_to_bottom_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_DOCS_IMG", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the page's throwaway folders: in the test's own
    namespace = run_markdown(DOC)
    text = DOC.read_text()
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in text  # and the page shows it
    assert not any(path.is_dir() for path in tmp_path.iterdir())  # no run folder or scenes left behind
    assert not namespace["scene_dir"].exists()

    images = namespace["images"]
    mla, naive, pup = namespace["mla"], namespace["naive"], namespace["pup"]
    # the encoder by hand (patchify, E, E_pos) and its blocks one by one
    assert torch.allclose(namespace["embedded"], mla.backbone.embed(images), atol=1e-5)
    layers = mla.backbone.get_intermediate_layers(images, list(range(len(mla.backbone.blocks))))
    for ours, theirs in zip(namespace["by_hand_layers"], layers):
        assert torch.allclose(ours, theirs, atol=1e-5)
    # the sequence as a map: the page's transpose-reshape is the module's
    assert torch.equal(namespace["as_map"], namespace["tokens_to_map"](namespace["Z"], namespace["grid"]))
    # each decoder written out equals the module's logits
    log = namespace["logger"]([], show=False)
    with torch.no_grad():
        assert torch.allclose(namespace["naive_by_hand"](naive, images, log), naive(images).logits, atol=1e-5)
        assert torch.allclose(namespace["pup_by_hand"](pup, images, log), pup(images).logits, atol=1e-5)
        assert torch.allclose(namespace["mla_by_hand"](mla, images, log)[0], mla(images).logits, atol=1e-5)
        # MLA taps the paper's Z6, Z12, Z18, Z24 of 24 blocks; here Z2, Z4, Z6, Z8 of 8, the blocks' own outputs
        assert mla.mla_layers == (1, 3, 5, 7)
        for index, tap in zip(mla.mla_layers, mla.taps(images, mla.mla_layers)):
            assert torch.allclose(tap, namespace["by_hand_layers"][index], atol=1e-5)
    assert namespace["SETRConfig"](decoder="mla").layers(24)[1] == (5, 11, 17, 23)
    # the shapes each decoder goes through
    assert namespace["naive_shapes"][-1][1] == namespace["pup_shapes"][-1][1] == namespace["mla_shapes"][-1][1] \
        == (2, 4, 64, 64)
    assert [shape[-1] for _, shape in namespace["pup_shapes"] if len(shape) == 4] == [8, 8, 16, 16, 32, 32, 32, 64]
    # the tiny model trained in the page beats "background everywhere" by far
    assert namespace["result"]["miou"] > namespace["all_background"]["miou"] + 0.3
    assert namespace["losses"][-1] < namespace["losses"][0] / 3
    assert all(a > b for a, b in zip(namespace["trained_probe"], namespace["fresh_probe"]))
