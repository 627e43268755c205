import pytest
import torch

from vitlab.bench import Workload, build, flops_per_image, measure

pytest.importorskip("timm")
pytest.importorskip("transformers")


def test_the_three_libraries_build_the_same_architecture():
    images = torch.randn(1, 1, 28, 28)
    counts, flops = {}, {}
    for library in ("vitlab", "timm", "hf"):
        model = build(library, "vit_mini_patch7_28").eval()
        assert model(images).shape == (1, 10)
        counts[library] = sum(p.numel() for p in model.parameters())
        flops[library] = flops_per_image(model, images)
    assert counts["vitlab"] == counts["timm"] == counts["hf"] == 1_199_882
    assert flops["vitlab"] == flops["timm"] == flops["hf"]


def test_measure_reports_every_row():
    rows = measure(Workload("vit_mini_patch7_28", infer_batch=4, train_batch=4), repeats=1, rounds=1)
    assert [r["library"] for r in rows] == ["vitlab", "timm", "hf"]
    for row in rows:
        assert row["infer_b1_img_s"] > 0 and row["infer_b4_img_s"] > 0 and row["train_img_s"] > 0
