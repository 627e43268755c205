import math
from pathlib import Path

import pytest
import torch

from .docs_runner import python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_transformer.md"
FIGURES = ("transformer_attention.png", "transformer_sqrt_dk.png", "transformer_positional.png",
           "transformer_masks.png", "transformer_training.png", "transformer_cross_attention.png",
           "transformer_beam.png")


def test_the_runner_finds_every_block():
    text = DOC.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 15
    first_line, code = blocks[0]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0]
    for figure in FIGURES:
        assert f"(img/{figure})" in text  # every promised picture is shown on the page


@pytest.mark.slow
def test_the_walkthrough_runs_top_to_bottom_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_DOCS_IMG", str(tmp_path))
    threads = torch.get_num_threads()
    namespace = run_markdown(DOC)
    assert torch.get_num_threads() == threads  # the page hands the thread count back
    text = DOC.read_text()
    for figure in FIGURES:
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in text
    ns = namespace
    # section 1: softmax(QKᵀ/√d_k)V by hand = explicit_attention = MultiHeadAttention (both paths)
    assert torch.allclose(ns["reference"][0, 0], ns["out"], atol=1e-6)
    assert torch.allclose(ns["fused"][0], ns["out"], atol=1e-6)
    # section 2: var(q·k) ≈ d_k, and ≈ 1 once scaled
    assert all(abs(v - 1) < 0.2 for v in ns["variance_scaled"])
    # section 3: heads one by one, and by reshape, = MultiHeadAttention
    assert torch.allclose(ns["by_loop"], ns["module_out"][0], atol=1e-5)
    assert torch.allclose(ns["by_reshape"], ns["module_out"], atol=1e-5)
    # section 4: sincos_1d = the formula; PE(pos + k) = M_k PE(pos)
    assert torch.allclose(ns["pe"], ns["by_hand"], atol=1e-6)
    pe, shift = ns["pe"], ns["shift_matrix"]
    assert torch.allclose(pe[7:], pe[:-7] @ shift(7).T, atol=1e-5)
    # section 5: masked attention by hand = the module with the mask
    assert torch.allclose(ns["module_masked"], ns["masked"], atol=1e-5)
    # section 6: the whole encoder–decoder by hand = Seq2SeqTransformer
    assert torch.allclose(ns["by_hand_logits"], ns["module_logits"], atol=1e-5)
    assert ns["by_hand_count"] == ns["counted"]
    # section 7: the model learned to reverse
    assert ns["accuracy"][ns["STEPS"]] > 0.8
    # section 8: greedy by hand = greedy_decode; cache = recomputation; beam by hand = beam_search
    assert torch.equal(ns["greedy"].tokens, ns["prefix"][:, 1:])
    assert torch.equal(ns["cached"].tokens, ns["recomputed"].tokens)
    assert ns["beam"].tokens[0].tolist() == ns["by_hand_beam"]
    assert math.isclose(ns["beam"].scores.item(), ns["best_score"], abs_tol=1e-4)
    assert ns["beam_accuracy"] >= ns["accuracy"][ns["STEPS"]] - 0.05
