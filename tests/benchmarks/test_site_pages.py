"""The built documentation site in a real browser (Debian's chromium, headless, through playwright): every page
renders with a title and a heading, nothing it asks for fails, and every image on it loads."""


import pytest

pytestmark = [pytest.mark.slow, pytest.mark.whole_machine]  # a browser beside the server


def test_every_page_of_the_site_renders_with_its_images(site):
    pytest.importorskip("playwright", reason="the test extra: pip install -e '.[test]'")
    from benchmarks.serve_pages import chromium_path
    from benchmarks.site_pages import check_site

    if chromium_path() is None:
        pytest.fail("chromium is missing: apt-get install chromium (scripts/setup.sh does), or set VITLAB_CHROMIUM")
    report = check_site(site)  # the site the tests of tests/docs/test_site.py read, built once
    assert len(report) >= 8 + 8 + 5, f"only {len(report)} pages were found in the built site"
    assert {"", "systems/detr/", "tasks/mim/", "reference/cli/", "annotated_vit/"} <= set(report)
    bad = {path: problems for path, problems in report.items() if problems}
    assert not bad, f"pages with problems: {bad}"


def test_a_page_without_title_heading_or_its_images_is_reported(tmp_path):
    """The check can fail: a page with no title, no heading in its article, an image that is not there and a
    stylesheet that answers 404 is reported for each; a whole page beside it, for none."""
    pytest.importorskip("playwright", reason="the test extra: pip install -e '.[test]'")
    from benchmarks.serve_pages import chromium_path
    from benchmarks.site_pages import check_site

    if chromium_path() is None:
        pytest.fail("chromium is missing: apt-get install chromium (scripts/setup.sh does), or set VITLAB_CHROMIUM")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.html").write_text('<html><head><link rel="stylesheet" href="gone.css"></head>'
                                                 '<body><article><p>text</p><img src="missing.png"></article>'
                                                 '</body></html>')
    (tmp_path / "index.html").write_text("<html><head><title>home</title></head><body><article><h1>home</h1>"
                                         "</article></body></html>")
    report = check_site(tmp_path)
    assert report[""] == []
    bad = report["bad/"]
    assert "no title" in bad and "no heading in the article" in bad
    assert any(problem.startswith("image did not load: ") and problem.endswith("/bad/missing.png") for problem in bad)
    assert any(problem.startswith("HTTP 404: ") and problem.endswith("/bad/gone.css") for problem in bad)
