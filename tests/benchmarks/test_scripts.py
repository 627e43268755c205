"""Smoke runs of the benchmark scripts (benchmarks/*.py): each writes its JSON and markdown."""

import importlib.util
import json
import math
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from vitlab.engine.speed import bf16_supported

pytest.importorskip("timm")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_speed_script_writes_json_and_markdown(tmp_path):
    speed = _load_script("speed")
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


def test_speed_script_times_any_model_at_the_batches_given(tmp_path, capsys):
    """What `vitlab bench MODEL --batch N` did, from the clone (the harness is not in the installed package)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the options are checked here, not the speed
    try:
        result = _load_script("speed").main(["--models", "vit_mini_patch7_28", "--batch", "2", "--train-batch", "3",
                                             "--repeats", "1", "--rounds", "1", "--target-s", "0", "--no-memory",
                                             "--no-scaling", "--no-attention-paths", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert [r["label"] for r in result["rows"]] == ["vitlab", "timm", "hf"]
    assert {(r["infer_batch"], r["train_batch"]) for r in result["rows"]} == {(2, 3)}
    assert "| vitlab/timm | vitlab/HF |" in capsys.readouterr().out


def test_linear_kernels_script_times_the_three_matmul_kernels_on_the_same_layer(tmp_path):
    result = _load_script("linear_kernels").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    (row,) = result["rows"]
    assert row["mkl_gflops"] > 0 and row["packed_mkl_gflops"] > 0 and row["onednn_gflops"] > 0
    assert row["max_abs_diff"] < 1e-4
    assert "| oneDNN / packed MKL |" in (tmp_path / "t.md").read_text()


@pytest.mark.slow
def test_onnx_fusions_times_the_four_graphs_in_both_precisions_and_profiles_vitlabs(tmp_path):
    pytest.importorskip("onnxruntime")
    result = _load_script("onnx_fusions").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    rows = result["rows"]
    assert [(r["precision"], r["graph"]) for r in rows] == [(p, g) for p in ("fp32", "int8")
                                                            for g in ("optimizer", "+ one-op attention",
                                                                      "+ LayerNorm apart", "vitlab")]
    assert all(r["images_per_s"] > 0 for r in rows)
    assert all(r["max_abs_diff"] < 1e-4 for r in rows if r["precision"] == "fp32")
    assert result["layer_norm"]["max_abs_diff"] < 1e-4 and min(result["layer_norm"]["ms"].values()) > 0
    totals = result["profile"]["totals"]
    assert "MatMulIntegerToFloat" in result["profile"]["int8"] and "MultiHeadAttention" in result["profile"]["fp32"]
    assert totals["fp32"]["products"] > 0 and totals["int8"]["products"] > 0
    assert "| SkipLayerNormalization |" in (tmp_path / "t_quick.md").read_text()


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


@pytest.mark.slow  # fresh processes, one per measurement
def test_process_settings_benchmark_times_each_setting_alone_against_the_defaults(tmp_path):
    script = _load_script("process_settings")
    result = script.main(["--quick", "--libraries", "vitlab", "--models", "vit_mini_patch7_28", "--settings",
                          "default", "malloc", "denormals", "--out", str(tmp_path), "--tag", "t"])
    assert set(result["samples"]) == {"vitlab:default", "vitlab:malloc", "vitlab:denormals"}
    assert result["workloads"] == ["vit_mini_patch7_28 infer b64", "vit_mini_patch7_28 train b32"]
    header = (tmp_path / "t.md").read_text().splitlines()[2]
    assert "freed memory kept only / defaults" in header and "denormals flushed only / defaults" in header
    assert "vitlab's settings" not in header
    samples = {("vitlab", "default"): [{"w": 10.0}, {"w": 10.0}, {"w": 10.0}],
               ("vitlab", "malloc"): [{"w": 9.0}, {"w": 12.0}, {"w": 10.0}]}
    assert script.ratio_cell(samples, "vitlab", "malloc", "w", 10.0) == "1.00 (0.90–1.20)"
    with pytest.raises(SystemExit):
        script.main(["--quick", "--settings", "malloc", "vitlab", "--out", str(tmp_path)])


def test_randaugment_benchmark_times_both_ways(tmp_path):
    result = _load_script("randaugment").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    (row,) = result["rows"]
    assert row["shape"] == [8, 1, 28, 28] and all(v > 0 for v in row["seconds"].values())
    assert 0 < row["share_of_step_after"] < 1 and "| vitlab batched |" in (tmp_path / "t.md").read_text()


def _tiny_scenes(tmp_path):
    from vitlab.cli.main import main

    mini = ROOT / "tests" / "fixtures" / "fashion-mnist-mini"
    data = tmp_path / "scenes"
    assert main(["make-scenes", "--out", str(data), "--train", "16", "--val", "4", "--test", "4", "--size", "64",
                 "--data-dir", str(mini), "--allow-partial-data"]) == 0
    return data


@pytest.mark.slow
def test_detr_scenes_benchmark_records_both_detectors_curves(tmp_path):
    data = _tiny_scenes(tmp_path)
    out = tmp_path / "detr_scenes.json"
    _load_script("detr_scenes").main(["--quick", "--data", str(data), "--out", str(out), "--models", "detr",
                                      "detr-pretrained", "fasterrcnn"])
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"detr", "detr_pretrained", "fasterrcnn"}
    pretrained = result["results"]["detr_pretrained"]
    assert pretrained["curve"][0]["train_min"] > pretrained["pretraining"]["train_min"] > 0
    for run in result["results"].values():
        assert run["curve"] and all(0 <= row["map_50"] <= 1 and row["train_min"] > 0 for row in run["curve"])
    assert result["bar"]["ap50_target"] == 0.5 and "| detr_small |" in result["table"]
    assert out.with_suffix(".png").is_file()


@pytest.mark.slow
def test_deformable_detr_scenes_takes_detr_small_again_from_detr_scenes_unless_trained_there(tmp_path):
    script = _load_script("deformable_detr_scenes")
    options = {"epochs": 16, "batch_size": 4}
    scenes = tmp_path / "detr_scenes.json"
    scenes.write_text(json.dumps({"results": {"detr": {"options": options, "curve": ["rerun"]}}}))
    reused = {"detr_small": {"options": options, "curve": ["old"], "source": "detr_scenes.json"}}
    trained_here = {"detr_small": {"options": options, "curve": ["own"]}}
    assert script.with_reused_detr(reused, ["deformable_detr_small"], scenes, options)["detr_small"]["curve"] == [
        "rerun"]
    assert script.with_reused_detr({}, ["deformable_detr_small"], scenes, options)["detr_small"]["curve"] == ["rerun"]
    assert script.with_reused_detr(trained_here, ["deformable_detr_small"], scenes, options) == trained_here
    assert script.with_reused_detr(reused, ["detr_small"], scenes, options) == reused
    assert script.with_reused_detr(reused, [], scenes, {**options, "epochs": 8}) == reused  # another recipe


def test_deformable_detr_scenes_benchmark_compares_the_two_detectors(tmp_path):
    data = _tiny_scenes(tmp_path)
    out = tmp_path / "deformable_detr_scenes.json"
    _load_script("deformable_detr_scenes").main(["--quick", "--data", str(data), "--out", str(out), "--models",
                                                 "detr_small", "deformable_detr_small"])
    result = json.loads(out.read_text())
    assert list(result["results"]) == ["detr_small", "deformable_detr_small"]
    for run in result["results"].values():
        assert run["curve"] and all(0 <= row["map_50"] <= 1 and row["train_min"] > 0 for row in run["curve"])
    detr_ap50 = result["results"]["detr_small"]["curve"][-1]["map_50"]
    assert result["bar"]["detr_final_ap50"] == detr_ap50 and result["bar"]["allowed_epochs"] == 1 / 3
    assert "| deformable_detr_small |" in result["table"] and out.with_suffix(".png").is_file()
    assert all(run["provenance"]["machine"]["cpu_capability"] for run in result["results"].values())
    assert out.with_suffix(".md").read_text().splitlines()[-1].endswith(f"torch {result['machine']['torch']}")


def test_denoising_benchmark_compares_at_equal_minutes():
    compare = _load_script("denoising_detection").compare
    plain = {"curve": [{"train_min": 10.0, "map_50": 0.1}, {"train_min": 30.0, "map_50": 0.3}]}
    denoised = {"curve": [{"train_min": 15.0, "epoch": 1, "map_50": 0.3},
                          {"train_min": 25.0, "epoch": 2, "map_50": 0.34},
                          {"train_min": 35.0, "epoch": 3, "map_50": 0.6}]}
    result = compare(plain, denoised, "detr_small", 60.0)
    gains = [row["gain"] for row in result["rows"]]
    assert gains[0] == pytest.approx(0.3 - 0.15) and gains[1] == pytest.approx(0.34 - 0.25) and gains[2] is None
    bars = result["bars"]  # after 20 min only the 25-minute evaluation has a partner: +0.09
    assert bars["evaluations_after"] == 1 and bars["gain_met"] and bars["smallest_gain_after"] == pytest.approx(0.09)
    assert bars["target_reached_at_min"] == 35.0 and bars["target_met"]


@pytest.mark.slow
def test_denoising_benchmark_runs_each_detector_with_and_without(tmp_path):
    data = _tiny_scenes(tmp_path)
    out = tmp_path / "denoising_detection.json"
    script, runs = _load_script("denoising_detection"), tmp_path / "runs"
    common = ["--quick", "--data", str(data), "--out", str(out), "--dn-groups", "2", "--runs", str(runs)]
    # a pair made in two sittings: the runs without denoising first (saved as each ends), then the others
    script.main([*common, "--variants", "plain"])
    half = json.loads(out.read_text())
    assert half["results"] == {} and not out.with_suffix(".md").exists(), "a half pair is not a result"
    assert list(half["pending"]) == ["detr_small", "deformable_detr_small"]
    assert all(set(pair) == {"plain"} for pair in half["pending"].values())
    script.main([*common, "--variants", "denoising"])
    result = json.loads(out.read_text())
    assert list(result["results"]) == ["detr_small", "deformable_detr_small"] and "pending" not in result
    for model, pair in result["results"].items():
        assert pair["plain"] == half["pending"][model]["plain"], "the finished half was read again, not retrained"
        assert pair["plain"]["options"].get("dn_groups", 0) == 0 and pair["denoising"]["options"]["dn_groups"] == 2
        assert all(pair[v]["commit"] and pair[v]["machine"]["cpu_capability"] for v in ("plain", "denoising"))
        assert len(pair["comparison"]["rows"]) == len(pair["denoising"]["curve"])
    assert out.with_suffix(".md").read_text().strip() == result["table"] and out.with_suffix(".png").is_file()


@pytest.mark.slow
def test_setr_pretraining_benchmark_runs_both_pretrainings_and_the_rivals(tmp_path):
    data = _tiny_scenes(tmp_path)
    out = tmp_path / "setr_pretraining.json"
    script = _load_script("setr_pretraining")
    mini = str(ROOT / "tests" / "fixtures" / "fashion-mnist-mini")
    script.main(["--quick", "--data", str(data), "--out", str(out), "--fashion-mnist-dir", mini])
    result = json.loads(out.read_text())
    assert list(result["results"]) == ["mae", "classified", "scratch", "lraspp"]
    for key in ("mae", "classified"):
        assert result["pretraining"][key]["train_min"] > 0 and result["results"][key]["options"]["weights"]
        assert "against_lraspp" in result["bar"][key] and "against_scratch" in result["bar"][key]
    assert result["pick"]["picked"] in ("mae", "classified")
    assert result["commit"] and result["machine"]["cpu_capability"]
    assert out.with_suffix(".md").read_text().strip() == result["table"] and out.with_suffix(".png").is_file()
    # a later invocation of one run keeps the others, each with the provenance of its own invocation
    first = result["results"]["mae"]["provenance"]
    script.main(["--quick", "--data", str(data), "--out", str(out), "--runs", "scratch", "--beside", "a test"])
    again = json.loads(out.read_text())
    assert list(again["results"]) == ["mae", "classified", "scratch", "lraspp"]
    assert again["results"]["mae"]["provenance"] == first and again["pretraining"] == result["pretraining"]
    assert again["results"]["scratch"]["provenance"]["beside"] == "a test" and "Beside:" in again["table"]


@pytest.mark.slow
def test_setr_scenes_benchmark_scores_every_model(tmp_path):
    data = _tiny_scenes(tmp_path)
    out = tmp_path / "setr_scenes.json"
    runs = tmp_path / "runs"
    _load_script("setr_scenes").main(["--quick", "--data", str(data), "--out", str(out), "--keep-runs", str(runs)])
    result = json.loads(out.read_text())
    assert list(result["results"]) == ["setr_naive_small", "setr_pup_small", "setr_mla_small", "lraspp"]
    for run in result["results"].values():
        assert run["curve"] and all(0 <= row["miou"] <= 1 and row["train_min"] > 0 for row in run["curve"])
    best = max(max(row["miou"] for row in r["curve"]) for m, r in result["results"].items() if m != "lraspp")
    assert result["bar"]["best_setr_miou"] == best and result["bar"]["miou_target"] == 0.6
    assert "| setr_pup_small |" in result["table"] and out.with_suffix(".png").is_file()
    table = out.with_suffix(".md").read_text()  # the table, then the one machine all four runs shared
    assert table.startswith(result["table"]) and table.rstrip().endswith(f"({result['machine']['cpu_capability']}), "
                                                                        f"{result['machine']['threads']} threads, "
                                                                        f"torch {result['machine']['torch']}")
    # the kept run draws the README's pictures: 2 scenes of 64 px at 2x, three rows and a legend of 11 classes
    from PIL import Image

    picture = _load_script("setr_pictures").main([str(runs / "setr_pup_small"), "--images", "2", "--weights",
                                                  "last", "--out", str(tmp_path / "pictures.png")])
    assert Image.open(picture).size == (2 * 128, 3 * 128 + 22 * 3 + 8)


@pytest.mark.slow  # two fresh processes
def test_setr_memory_benchmark_measures_each_attention_path(tmp_path):
    out = tmp_path / "memory.json"  # the paper's SETR at a quarter of its width, twice, each in a process of its own
    rows = _load_script("setr_memory").main(["--smoke", "--crop", "32", "--out", str(out)])
    assert [(r["decoder"], r["attention"]) for r in rows] == [("pup", "fused"), ("pup", "explicit")]
    assert all(r["tensors_gib"] >= r["step_gib"] > 0 for r in rows)
    # the weights are resident before the step, the gradients and momentum (twice as much) arrive with it
    assert all(r["rss_before_step_gib"] - r["runtime_gib"] > 0.9 * r["weights_gib"] for r in rows)
    assert all(r["step_gib"] > 1.8 * r["weights_gib"] for r in rows)
    assert all(r["aux_heads"] == 4 and r["crop"] == 32 and r["smoke"] and 15 < r["params_m"] < 30 for r in rows)
    assert "fudan-zvg/SETR #47" in out.with_suffix(".md").read_text()


def test_setr_speed_benchmark_times_the_encoder_against_the_vit(tmp_path):
    rows = _load_script("setr_speed").main(["--quick", "--models", "setr_pup_small", "--out", str(tmp_path),
                                            "--tag", "t"])
    assert [r["mode"] for r in rows] == ["inference", "train forward + backward"]
    assert all(r["encoder_ms"] > 0 and r["vit_ms"] > 0 and r["whole_ms"] > 0 and r["decoder_share"] < 1
               for r in rows)
    assert "decoders' share" in (tmp_path / "t.md").read_text()


@pytest.mark.slow
def test_deform_attn_forms_times_each_exported_form_on_both_runtimes_and_profiles_them(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    record = _load_script("deform_attn_forms").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    forms = ("grid_sample", "corner gather", "corner gather MatMul", "grid_sample MatMul")
    assert [(r["form"], r["runtime"]) for r in record["rows"]] == [("vitlab torch", "torch")] + [
        (form, runtime) for form in forms for runtime in ("onnxruntime", "openvino")]
    assert all(r["ms"] > 0 and r["max_abs_diff"] < 1e-5 for r in record["rows"])  # each form is the same sum
    assert set(record["best"]["small"]) == {"onnxruntime", "openvino"}
    assert "GridSample" in record["profiles"]["small"]["grid_sample"]
    assert "GatherND" in record["profiles"]["small"]["corner gather"]
    assert "| grid_sample | onnxruntime |" in (tmp_path / "t.md").read_text()


def test_checkpoint_cost_writes_a_models_training_state_as_the_loop_does_and_times_it(tmp_path):
    record = _load_script("checkpoint_cost").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    (row,) = record["rows"]
    # weights and AdamW's two moments: about three times the weights' bytes
    assert 3 * 4 * row["parameters"] / 2**20 <= row["state_mib"] < 3.3 * 4 * row["parameters"] / 2**20
    assert row["on_disk_mib"] == pytest.approx(2 * row["state_mib"], rel=0.01)  # state.prev.pt beside it
    assert row["save_s"] > 0 and row["overhead_at_default"] == pytest.approx(row["save_s"] / 600)
    assert "| vit_tiny_patch16_224 |" in (tmp_path / "t_quick.md").read_text()


@pytest.mark.slow
def test_int8_detection_scores_a_detection_runs_int8_graph_on_its_test_split(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    shutil.copytree(trained["detr"], run, ignore=shutil.ignore_patterns("runtime"))
    record = _load_script("int8_detection").main(["--run", str(run), "--backends", "onnxruntime", "--out",
                                                   str(tmp_path), "--tag", "t"])
    rows = {(r["runtime"], r["precision"]): r for r in record["rows"]}
    assert set(rows) == {("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")}
    saved = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert rows["torch", "fp32"]["map_50"] == pytest.approx(saved["test_map_50"])  # the run's own test figure
    assert rows["onnxruntime", "fp32"]["map_50"] == pytest.approx(saved["test_map_50"], abs=1e-4)
    assert any(kept.startswith("bbox_embed") for kept in rows["onnxruntime", "int8"]["kept_fp32"])  # the box head
    assert record["bar"]["worst"] == rows["onnxruntime", "int8"]["map_50_minus_fp32"]


def test_deform_attn_speed_benchmark_times_both_cores(tmp_path):
    rows = _load_script("deform_attn_speed").main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    assert [(r["shape"], r["mode"]) for r in rows] == [(s, m) for s in ("encoder", "decoder")
                                                       for m in ("forward", "forward + backward")]
    assert all(r["vitlab_ms"] > 0 and r["hf_ms"] > 0 and r["speedup_min"] <= r["speedup_median"] for r in rows)


@pytest.mark.slow
def test_detr_speed_benchmark_times_both_libraries(tmp_path):
    rows = _load_script("detr_speed").main(["--quick", "--configs", "small", "deformable_small", "--out",
                                            str(tmp_path), "--tag", "t"])
    assert [(r["config"], r["mode"]) for r in rows] == [(c, m) for c in ("small", "deformable_small")
                                                        for m in ("inference", "train step")]
    assert all(r["vitlab_ms"] > 0 and r["hf_ms"] > 0 and r["speedup_min"] <= r["speedup_median"] for r in rows)
    assert "HF time / vitlab time" in (tmp_path / "t.md").read_text()


def _skimage_photo_folder(root):
    """scikit-image's five photographs as a train/ (three) and test/ (two) folder."""
    from PIL import Image

    from vitlab.data.photos import skimage_photos

    for i, (name, array) in enumerate(skimage_photos().items()):
        (root / ("test" if i >= 3 else "train")).mkdir(parents=True, exist_ok=True)
        Image.fromarray(array).save(root / ("test" if i >= 3 else "train") / f"{name}.png")
    return root


