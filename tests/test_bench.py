import importlib.util
import json
from pathlib import Path

import pytest
import torch

from vitlab.bench import Settings, Workload, build, comparable, flops_per_image, measure, peak_memory, scaling
from vitlab.engine.speed import autocast, bf16_supported, bf16_unsupported_reason, check_bf16, maybe_compile

pytest.importorskip("timm")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def one_thread():
    """These tests check the harness, not the speed: one thread keeps them quick on a busy machine, where
    OpenMP threads waiting for each other at every op make tiny models many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    assert flops["vitlab"] == flops["timm"] == flops["hf"]


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


def test_speed_script_writes_json_and_markdown(tmp_path):
    spec = importlib.util.spec_from_file_location("speed", ROOT / "benchmarks" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    speed.main(["--quick", "--models", "vit_mini_convstem_28", "--no-memory", "--out", str(tmp_path), "--tag", "t"])
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["machine"]["matmul_peak_gflops"] > 0 and result["machine"]["torch"] == torch.__version__
    assert {r["label"] for r in result["rows"]} == {"vitlab", "timm", "hf", "vitlab:vit_mini_convstem_28"}
    assert all(r["infer_share_of_peak"] > 0 for r in result["rows"])
    assert [r["img_size"] for r in result["scaling"]] == [28, 56]
    assert {r["mode"] for r in result["attention_paths"]} == {"inference", "forward+backward"}
    assert all(r["fused_ms"] > 0 and r["explicit_ms"] > 0 for r in result["attention_paths"])
    markdown = (tmp_path / "t.md").read_text()
    assert "| vitlab/timm | vitlab/HF |" in markdown and "torch.mm peak" in markdown
    assert result["settings"]["cpu_settings"] == "vitlab" and "CPU process settings: vitlab's" in markdown
    if not bf16_supported("cpu"):
        assert any("bf16" in note for note in result["notes"])


def test_bf16_is_detected_and_refused_where_it_would_be_emulated():
    supported = bf16_supported("cpu")
    assert isinstance(supported, bool)
    assert (bf16_unsupported_reason("cpu") == "") == supported
    if not supported:
        with pytest.raises(ValueError, match="bf16"):
            check_bf16("cpu")


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_autocast_runs_matmuls_in_the_dtype_asked_for(dtype):
    # the one switch the trainer, eval and the benchmarks share; None is plain fp32
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("cpu", dtype):
        product = a @ b
    assert product.dtype == (dtype or torch.float32)
    torch.testing.assert_close(product.float(), a @ b, atol=0.1, rtol=0.05)


def test_maybe_compile_is_the_model_itself_when_off():
    model = torch.nn.Linear(2, 2)
    assert maybe_compile(model, False) is model


def test_eval_refuses_bf16_where_it_would_be_emulated(tmp_path, capsys):
    if bf16_supported("cpu"):
        pytest.skip("this CPU has native bf16")
    from vitlab.cli.main import main

    assert main(["eval", str(tmp_path), "--bf16"]) == 2
    assert "bf16" in capsys.readouterr().err


_MMAPPED_BYTES = """
import ctypes, json, os, sys
import torch
from vitlab.engine.speed import freed_memory_kept, keep_freed_memory


class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2: hblkhd = bytes held in separate mmaps
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
t = torch.ones(64 * 2**20 // 4)  # a 64 MB tensor, as large as a ViT-B activation at batch 32
print(json.dumps({"applied": applied, "kept": freed_memory_kept(), "mmapped": libc.mallinfo2().hblkhd}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="glibc allocator check: Linux only")
@pytest.mark.parametrize("mode", ["default", "keep", "keep-but-env-default"])
def test_keep_freed_memory_moves_large_tensors_from_mmap_to_the_heap(mode):
    """glibc's own accounting (mallinfo2) in a fresh process: with its defaults a 64 MB tensor is a separate mmap
    (returned to the kernel when freed); after keep_freed_memory() it comes from the heap; VITLAB_MALLOC=default
    leaves the defaults."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VITLAB_MALLOC", None)
    if mode == "keep-but-env-default":
        env["VITLAB_MALLOC"] = "default"
    done = subprocess.run([sys.executable, "-c", _MMAPPED_BYTES, mode.split("-")[0]], capture_output=True,
                          text=True, env=env, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "keep":
        assert out["applied"] and out["kept"]
        assert out["mmapped"] < 64 * 2**20
    else:
        assert not out["applied"] and not out["kept"]
        assert out["mmapped"] >= 64 * 2**20


def test_bench_refuses_default_cpu_settings_once_this_process_keeps_freed_memory(monkeypatch):
    from vitlab import bench

    monkeypatch.setattr(bench, "freed_memory_kept", lambda: True)
    with pytest.raises(ValueError, match="fresh process"):
        bench.run_speed([Workload("vit_mini_patch7_28", 2, 2)], Settings(cpu_settings="default", memory=False))
    with pytest.raises(ValueError, match="one of vitlab, default"):
        bench.run_speed([Workload("vit_mini_patch7_28", 2, 2)], Settings(cpu_settings="jemalloc", memory=False))


def test_flush_denormals_turns_underflow_to_zero_and_back(monkeypatch):
    from vitlab.engine.speed import flush_denormals, tune_process

    try:
        assert flush_denormals(False) is False
        tiny = torch.tensor([1e-39])  # a denormal fp32 (made after flushing is off: making it under flushing gives 0)
        assert (tiny * 1.0).item() != 0.0  # gradual underflow: the denormal survives
        if not flush_denormals(True):
            pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal needs SSE3)")
        assert (tiny * 1.0).item() == 0.0
        monkeypatch.setenv("VITLAB_DENORMALS", "keep")
        assert flush_denormals(True) is False and (tiny * 1.0).item() != 0.0
        monkeypatch.setenv("VITLAB_MALLOC", "default")
        assert tune_process() == {"keep_freed_memory": False, "flush_denormals": False}
    finally:
        torch.set_flush_denormal(False)


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_inplace_inference_benchmark_runs_both_process_settings(tmp_path):
    rows = _load_script("inplace_inference").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    assert [r["cpu_settings"] for r in rows] == ["default", "vitlab"]
    assert all(r["in place / out of place"] > 0 and r["timm img/s"] > 0 for r in rows)
    assert "| in place / out of place |" in (tmp_path / "t.md").read_text()


@pytest.mark.slow
def test_process_settings_benchmark_times_each_library_alone_under_both(tmp_path):
    result = _load_script("process_settings").main(["--quick", "--libraries", "vitlab", "timm", "--out",
                                                    str(tmp_path), "--tag", "t"])
    assert set(result["samples"]) == {"vitlab:default", "vitlab:vitlab", "timm:default", "timm:vitlab"}
    assert all(v > 0 for v in result["median"].values())
    assert "vitlab (its settings) / timm (defaults)" in (tmp_path / "t.md").read_text()


def test_randaugment_benchmark_times_both_ways(tmp_path):
    result = _load_script("randaugment").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    (row,) = result["rows"]
    assert row["shape"] == [8, 1, 28, 28] and all(v > 0 for v in row["seconds"].values())
    assert 0 < row["share_of_step_after"] < 1 and "| vitlab batched |" in (tmp_path / "t.md").read_text()
