"""The HTTP API against the command line: every route with real images, on small runs of every image task; each
answer is checked against what `vitlab predict` / `restore` / `reconstruct` / `sample` print and write for the
same image."""

import base64
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from vitlab.cli.main import main

from ..conftest import EXAMPLES


def cli_json(capsys, *argv) -> list | dict:
    capsys.readouterr()
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def post(url: str, run: str, path: Path | None = None, timeout: float = 120, **fields) -> httpx.Response:
    files = {"image": (path.name, path.read_bytes(), "image/png")} if path else None
    return httpx.post(f"{url}/api/runs/{run}/predict", files=files, data={k: str(v) for k, v in fields.items()},
                      timeout=timeout)


def pixels(text: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(text))))


def test_runs_lists_every_run_with_its_task_and_classes(server, trained):
    answer = httpx.get(f"{server}/api/runs").json()["runs"]
    assert [(r["name"], r["task"]) for r in answer] == [("cls", "classification"), ("detr", "detection"),
                                                        ("setr", "segmentation"), ("ipt", "restoration"),
                                                        ("vqgan", "vqgan"), ("prior", "prior")]
    for run in answer:
        saved = json.loads((trained[run["name"]] / "config.json").read_text())
        assert run["classes"] == saved["data"].get("classes", [])  # restoration has none
        assert run["model"] == saved["model_config"]["name"]
    assert answer[3]["degradations"] == ["sr2", "denoise30"]
    assert answer[0]["examples"] == sorted(p.name for p in EXAMPLES.glob("*.png"))[:4]


def test_openapi_documents_the_routes(server):
    schema = httpx.get(f"{server}/openapi.json").json()
    assert {"/api/runs", "/api/runs/{name}/predict"} <= set(schema["paths"])
    assert httpx.get(f"{server}/docs").status_code == 200


@pytest.mark.parametrize("example", ["test0-ankle-boot.png", "test4-shirt.png"])
def test_classification_equals_vitlab_predict(server, trained, example, capsys, tmp_path):
    path = EXAMPLES / example
    answer = post(server, "cls", path, top_k=4)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    expected = cli_json(capsys, "predict", trained["cls"], path, "--top-k", "4", "--weights", "best")[0]
    assert [p["class"] for p in result["top_k"]] == [p["class"] for p in expected["top_k"]]
    assert [p["probability"] for p in result["top_k"]] == pytest.approx([p["probability"] for p in expected["top_k"]],
                                                                       abs=1e-6)
    # the attention maps are the panels `vitlab attention` draws for the same image
    assert main(["attention", str(trained["cls"]), str(path), "--out", str(tmp_path), "--weights", "best"]) == 0
    strip = np.asarray(Image.open(tmp_path / f"{path.stem}_attention.png"))
    rollout, heads = pixels(result["attention"]["rollout_png"]), [pixels(h) for h in result["attention"]["heads_png"]]
    width = rollout.shape[1]
    assert strip.shape[1] == width * (2 + len(heads)) and len(heads) == 3  # vit_tiny: 3 heads
    assert np.array_equal(strip[:, width:2 * width], rollout)
    assert np.array_equal(strip[:, -width:], heads[-1])


def test_classification_of_a_jpeg_equals_vitlab_predict_on_the_same_file(server, trained, tmp_path, capsys):
    path = tmp_path / "pullover.jpg"
    Image.open(EXAMPLES / "test1-pullover.png").convert("RGB").resize((56, 56)).save(path, quality=80)
    result = post(server, "cls", path, top_k=2, attention="false").json()
    expected = cli_json(capsys, "predict", trained["cls"], path, "--top-k", "2", "--weights", "best")[0]
    assert [p["class"] for p in result["top_k"]] == [p["class"] for p in expected["top_k"]]
    assert [p["probability"] for p in result["top_k"]] == pytest.approx([p["probability"] for p in expected["top_k"]],
                                                                       abs=1e-6)
    assert "attention" not in result
    assert result["image"] == "pullover.jpg"


def test_detection_equals_vitlab_predict(server, trained, tmp_path, capsys):
    path = sorted((trained["scenes"] / "images" / "val").glob("*.png"))[0]
    result = post(server, "detr", path, threshold=0.05).json()
    expected = cli_json(capsys, "predict", trained["detr"], path, "--threshold", "0.05", "--out", tmp_path,
                        "--weights", "best")[0]
    assert result["detections"] == expected["detections"] and result["threshold"] == 0.05
    assert np.array_equal(pixels(result["image_png"]), np.asarray(Image.open(expected["output"])))
    fewer = post(server, "detr", path, threshold=0.9).json()["detections"]
    assert fewer == [d for d in result["detections"] if d["score"] > 0.9]