@pytest.mark.slow
def test_ipt_restoration_benchmark_scores_every_model_against_the_input(tmp_path):
    data = _skimage_photo_folder(tmp_path / "photos")
    result = _load_script("ipt_restoration").main(["--smoke", "--data", str(data), "--out", str(tmp_path), "--plain",
                                                   "--single"])
    assert list(result["runs"]) == ["ipt", "cnn", "ipt_plain", "cnn_plain", "single_sr2", "single_denoise30"]
    assert result["runs"]["single_sr2"]["steps"] == result["runs"]["ipt"]["steps"] // 2  # equal steps per task
    assert [result["runs"][k]["global_residual"] for k in ("ipt", "cnn", "ipt_plain")] == [True, True, False]
    assert result["num_images"] == 2 and set(result["scores"]) == {"ipt", "cnn", "ipt_plain", "cnn_plain", "single"}
    for scores in result["scores"].values():
        assert set(scores["degradations"]) == {"sr2", "denoise30"}
    seams = result["seams"]["ipt"]  # its 48-pixel tiles meet inside the smoke run's 56-pixel ×2 inputs
    assert set(seams["sr2"]) == {"mean", "window", "centre"}
    assert all(math.isfinite(v) for blend in seams["sr2"].values() for v in blend.values())
    assert result["machine"]["cpu_capability"] and result["command"].startswith("python ")
    table = (tmp_path / "ipt_restoration_quick.md").read_text()
    assert "| sr2 |" in table and "+0.5 dB" in table and (tmp_path / "ipt_restoration_quick_crops.png").is_file()


