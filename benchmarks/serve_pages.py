"""Screenshots of `vitlab serve`'s page: each run's tab, tried on its first example image, in headless chromium.

    python benchmarks/serve_pages.py RUN_DIR [RUN_DIR ...] --out docs/img

Writes docs/img/serve_<task>.png, one per run. The browser is Debian's `chromium` (apt-get install chromium),
driven by playwright's Python package pointed at it: nothing is downloaded. The browser test
(tests/benchmarks/test_serve_pages.py) drives the page with the same functions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def chromium_path() -> str | None:
    """The system chromium: $VITLAB_CHROMIUM, or chromium / chromium-browser on the PATH."""
    return os.environ.get("VITLAB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def launch(playwright):
    executable = chromium_path()
    if executable is None:
        raise FileNotFoundError("no chromium found: apt-get install chromium (or set VITLAB_CHROMIUM to a "
                                "Chromium executable)")
    # --no-sandbox: chromium's sandbox needs user namespaces, which containers and root shells often lack
    return playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])


def open_tab(page, run: str) -> None:
    page.locator(f"button[role=tab]:has-text('{run} ·')").click()
    page.locator(f"#{run}-run").wait_for(state="visible")


def upload(page, run: str, image: Path, label: str = "image") -> None:
    page.locator(f"#{run}-{label} input[type=file]").set_input_files(str(image))
    page.locator(f"#{run}-{label} img").first.wait_for(state="visible")  # the preview: the upload has arrived


def try_tab(page, run, timeout_ms: float = 120_000, threshold: float | None = None) -> None:
    """Open the run's tab, give it its first example (a prior: no image), press its button and wait for the
    answer's picture. `threshold`: a detection tab's score threshold, typed into its slider's box."""
    open_tab(page, run.name)
    if run.needs_image:
        upload(page, run.name, run.examples[0])
    if threshold is not None and run.kind == "detection":
        box = page.locator(f"#{run.name}-threshold input[type=number]")
        box.fill(str(threshold))
        box.press("Enter")
    page.locator(f"#{run.name}-run").click()
    page.locator(f"#{run.name}-output img").first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_timeout(500)  # let the gallery and the slider settle


def main(argv: list[str] | None = None) -> None:
    from playwright.sync_api import sync_playwright

    from vitlab.serve.app import create_app
    from vitlab.serve.runs import load_runs
    from vitlab.serve.server import background_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--threshold", type=float, help="detection tabs: this score threshold (default: the "
                        "page's 0.5)")
    args = parser.parse_args(argv)
    runs = load_runs(args.run_dirs)
    args.out.mkdir(parents=True, exist_ok=True)
    with background_server(create_app(runs)) as url, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        page.goto(f"{url}/", wait_until="networkidle")
        for run in runs:
            if run.needs_image and not run.examples:
                print(f"{run.name}: no example image, skipped")
                continue
            try_tab(page, run, threshold=args.threshold)
            path = args.out / f"serve_{run.kind}.png"
            page.screenshot(path=str(path), full_page=True)
            print(f"wrote {path}")
        browser.close()


if __name__ == "__main__":
    main()
