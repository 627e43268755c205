"""Every number the README and the documentation site show comes from a results file:

- a table quoted between `<!-- results: benchmarks/results/NAME.md -->` and `<!-- /results -->` is that file as
  the benchmark wrote it, and the same as benchmarks/report.py renders now from the measurement, NAME.json;
- a block between `<!-- report: NAME -->` and `<!-- /report -->` is what benchmarks/report.py renders now from the
  results files."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUOTED = re.compile(r"<!-- results: (\S+) -->\n(.*?)\n<!-- /results -->", re.S)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_quoted_results_table_is_its_file_as_written():
    quoted = [(page, path, text) for page in PAGES for path, text in QUOTED.findall(page.read_text())]
    assert quoted, "no page quotes a results file between <!-- results: PATH --> markers"
    for page, path, text in quoted:
        source = ROOT / path
        assert source.is_file(), f"{page.name} quotes {path}, which does not exist"
        assert source.with_suffix(".json").is_file(), f"{path} has no .json beside it (the measurement it renders)"
        assert text.strip() == source.read_text().strip(), (
            f"{page.relative_to(ROOT)}'s copy of {path} differs from the file: paste the file's text between its "
            "markers")


def test_every_quoted_table_is_what_its_benchmark_renders_from_the_json_now():
    report = _report()
    names = {Path(path).stem for page in PAGES for path, _ in QUOTED.findall(page.read_text())}
    for name in sorted(names):
        written = (ROOT / "benchmarks" / "results" / f"{name}.md").read_text().strip()
        assert report.rendered_table(name).strip() == written, (
            f"benchmarks/results/{name}.md is not what its benchmark renders from {name}.json now")


def test_every_generated_block_is_what_the_report_script_renders_now():
    report = _report()
    assert "<!-- report: systems -->" in (ROOT / "README.md").read_text(), "the README's systems table is gone"
    assert report.stale() == [], "run python benchmarks/report.py"


def test_the_systems_table_reads_each_headline_from_its_results_file(tmp_path, monkeypatch):
    """The table follows the file: a changed measurement changes the rendered figure (nothing typed by hand)."""
    import json

    report = _report()
    results = tmp_path / "results"
    results.mkdir()
    for source in (ROOT / "benchmarks" / "results").glob("*.json"):
        (results / source.name).write_text(source.read_text())
    recipe = json.loads((results / "fashion_mnist_recipe.json").read_text())
    before = next(r for r in recipe["results"] if r["variant"] == "default")["test_acc"]
    for run in recipe["results"]:
        run["test_acc"] = 0.1234
    (results / "fashion_mnist_recipe.json").write_text(json.dumps(recipe))
    monkeypatch.setattr(report, "RESULTS", results)
    table = report.systems()
    assert "Fashion-MNIST test accuracy 12.34 %" in table and f"{100 * before:.2f} %" not in table.split("ViT")[1][:200]
    assert table.count("\n| [") == len(report.SYSTEMS)
