from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_detr.md"
FIGURES = ("detr_matching.png", "detr_eos_coef.png", "detr_duplicates.png", "detr_detections.png",
           "detr_cross_attention.png", "detr_query_slots.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 10
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]
    for figure in FIGURES:  # every picture the page draws is shown on it
        assert f"(img/{figure})" in text, figure


@pytest.mark.slow
@pytest.mark.skipif(not fashion_mnist_installed(), reason="Fashion-MNIST is not installed (scripts/setup.sh does it)")
def test_the_walkthrough_runs_top_to_bottom_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_DOCS_IMG", str(tmp_path))
    namespace = run_markdown(DOC)
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in DOC.read_text()  # and the page shows it
    ns = namespace
    # section 2: the cost matrix by hand is HungarianMatcher.cost_matrix
    assert torch.allclose(ns["cost"], ns["matcher"].cost_matrix(ns["logits"][0], ns["pred_boxes"][0],
                                                                ns["targets"][0]["labels"], ns["targets"][0]["boxes"]),
                          atol=1e-5)
    # section 3: the matcher's assignment is the brute-force optimum, in every image
    for b, (rows, cols) in enumerate(ns["matches"]):
        image = ns["targets"][b]
        _, best = ns["brute_force"](ns["matcher"].cost_matrix(ns["logits"][b], ns["pred_boxes"][b], image["labels"],
                                                              image["boxes"]))
        assert rows[cols.argsort()].tolist() == list(best)
    # section 4: the set loss by hand is SetCriterion's, term by term
    losses = ns["criterion"](ns["DetectionOutput"](ns["logits"], ns["pred_boxes"]), ns["targets"])
    for mine, name in (("loss_ce", "loss_ce"), ("loss_bbox", "loss_bbox"), ("loss_giou", "loss_giou"),
                       ("total", "loss")):
        assert torch.allclose(ns[mine], losses[name], atol=1e-6), name
    # section 5: SetCriterion's class term trained alone reaches the closed-form p(∅)
    for (N, M), trained in ns["trained_p"].items():
        for eos, p in zip(ns["coefs"], trained):
            assert abs(p - ns["closed_form"](eos, N, M)) < 2e-3
    # section 6: one detection left under the set loss, two under the overlap rule
    assert len(ns["kept_set"]["scores"]) == 1 and len(ns["kept_rule"]["scores"]) == 2
    # section 7: the forward pass by hand is the model's (the page asserts it for the untrained model; here the
    # trained one, through the page's function)
    with torch.no_grad():
        images = ns["normalise"](ns["val_images"][:8])
        logits, boxes, _ = ns["forward_by_hand"](ns["model"], images)
        out = ns["model"](images)
    assert torch.allclose(logits[-1], out.logits, atol=1e-4) and torch.allclose(boxes[-1], out.pred_boxes, atol=1e-5)
    # section 8: a few seconds of training learned something (loose bounds; the run is seeded)
    assert ns["val_class_acc"] > 0.6 and ns["val_iou"].mean() > 0.4
    assert not Path(ns["scratch"].name).exists()  # the generated scenes are gone
