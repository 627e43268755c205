"""The documentation site in a browser: build it, serve it on 127.0.0.1, open every page in Debian's chromium,
and check that each renders (a title, a heading, no failed request) and that every image on it loaded.

    python benchmarks/site_pages.py                     # check every page; screenshots into docs/img/site_*.png
    python benchmarks/site_pages.py --site /tmp/site    # an already built site

The test suite runs the same check (tests/benchmarks/test_site_pages.py) without writing the screenshots.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
SCREENSHOTS = {"site_home.png": "", "site_system_detr.png": "systems/detr/"}


def build(out: Path) -> Path:
    """`mkdocs build --strict` into `out`; raises with mkdocs' output when it fails."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}")
    return out


@contextmanager
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free port of 127.0.0.1, for as long as the block runs."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a page closed before its last file came
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def pages(site: Path) -> list[str]:
    """Every page of the built site, as its URL path ('' for the home page, 'systems/detr/', ...)."""
    found = []
    for page in sorted(site.rglob("index.html")):
        relative = page.parent.relative_to(site).as_posix()
        if relative.startswith(("assets", "search")):
            continue
        found.append("" if relative == "." else relative + "/")
    return found


def check_page(page, url: str, problems: list[str]) -> list[str]:
    """What is wrong with one page, opened in the browser tab `page` (whose failed requests and error responses
    `watch` appends to `problems`): a missing title or heading, images that did not load."""
    page.goto(url, wait_until="load")
    # one question to the page for all three (each round trip to the browser costs tens of milliseconds)
    found = page.evaluate("""() => ({title: document.title,
        headings: document.querySelectorAll("article h1").length,
        broken: Array.from(document.images).filter(img => !img.complete || img.naturalWidth === 0)
            .map(img => img.src)})""")
    if not found["title"]:
        problems.append("no title")
    if found["headings"] == 0:
        problems.append("no heading in the article")
    problems += [f"image did not load: {src}" for src in found["broken"]]
    return problems


def watch(page, report: dict[str, list[str]], current: list[str | None]) -> None:
    """Record the tab's failed requests and error responses under the page being checked (current[0]); none while
    current[0] is None (the tab leaving a checked page, whose requests still under way the browser cancels)."""
    def failed(request) -> None:
        # a request the browser cancelled (net::ERR_ABORTED: the tab moved on) says nothing of the site: a file
        # that is missing answers 404, and an image that did not load is found by check_page
        if current[0] is not None and "ERR_ABORTED" not in (request.failure or ""):
            report[current[0]].append(f"request failed: {request.url} ({request.failure})")

    def answered(response) -> None:
        if current[0] is not None and response.status >= 400:
            report[current[0]].append(f"HTTP {response.status}: {response.url}")

    page.on("requestfailed", failed)
    page.on("response", answered)


def check_site(site: Path, screenshots: Path | None = None) -> dict[str, list[str]]:
    """Every page's problems (none: an empty list), with the home page and DETR's shot into `screenshots`. The
    pages are opened one after the other in one tab (a new tab per page cost half as much again as the pages)."""
    from playwright.sync_api import sync_playwright

    from benchmarks.serve_pages import launch

    report: dict[str, list[str]] = {}
    with served(site) as base, sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            current: list[str | None] = [None]
            watch(page, report, current)
            for path in pages(site):
                current[0] = path
                report[path] = []
                check_page(page, base + path, report[path])
                current[0] = None
                page.goto("about:blank")  # what the page still loads (its search index, a favicon) is cancelled here
            for name, path in (SCREENSHOTS.items() if screenshots else ()):
                page.goto(base + path, wait_until="load")
                page.screenshot(path=str(screenshots / name))
            page.close()
        finally:
            browser.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one into a temporary folder)")
    parser.add_argument("--screenshots", type=Path, default=ROOT / "docs" / "img",
                        help="where site_home.png and site_system_detr.png go")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site or build(Path(tmp) / "site")
        report = check_site(site, args.screenshots)
    bad = {path: problems for path, problems in report.items() if problems}
    for path, problems in bad.items():
        print(f"/{path}: " + "; ".join(problems))
    print(f"{len(report)} pages, {len(bad)} with problems; screenshots in {args.screenshots}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
