"""The site's table of releases (docs/guides/releases.md) is what `vitlab models --pretrained --markdown` prints
now: its figures come from the families' own listings, never typed by hand."""

import re
from pathlib import Path

from vitlab.cli.models_cmd import releases_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "releases.md"


def test_the_releases_page_lists_every_release_as_the_families_do():
    text = PAGE.read_text()
    found = re.search(r"<!-- releases: [^\n]*-->\n(.*?)\n<!-- /releases -->", text, re.S)
    assert found, "the releases table of docs/guides/releases.md is gone (its markers are missing)"
    assert found.group(1).strip() == releases_markdown().strip(), (
        "the releases table of docs/guides/releases.md is stale: replace it with `vitlab models --pretrained "
        "--markdown`")
