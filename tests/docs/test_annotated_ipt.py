import importlib.util
from pathlib import Path

import pytest
import torch

from .docs_runner import python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_ipt.md"
FIGURES = ("ipt_degradations.png", "ipt_tokens.png", "ipt_training.png", "ipt_contrastive.png", "ipt_tiles.png",
           "ipt_two_tasks.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 12
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]
    assert text.startswith("# The annotated IPT\n")
    assert "Previous: [The annotated ViT](annotated_vit.md) · Next: [The annotated SETR](annotated_setr.md)" in text


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("skimage") is None,
                    reason="the page's photographs are scikit-image's (the test extra installs it)")
def test_the_walkthrough_runs_top_to_bottom_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_DOCS_IMG", str(tmp_path))
    threads = torch.get_num_threads()
    namespace = run_markdown(DOC)
    assert torch.get_num_threads() == threads  # the training block puts the thread count back
    text = DOC.read_text()
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in text  # and the page shows it
    # section 2: the paper's model counted by hand
    assert namespace["by_hand"] == namespace["counted"] == 118_892_370
    # sections 3-4: the body by hand (patchify, encoder, decoder with the task embedding as query) equals IPTBody
    assert torch.allclose(namespace["f_D"], namespace["module_out"], atol=1e-4)
    assert torch.allclose(namespace["decoded"], namespace["module_tokens"], atol=1e-4)
    # section 5: the contrastive term by hand equals vitlab's supervised_contrastive
    assert torch.allclose(namespace["contrastive"], namespace["supervised_contrastive"](
        namespace["features_before"], namespace["probe_labels"], 0.07), atol=1e-5)
    assert torch.allclose(namespace["task_losses"]["loss"], namespace["by_hand_loss"], atol=1e-5)  # L1 + λ·term
    assert namespace["contrastive_after"] < namespace["contrastive"]  # and training lowered it
    # section 6: the trained model, by hand and as a module
    model, ipt_by_hand, tile = namespace["model"], namespace["ipt_by_hand"], namespace["tile_noisy"]
    with torch.no_grad():
        assert torch.allclose(ipt_by_hand(model, tile, 1), model(tile, 1), atol=1e-5)
    # section 7: the tiles by hand equal forward_chop; one body, two tasks, against their baselines
    assert torch.allclose(namespace["by_hand_chop"], namespace["restored"]["denoise30"], atol=1e-5)
    baseline, restored = namespace["baseline_psnr"], namespace["model_psnr"]
    assert restored["denoise30"] > baseline["denoise30"] + 2.0
    assert abs(restored["sr2"] - baseline["sr2"]) < 0.5
