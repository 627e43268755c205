from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_deit.md"
FIGURES = ("deit_tokens.png", "deit_temperature.png", "deit_randaugment.png", "deit_mixup_cutmix.png",
           "deit_repeated_aug.png", "deit_token_similarity.png", "deit_attention.png")


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
    namespace = run_markdown(DOC)
    text = DOC.read_text()
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in text  # and the page shows it
    ns = namespace
    # 1–2: the token sequence and the two heads, by hand against the model's own
    assert torch.equal(ns["z0"], ns["deit"].embed(ns["x"])) and ns["z0"].shape == (4, 18, 64)
    assert ns["extra"] == 778  # distillation token, its position, its head
    assert torch.allclose(ns["out"].logits, ns["cls_logits"], atol=1e-6)
    assert torch.allclose(ns["out"].dist_logits, ns["dist_logits"], atol=1e-6)
    assert torch.allclose(ns["prediction"], (ns["cls_logits"] + ns["dist_logits"]) / 2, atol=1e-6)
    # 3–4: the losses by hand against DistillationLoss and distill.py's terms
    from vitlab.tasks.classification.distill import soft_distillation_term

    assert torch.allclose(ns["soft_by_hand"], soft_distillation_term(ns["Z_d"], ns["Z_t"], ns["tau"]), atol=1e-6)
    assert torch.allclose(ns["library"], ns["by_hand"], atol=1e-6)
    assert torch.allclose(ns["Z_d_var"].grad, ns["expected"], atol=1e-6)
    assert torch.allclose(ns["hard_loss"](ns["images4"], ns["DistilledOutput"](ns["Z_s"], ns["Z_d"]), ns["y"]),
                          ns["hard_by_hand"], atol=1e-6)
    # 5: the recipe against its definitions
    assert torch.allclose(ns["batched"], ns["one_by_one"], atol=1e-6)
    lam = ns["lam"][0]
    assert torch.allclose(ns["mixed"][:, :1], lam * ns["garments"] + (1 - lam) * ns["garments"].roll(1, 0), atol=1e-6)
    assert torch.allclose(ns["cut_targets"][ns["rows"], ns["partner"]], ns["area"].expand(10))
    assert torch.equal(ns["order"][:12].view(4, 3), ns["order"][:12:3, None].expand(4, 3))
    # 6–7: a trained teacher and student, the tokens' maps
    assert ns["teacher_acc"] > 0.75 and ns["student_acc"] > 0.6
    assert len(ns["sims_trained"]) == 5
    assert torch.allclose(ns["patch_map"](ns["last"], 0), ns["token_map"](ns["last"], 2, (4, 4)), atol=1e-6)