def test_the_seams_are_the_tile_edges_inside_the_image():
    mask = _load_script("ipt_restoration").seam_mask(100, 48, 36, 1)
    # tiles at 0, 36 and 52 (the last flush with the edge): edges inside at 36, 52, 48 and 84, two pixels each side
    expected = {p for edge in (36, 48, 52, 84) for p in range(edge - 2, edge + 2)}
    assert set(torch.nonzero(mask).flatten().tolist()) == expected
    assert set(torch.nonzero(_load_script("ipt_restoration").seam_mask(40, 48, 36, 2)).flatten().tolist()) == set()


@pytest.mark.slow  # fresh processes, one per measurement
def test_ipt_speed_benchmark_times_tiled_inference(tmp_path):
    data = _skimage_photo_folder(tmp_path / "photos")
    rows = _load_script("ipt_speed").main(["--quick", "--data", str(data), "--out", str(tmp_path)])
    assert [(r["model"], r["batch_size"]) for r in rows] == [("ipt_small", 8), ("ipt_small", 64)]
    assert all(r["tiles"] == 9 and r["peak_mb"] >= r["loaded_mb"] > 0 and r["images_per_s"] > 0 for r in rows)
    written = json.loads((tmp_path / "ipt_speed_quick.json").read_text())  # the rows beside their provenance
    assert written["rows"] == rows and written["beside"] == "nothing" and written["machine"]["cpu_capability"]


