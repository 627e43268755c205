"""The benchmark harness (benchmarks/harness/): the same model in three libraries, interleaved rounds with
per-round ratios, memory in a fresh process, scaling with tokens."""

import pytest
import torch

from benchmarks.harness import Settings, Workload, build, comparable, flops_per_image, measure, peak_memory, scaling

pytest.importorskip("timm")
pytest.importorskip("transformers")


TINY = Settings(repeats=1, min_repeats=1, target_s=0.0, rounds=2, memory=False, peak_n=256)


def test_the_three_libraries_build_the_same_architecture():
    images = torch.randn(1, 1, 28, 28)
    counts, flops = {}, {}
    for library in ("vitlab", "timm", "hf"):
        model = build(library, "vit_mini_patch7_28").eval()
        assert model(images).shape == (1, 10)
        counts[library] = sum(p.numel() for p in model.parameters())
        flops[library] = flops_per_image(model, images)
    assert counts["vitlab"] == counts["timm"] == counts["hf"] == 1_199_882
    assert flops["timm"] == flops["hf"]
    # vitlab's last block makes only the class token's row; the counter sees the matmuls the N - P patch rows skip
    # (query, output projection, MLP), not the CPU's fused attention kernel
    vit = build("vitlab", "vit_mini_patch7_28")
    D, P, N = vit.config.dim, vit.num_prefix_tokens, vit.num_prefix_tokens + vit.patch_embed.num_patches
    hidden = vit.blocks[-1].mlp.fc1.out_features
    assert flops["timm"] - flops["vitlab"] == 2 * (N - P) * (D * D + D * D + 2 * D * hidden)


def test_a_conv_stem_model_is_compared_through_its_plain_patch_twin():
    assert comparable("vit_mini_convstem_28") == "vit_mini_patch7_28"
    assert comparable("vit_tiny_patch16_224") == "vit_tiny_patch16_224"
    with pytest.raises(ValueError, match="no convolutional stem"):
        build("timm", "vit_mini_convstem_28")


def test_measure_interleaves_the_libraries_and_reports_ratios_per_round():
    workload = Workload("vit_mini_convstem_28", infer_batch=4, train_batch=4)
    rows = measure(workload, TINY, progress=lambda _: None)["rows"]
    assert [r["label"] for r in rows] == ["vitlab", "timm", "hf", "vitlab:vit_mini_convstem_28"]
    assert {r["model"] for r in rows[:3]} == {"vit_mini_patch7_28"}
    for row in rows:
        assert row["infer_b1_img_s"] > 0 and row["infer_b4_img_s"] > 0 and row["train_img_s"] > 0
    vitlab, timm = rows[0], rows[1]
    for key in ("infer_b1_img_s", "infer_b4_img_s", "train_img_s"):
        low, high = vitlab[f"{key}_vs_timm_range"]
        assert low <= vitlab[f"{key}_vs_timm"] <= high
        assert vitlab[f"{key}_vs_hf"] > 0
        # the ratio is the median of per-round ratios: with two rounds, their mean
        assert vitlab[f"{key}_vs_timm"] == pytest.approx((low + high) / 2)
    assert "infer_b1_img_s_vs_timm" not in timm and "infer_b1_img_s_vs_timm" not in rows[3]


def test_peak_memory_runs_in_a_fresh_process():
    memory = peak_memory("vitlab", "vit_mini_patch7_28", 4, 4)
    assert memory["train_peak_mib"] >= memory["infer_peak_mib"] > memory["rss_baseline_mib"] > 0


def test_scaling_counts_tokens_and_the_attention_share():
    rows = scaling("vit_tiny_patch4_28", sizes=(28, 56), repeats=1, rounds=1)
    assert [r["tokens"] for r in rows] == [50, 197]
    assert rows[1]["attn_flop_share"] > rows[0]["attn_flop_share"] > 0  # quadratic in tokens, the rest linear
    assert all(0 < r["attn_time_share"] < 1 and r["gflops_per_image"] > 0 for r in rows)


def test_bench_refuses_default_cpu_settings_once_this_process_keeps_freed_memory(monkeypatch):
    from benchmarks.harness import rounds

    monkeypatch.setattr(rounds, "freed_memory_kept", lambda: True)
    with pytest.raises(ValueError, match="fresh process"):
        rounds.run_speed([Workload("vit_mini_patch7_28", 2, 2)], Settings(cpu_settings="default", memory=False))
    with pytest.raises(ValueError, match="one of vitlab, default"):
        rounds.run_speed([Workload("vit_mini_patch7_28", 2, 2)], Settings(cpu_settings="jemalloc", memory=False))
