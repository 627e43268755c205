"""Every bad input gets a 4xx answer whose message says what was expected, and the server goes on serving."""

import io
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from vitlab.serve.pool import WorkerPool
from vitlab.serve.uploads import BadInput, ImageLimits, read_image

from ..conftest import EXAMPLES

BOOT = (EXAMPLES / "test0-ankle-boot.png").read_bytes()


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buffer,
                                                                                                          "PNG")
    return buffer.getvalue()


def ask(url: str, run: str = "cls", data: bytes | None = BOOT, field: str = "image", **fields) -> httpx.Response:
    files = {field: ("upload.png", data, "image/png")} if data is not None else None
    return httpx.post(f"{url}/api/runs/{run}/predict", files=files, data={k: str(v) for k, v in fields.items()},
                      timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize(("run", "data", "fields", "status", "says"), [
    ("cls", b"this is a text file, not a picture", {}, 415, "not an image Pillow can read"),
    ("cls", b"", {}, 400, "is empty: send an image file"),
    ("cls", png(64, 64)[:200], {}, 415, "could not be decoded"),  # a truncated PNG: its header, half its pixels
    ("nope", BOOT, {}, 404, "no run named 'nope'; this server serves cls, detr"),
    ("cls", BOOT, {"threshold": 0.5}, 422, "threshold is not an option of a classification run"),
    ("cls", BOOT, {"colour": "red"}, 422, "unknown form field(s) colour"),
    ("cls", BOOT, {"top_k": 0}, 422, "top_k must be at least 1"),
    ("cls", BOOT, {"top_k": "three"}, 422, "top_k"),
    ("cls", None, {}, 422, "needs an image: send one in the multipart form field `image`"),
    ("detr", BOOT, {"threshold": 1.5}, 422, "threshold must be in [0, 1)"),
    ("ipt", BOOT, {"degradation": "sr4"}, 422, "sr4"),
    ("prior", None, {"class_index": 99}, 422, "--class must be one of 0 … 9"),
    ("prior", None, {"n": 1000}, 422, "n must be in 1 … 64"),
    ("prior", None, {"temperature": "nan"}, 422, "temperature must be 0 (greedy) or a finite positive number"),
    ("prior", None, {"seed": 2**64}, 422, "--seed must be a whole number from -2**63 to 2**64 - 1"),
])
def test_each_bad_request_is_answered_4xx_with_what_was_expected(server, run, data, fields, status, says):
    answer = ask(server, run, data, **fields)
    assert answer.status_code == status, answer.text
    assert says in str(answer.json()["detail"]), answer.json()
    assert ask(server).status_code == 200  # and the server goes on serving


@pytest.mark.slow
def test_a_reference_for_a_run_that_takes_none_is_refused(server):
    files = {"image": ("a.png", BOOT, "image/png"), "reference": ("b.png", BOOT, "image/png")}
    answer = httpx.post(f"{server}/api/runs/cls/predict", files=files, timeout=60)
    assert answer.status_code == 422 and "reference is not an option" in answer.json()["detail"]


@pytest.mark.slow
def test_size_limits_refuse_or_downscale(served):
    from vitlab.serve.app import create_app
    from vitlab.serve.server import background_server

    cls = [run for run in served if run.name == "cls"]
    small = ImageLimits(max_bytes=4000, max_pixels=64 * 64)
    with background_server(create_app(cls, WorkerPool(1), small, page=False)) as url:
        too_many_bytes = ask(url, data=png(40, 40))  # 4,861 bytes of noise, a small image
        assert too_many_bytes.status_code == 413 and "above this server's limit of 4,000" in too_many_bytes.text
        blank = io.BytesIO()
        Image.new("L", (100, 80)).save(blank, "PNG")  # a few hundred bytes, 8,000 pixels
        too_many_pixels = ask(url, data=blank.getvalue())
        assert too_many_pixels.status_code == 413 and "100×80 = 8,000 pixels" in too_many_pixels.text
        assert "--oversize downscale" in too_many_pixels.text
        assert ask(url).status_code == 200
    with background_server(create_app(cls, WorkerPool(1), ImageLimits(max_pixels=64 * 64, oversize="downscale"),
                                      page=False)) as url:
        assert ask(url, data=blank.getvalue()).status_code == 200
    image = read_image(blank.getvalue(), "image", ImageLimits(max_pixels=64 * 64, oversize="downscale"))
    assert image.size == (71, 57) and image.size[0] * image.size[1] <= 64 * 64  # the aspect ratio kept


@pytest.mark.slow
def test_a_request_larger_than_its_uploads_allow_is_refused_before_it_is_read(served, tmp_path):
    """An upload far above the limit is not spooled to disk whole before the limit is checked: refused (413) by
    its Content-Length, or, sent in chunks without one, once the bytes streamed pass the limit; the server goes on
    serving."""
    from vitlab.serve.app import create_app
    from vitlab.serve.server import background_server

    cls = [run for run in served if run.name == "cls"]
    limits = ImageLimits(max_bytes=4000)
    huge = b"\x89PNG" + bytes(3 << 20)  # 3 MiB: the limit is one upload and 1 MiB for the rest of the form
    with background_server(create_app(cls, WorkerPool(1), limits, page=False)) as url:
        declared = ask(url, data=huge)
        assert declared.status_code == 413 and "above this server's limit of 1,052,576 for a request" in declared.text

        def chunks():
            yield b"--x\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\n"
            for _ in range(48):
                yield bytes(1 << 16)

        streamed = httpx.post(f"{url}/api/runs/cls/predict", content=chunks(), timeout=60,
                              headers={"content-type": "multipart/form-data; boundary=x"})
        assert streamed.status_code == 413 and "the request is over" in streamed.text
        assert ask(url).status_code == 200


def test_a_full_pool_answers_503_and_frees_its_slots():
    pool = WorkerPool(workers=1, queue=1)
    release = threading.Event()
    first = threading.Thread(target=pool.run_blocking, args=(release.wait,))
    second = threading.Thread(target=pool.run_blocking, args=(release.wait,))
    first.start(), second.start()
    time.sleep(0.2)
    with pytest.raises(BadInput) as refused:
        pool.run_blocking(lambda: None)
    assert refused.value.status == 503 and "busy" in str(refused.value)
    release.set()
    first.join(), second.join()
    assert pool.run_blocking(lambda: 42) == 42 and pool.served == 3
    pool.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_vitlab_serve_stops_cleanly_on_a_signal(trained, stop):
    from vitlab.serve.server import free_port

    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    process = subprocess.Popen([sys.executable, "-m", "vitlab", "serve", str(trained["cls"]), "--port", str(port),
                                "--no-page"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.2)
        assert ask(f"http://127.0.0.1:{port}").status_code == 200
        process.send_signal(stop)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert f"stopped ({stop.name}); served 1 prediction(s)" in out
    assert "Traceback" not in err


def test_without_the_serve_extra_vitlab_serve_says_what_to_install(trained, monkeypatch, capsys):
    from vitlab.cli.main import main

    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi now raises ImportError
    assert main(["serve", str(trained["cls"])]) == 2
    assert 'needs fastapi, part of the serve extra: pip install "vitlab[serve]"' in capsys.readouterr().err


def test_a_big_endian_16_bit_grey_upload_is_read_as_vitlab_predict_reads_it(tmp_path):
    """The server keeps each upload as a PNG: a big-endian 16-bit grey TIFF (mode I;16B) must keep its values, as
    `vitlab predict` scales them (by 1/257), not become near-white RGB through Pillow's conversion."""
    from vitlab.data.images import read_image
    from vitlab.serve.uploads import png_safe

    values = np.array([[0, 257, 1000], [32896, 65535, 600]], dtype=np.uint16)
    Image.fromarray(values.astype(">u2")).save(tmp_path / "deep.tif")
    assert Image.open(tmp_path / "deep.tif").mode == "I;16B"
    png_safe(Image.open(tmp_path / "deep.tif")).save(tmp_path / "kept.png")
    read = [np.asarray(read_image(tmp_path / name, channels=1)) for name in ("deep.tif", "kept.png")]
    assert read[0].tolist() == read[1].tolist() == [[0, 1, 4], [128, 255, 2]]


def test_an_image_the_page_opened_is_decoded_within_the_limits_or_refused_with_the_reason():
    """The page hands over an image Pillow has opened, not decoded: a truncated one is refused as the API refuses it
    (415, saying so), not left to fail later with no message."""
    from vitlab.serve.uploads import BadInput, ImageLimits, checked

    opened = Image.open(io.BytesIO(png(64, 64)[:200]))  # a truncated PNG: its header, part of its pixels
    with pytest.raises(BadInput, match="could not be decoded") as refused:
        checked(opened, "image", ImageLimits())
    assert refused.value.status == 415
    whole = checked(Image.open(io.BytesIO(png(64, 64))), "image", ImageLimits())
    assert whole.size == (64, 64) and np.asarray(whole).shape == (64, 64, 3)