def test_segmentation_equals_vitlab_predict(server, trained, tmp_path, capsys):
    path = sorted((trained["scenes"] / "images" / "val").glob("*.png"))[1]
    result = post(server, "setr", path).json()
    expected = cli_json(capsys, "predict", trained["setr"], path, "--out", tmp_path, "--weights", "best")[0]
    assert result["classes"] == expected["classes"] and result["size"] == expected["size"]
    assert np.array_equal(pixels(result["mask_png"]), np.asarray(Image.open(expected["mask"])))
    assert np.array_equal(pixels(result["overlay_png"]), np.asarray(Image.open(expected["overlay"])))
    saved = json.loads((trained["setr"] / "config.json").read_text())
    assert [entry["class"] for entry in result["legend"]] == saved["data"]["classes"]
    assert result["legend"][0]["color"] == "#000000" and result["legend"][1]["color"] == "#800000"  # VOC's colours


def test_restoration_equals_vitlab_restore_with_scores_against_a_reference(server, trained, tmp_path, capsys):
    clean = trained["photos"] / "test" / "rocket.png"
    noisy = tmp_path / "rocket.png"
    rng = np.random.default_rng(0)
    array = np.asarray(Image.open(clean)).astype(np.float64) + rng.normal(0, 30, (96, 96, 3))
    Image.fromarray(array.clip(0, 255).round().astype(np.uint8)).save(noisy)
    files = {"image": ("rocket.png", noisy.read_bytes(), "image/png"),
             "reference": ("clean.png", clean.read_bytes(), "image/png")}
    result = httpx.post(f"{server}/api/runs/ipt/predict", files=files, data={"degradation": "denoise30"},
                        timeout=120).json()
    expected = cli_json(capsys, "restore", trained["ipt"], noisy, "--degradation", "denoise30", "--out",
                        tmp_path / "out", "--reference", clean.parent)[0]
    assert np.array_equal(pixels(result["image_png"]), np.asarray(Image.open(expected["output"])))
    for key in ("psnr_y", "ssim_y", "psnr_rgb", "input_psnr_y", "input_ssim_y", "input_psnr_rgb"):
        assert result[key] == pytest.approx(expected[key]), key
    upscaled = post(server, "ipt", clean, degradation="sr2").json()
    assert upscaled["input_size"] == [96, 96] and upscaled["output_size"] == [192, 192]
    assert pixels(upscaled["image_png"]).shape == (192, 192, 3) and "psnr_y" not in upscaled


def test_vqgan_equals_vitlab_reconstruct(server, trained, tmp_path, capsys):
    path = EXAMPLES / "test2-trouser.png"
    result = post(server, "vqgan", path).json()
    expected = cli_json(capsys, "reconstruct", trained["vqgan"], path, "--out", tmp_path)[0]
    assert result["psnr"] == pytest.approx(expected["psnr"]) and result["codes"] == expected["codes"]
    assert np.array_equal(pixels(result["image_png"]), np.asarray(Image.open(expected["out"])))


def test_prior_samples_equal_vitlab_sample(server, trained, tmp_path, capsys):
    result = post(server, "prior", None, class_index=3, n=4, top_k=50, temperature=0.9, seed=7).json()
    expected = cli_json(capsys, "sample", trained["prior"], "--class", "3", "--n", "4", "--top-k", "50",
                        "--temperature", "0.9", "--seed", "7", "--out", tmp_path / "grid.png")
    assert result["classes"] == expected["classes"] == ["Dress"] and result["samples"] == 4
    assert np.array_equal(pixels(result["grid_png"]), np.asarray(Image.open(tmp_path / "grid.png")))


def test_concurrent_requests_each_get_their_own_answer(server):
    """16 requests over 8 threads, of four different images on two runs, each answer equal to the same request
    made alone: the workers share no state but the models."""
    jobs = [("cls", EXAMPLES / name) for name in sorted(p.name for p in EXAMPLES.glob("*.png"))]
    jobs += [("vqgan", path) for _, path in jobs]
    alone = [post(server, run, path).json() for run, path in jobs]
    with ThreadPoolExecutor(8) as clients:
        together = list(clients.map(lambda job: post(server, *job).json(), jobs * 2))
    assert together == alone * 2


def test_an_image_folder_run_offers_its_own_images_as_examples(tmp_path):
    from vitlab.serve.runs import ServedRun, example_images

    for split, name in (("train", "cat"), ("train", "dog"), ("test", "cat"), ("test", "dog")):
        (tmp_path / split / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8)).save(tmp_path / split / name / f"{i}.png")
    saved = {"data": {"name": str(tmp_path), "classes": ["cat", "dog"], "channels": 3}}
    run = ServedRun("pets", tmp_path, type("Task", (), {"name": "classification"})(), saved, None, "best")
    assert example_images(run) == [tmp_path / "test" / "cat" / "0.png", tmp_path / "test" / "dog" / "0.png"]
