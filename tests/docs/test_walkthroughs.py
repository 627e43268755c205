"""The walkthroughs: one runnable page per system, in the series' order, each in the site's navigation, linked
from the systems table, linked to its neighbours, and run by a test of its own (tests/docs/test_annotated_*.py)."""

import re
from pathlib import Path

import yaml

from .docs_runner import python_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# the order of the series the library comes from: attention and the Transformer first, the detectors, then ViT and
# the systems built on it
SERIES = ("transformer", "detr", "deformable_detr", "vit", "ipt", "setr", "vqgan", "deit")


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _mkdocs_nav() -> list[str]:
    class Loader(yaml.SafeLoader):  # mkdocs.yml may hold !!python/name tags; the navigation is all we read
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    return _nav_pages(yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"])


def test_every_system_has_a_walkthrough_that_runs_in_the_tests():
    for system in SERIES:
        page = DOCS / f"annotated_{system}.md"
        assert page.is_file(), f"no walkthrough for {system}: docs/annotated_{system}.md"
        text = page.read_text()
        assert len(python_blocks(text)) >= 5, f"{page.name}: a walkthrough is code that runs"
        assert "assert " in text, f"{page.name}: shows nothing equal to the library's module"
        test = ROOT / "tests" / "docs" / f"test_annotated_{system}.py"
        assert test.is_file() and "run_markdown" in test.read_text(), f"{page.name} is not run by a test"
        for picture in re.findall(r"\]\((img/[^)]+\.png)\)", text):
            assert (DOCS / picture).is_file(), f"{page.name} shows {picture}, which is not committed"


def test_the_walkthroughs_are_in_the_navigation_in_the_series_order():
    walkthroughs = [page for page in _mkdocs_nav() if page.startswith("annotated_")]
    assert walkthroughs == [f"annotated_{system}.md" for system in SERIES]


def test_each_walkthrough_links_its_neighbours_and_the_systems_table_links_each():
    for i, system in enumerate(SERIES):
        last_lines = "\n".join((DOCS / f"annotated_{system}.md").read_text().rstrip().splitlines()[-3:])
        if i > 0:
            assert f"(annotated_{SERIES[i - 1]}.md)" in last_lines, f"annotated_{system}.md: no link back"
        if i + 1 < len(SERIES):
            assert f"(annotated_{SERIES[i + 1]}.md)" in last_lines, f"annotated_{system}.md: no link on"
    readme = (ROOT / "README.md").read_text()
    for system in SERIES:
        assert f"(docs/annotated_{system}.md)" in readme, f"the README's systems table does not link {system}"
