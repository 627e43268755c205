"""The page in a real browser: Debian's chromium, headless, driven by playwright (pointed at the system browser; no
browser is downloaded). It loads the page, uploads a Fashion-MNIST image, presses Classify and reads the predicted
class from the page; a refused image shows the server's message on the page."""

import json

import pytest
from PIL import Image

from vitlab.cli.main import main

from ..conftest import EXAMPLES

pytestmark = [pytest.mark.slow, pytest.mark.whole_machine]  # a browser beside the server


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    from benchmarks.serve_pages import chromium_path, launch

    if chromium_path() is None:
        pytest.fail("chromium is missing: apt-get install chromium (scripts/setup.sh does), or set VITLAB_CHROMIUM")
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    yield page
    page.close()


@pytest.mark.parametrize("example", ["test0-ankle-boot.png", "test1-pullover.png"])
def test_the_page_classifies_an_uploaded_fashion_mnist_image(server, trained, page, example, capsys):
    from benchmarks.serve_pages import open_tab, upload

    capsys.readouterr()
    assert main(["predict", str(trained["cls"]), str(EXAMPLES / example), "--weights", "best", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)[0]["top_k"][0]
    expected, expected_p = top["class"], top["probability"]

    from playwright.sync_api import expect

    page.goto(f"{server}/", wait_until="networkidle")
    # gradio sets the title from its config once the app has mounted, which on a loaded machine can come after the
    # network went idle: wait for it rather than read it at once
    expect(page).to_have_title("vitlab", timeout=60_000)
    open_tab(page, "cls")
    upload(page, "cls", EXAMPLES / example)
    page.locator("#cls-run").click()
    predicted = page.locator("#cls-classes [data-testid=label-output-value]")
    predicted.wait_for(state="visible", timeout=60_000)
    assert predicted.inner_text().strip() == expected
    first_row = f"{round(100 * expected_p)}%"  # the label's bars give each probability in whole percent
    assert first_row in page.locator("#cls-classes").inner_text()
    page.locator("#cls-output img").first.wait_for(state="visible")  # the rollout arrived with it


def test_every_tab_answers_its_example(server, served, page):
    """Each run's tab, given its first example image (a prior: none), shows a picture."""
    from benchmarks.serve_pages import try_tab

    page.goto(f"{server}/", wait_until="networkidle")
    for run in served:
        try_tab(page, run)
        assert page.locator(f"#{run.name}-output img").first.is_visible(), run.name


def test_a_refused_image_shows_the_servers_message_on_the_page(served, page, tmp_path):
    from benchmarks.serve_pages import open_tab, upload
    from vitlab.serve.app import create_app
    from vitlab.serve.pool import WorkerPool
    from vitlab.serve.server import background_server
    from vitlab.serve.uploads import ImageLimits

    big = tmp_path / "big.png"
    Image.new("L", (100, 80), 128).save(big)
    cls = [run for run in served if run.name == "cls"]
    with background_server(create_app(cls, WorkerPool(1), ImageLimits(max_pixels=64 * 64))) as url:
        page.goto(f"{url}/", wait_until="networkidle")
        open_tab(page, "cls")
        upload(page, "cls", big)
        page.locator("#cls-run").click()
        message = page.get_by_text("100×80 = 8,000 pixels, above this server's limit of 4,096")
        message.first.wait_for(state="visible", timeout=30_000)
        # and it goes on serving: a good image is classified
        upload(page, "cls", EXAMPLES / "test2-trouser.png")
        page.locator("#cls-run").click()
        page.locator("#cls-classes [data-testid=label-output-value]").wait_for(state="visible", timeout=60_000)

