import tempfile
from pathlib import Path

import pytest
import torch

from .docs_runner import fashion_mnist_installed, python_blocks, run_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "annotated_vit.md"


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
    for figure in ("patches.png", "patches_14x4.png", "pos_sincos.png", "pos_learned.png", "sqrt_dk.png",
                   "rollout.png"):
        assert (tmp_path / figure).stat().st_size > 1000, figure
        assert f"(img/{figure})" in DOC.read_text()  # and the page shows it
    assert namespace["by_hand"] == namespace["counted"] == 86_567_656
    assert namespace["run"]["test_acc"] > 0.6
    assert torch.allclose(namespace["fused"], namespace["explicit"], atol=1e-6)  # section 5: the two paths