@pytest.mark.slow
def test_vqgan_fashion_mnist_benchmark_scores_both_stages(tmp_path):
    result = _load_script("vqgan_fashion_mnist").main(["--quick", "--runs", str(tmp_path / "runs"), "--out",
                                                        str(tmp_path), "--pictures", str(tmp_path / "img")])
    final = result["final"]
    assert {"psnr", "ssim", "usage", "perplexity", "fid", "fid_floor", "class_acc"} <= set(final)
    assert set(result["bars"]) == {"psnr", "usage", "class_acc"} and final["samples"] == 20
    assert result["bars"]["psnr"]["met"] == (final["psnr"] >= 24)
    assert "| reconstruction PSNR (dB) |" in (tmp_path / "vqgan_fashion_mnist_quick.md").read_text()
    for picture in ("vqgan_samples.png", "vqgan_reconstructions.png"):
        assert (tmp_path / "img" / picture).is_file()
    assert (tmp_path / "vqgan_fashion_mnist_quick.png").is_file()


def test_vqgan_speed_benchmark_compares_with_diffusers(tmp_path):
    pytest.importorskip("diffusers")
    result = _load_script("vqgan_speed").main(["--quick", "--out", str(tmp_path)])
    assert result["parameters"]["vitlab"] == result["parameters"]["diffusers"]  # the same model in both
    assert set(result["train_step_s"]) == {"vitlab", "diffusers"} and result["cached_equals_recomputed"]
    assert "diffusers VQModel" in (tmp_path / "vqgan_speed.md").read_text()


