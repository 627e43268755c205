"""The README's table of releases is what `vitlab models --pretrained --markdown` prints now: its figures come from
the families' own listings, never typed by hand."""

import re
from pathlib import Path

from vitlab.cli.models_cmd import releases_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_every_release_as_the_families_do():
    text = README.read_text()
    found = re.search(r"<!-- releases: [^\n]*-->\n(.*?)\n<!-- /releases -->", text, re.S)
    assert found, "the README's releases table is gone (its markers are missing)"
    assert found.group(1).strip() == releases_markdown().strip(), (
        "the README's releases table is stale: replace it with `vitlab models --pretrained --markdown`")
