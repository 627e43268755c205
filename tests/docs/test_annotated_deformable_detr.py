import tempfile
from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_deformable_detr.md"
FIGURES = ("deformable_detr_cost.png", "deformable_detr_bilinear.png", "deformable_detr_sampling.png",
           "deformable_detr_reference_points.png", "deformable_detr_refinement.png", "deformable_detr_proposals.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 15
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]
    for figure in FIGURES:
        assert f"(img/{figure})" in text and f'IMG_DIR / "{figure}"' in text, figure


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
    ns = namespace
    # section 1: the paper's pyramid and the counted FLOPs
    assert ns["S"] == 17_821 and ns["dense_flops"](ns["S"], 256) > 30 * ns["deformable_flops"](ns["S"], 256, 8, 4, 4)
    # section 2: one bilinear reading by hand == the core == grid_sample(align_corners=False)
    assert torch.allclose(ns["core_at"](ns["level"], ns["x"], ns["y"]), ns["by_hand_point"], atol=1e-5)
    assert torch.allclose(ns["grid_sample_at"](ns["level"], ns["x"], ns["y"], align_corners=False),
                          ns["by_hand_point"], atol=1e-5)
    # section 3: the loop of bilinear readings == multi_scale_deformable_attention == the grid_sample reference
    assert torch.allclose(ns["by_hand_msda"], ns["fast"], atol=1e-6)
    assert torch.allclose(ns["by_hand_msda"], ns["reference"], atol=1e-6)
    # section 5: the trained cross-attention recomputed from its own layers == what the layer gave
    assert torch.allclose(ns["by_hand_cross"], ns["layer_output"], atol=1e-5)
    # sections 7 and 8: each layer's box is the next one's reference; the top proposals are the first references
    assert torch.allclose(ns["references"][1], ns["layer_boxes"][0], atol=1e-6)
    assert torch.allclose(ns["chosen"], ns["references"][0], atol=1e-5)
    # the seconds of training fitted the four scenes
    assert ns["history"][-1] < 0.2 * ns["history"][0] and ns["iou"][-1] > 0.6