def test_gpu_check_skips_cleanly_without_a_gpu(tmp_path):
    import subprocess

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check would run for real")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU" in done.stdout and "skipped" in done.stdout
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written


@pytest.mark.slow
def test_runtimes_script_writes_json_and_markdown(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    runtimes = _load_script("runtimes")
    result = runtimes.main(["--quick", "--out", str(tmp_path), "--tag", "t"])
    rows = {(r["model"], r["label"]): r for r in result["rows"]}
    for model in ("vit_tiny_patch4_28", "ipt_small"):
        for label in ("vitlab torch", "vitlab onnxruntime", "vitlab openvino"):
            row = rows[(model, label)]
            assert row["images_per_s"] > 0 and row["first_call_s"] > 0 and row["max_abs_diff"] <= 1e-4
    assert rows[("vit_tiny_patch4_28", "timm eager")]["ratio_to_base"] == pytest.approx(1.0)
    assert rows[("ipt_small", "vitlab torch")]["base"] == "vitlab torch"
    markdown = (tmp_path / "t.md").read_text()
    assert "| model | batch | contender |" in markdown and "timm eager" in markdown


def test_lean_training_smoke_steps_the_engine_both_ways_from_the_same_loss():
    (row,) = _load_script("lean_training").main(["--smoke", "--cases", "default_recipe"])
    from vitlab.tasks.classification.recipes import RECIPES

    recipe = RECIPES["fashion-mnist"]
    assert (row["model"], row["batch"]) == (recipe["task"]["model"], recipe["loop"]["batch_size"])
    assert row["lean_loss"] == pytest.approx(row["full_loss"], rel=1e-5)  # same weights, same batch, same loss


def test_test_suite_benchmark_reads_a_runs_junit_report_per_folder(tmp_path):
    """The suite's cost from a run's JUnit XML (the one pytest writes): the run's seconds, each folder's sum of its
    tests' seconds beside its budget, and the slowest tests, counted by outcome."""
    report = tmp_path / "junit.xml"
    report.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1" '
        'skipped="1" tests="4" time="12.5">'
        '<testcase classname="tests.runtime.test_parity" name="test_a[vit]" time="6.0"/>'
        '<testcase classname="tests.runtime.test_fast.TestLean" name="test_b" time="1.5"><failure message="x"/>'
        '</testcase>'
        '<testcase classname="tests.test_wheel" name="test_c" time="3.25"/>'
        '<testcase classname="tests.docs.test_site" name="test_d" time="0.0"><skipped message="y"/></testcase>'
        '</testsuite></testsuites>')
    record = _load_script("test_suite").main(["--junit", str(report), "--out", str(tmp_path), "--tag", "t"])
    assert (record["pytest_s"], record["tests"], record["passed"], record["failed"], record["skipped"]) == (
        12.5, 4, 2, 1, 1)
    assert record["test_seconds"] == 10.75
    folders = {row["folder"]: (row["tests"], row["seconds"]) for row in record["folders"]}
    assert folders == {"tests/runtime": (2, 7.5), "tests": (1, 3.25), "tests/docs": (1, 0.0)}
    budgets = tomllib.loads((Path(__file__).parents[1] / "budget.toml").read_text())["folders"]
    assert record["folders"][0]["budget"] == budgets["tests/runtime"]  # the file's, as written
    assert record["slowest"][0] == {"test": "tests.runtime.test_parity::test_a[vit]", "seconds": 6.0}
    assert "**12 s of pytest**" in (tmp_path / "t.md").read_text()
    assert json.loads((tmp_path / "t.json").read_text())["machine"]["cpu_capability"]
