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
