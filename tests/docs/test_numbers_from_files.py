"""Every number the README and the documentation site show comes from a results file:

- a table quoted between `<!-- results: benchmarks/results/NAME.md -->` and `<!-- /results -->` is that file as
  the benchmark wrote it, and the same as benchmarks/report.py renders now from the measurement, NAME.json;
- a block between `<!-- report: NAME -->` and `<!-- /report -->` is what benchmarks/report.py renders now from the
  results files."""

import importlib.util
import re
from pathlib import Path

import pytest

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


def test_a_value_marker_reads_its_number_from_the_results_file(tmp_path, monkeypatch):
    """`<!-- value: NAME | PATH | FORMAT -->`: each selector of the path grammar against a record made here, and a
    changed measurement changing the sentence."""
    import json

    report = _report()
    curve = [{"ap": 0.2, "min": 5}, {"ap": 0.4, "min": 9}]
    record = {"rows": [{"model": "a", "batch": 1, "ratio": 1.5, "curve": curve, "in place / out of place": 0.6},
                       {"model": "a", "batch": 32, "ratio": 2.25, "curve": []},
                       {"model": "b", "batch": 32, "ratio": 0.75, "curve": [], "curve_gain": 0.1}],
              "final": {"acc": 0.9081}}
    (tmp_path / "toy.json").write_text(json.dumps(record))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    assert report.value("toy | final.acc | {pct:.2f} %") == "90.81 %"
    assert report.value("toy | rows[model=a,batch=32].ratio | {:.2f}×") == "2.25×"
    assert report.value("toy | rows[0].curve[-1].ap") == "0.4"
    assert report.value("toy | rows[0].curve[max=ap].min") == "9"
    assert report.value("toy | rows[batch=32]*.ratio.@min") == "0.75"
    assert report.value("toy | rows[*].ratio.@mean | {:.1f}") == "1.5"
    assert report.value("toy | rows[*].model.@len") == "3"
    assert report.value("toy | rows[1].ratio - rows[2].ratio | {:+.1f}") == "+1.5"
    assert report.value("toy | rows[1].ratio / rows[2].ratio | {:.0f}×") == "3×"
    assert report.value("toy | rows[1].ratio + rows[2].ratio") == "3.0"
    assert report.value("toy | rows[0].curve[ap>=0.3].min") == "9"
    assert report.value("toy | rows[max=curve_gain].model") == "b"  # rows without it are skipped
    assert report.value("toy | rows[ratio<1.5]*.batch.@len") == "1"
    assert report.value("toy | rows[model=a,ratio>1.5].batch") == "32"
    # a key that holds " / " itself: read whole, or as one side of a ratio
    assert report.value("toy | rows[0].in place / out of place") == "0.6"
    assert report.value("toy | rows[0].in place / out of place / rows[0].ratio | {:.1f}") == "0.4"
    for bad in ("toy | rows[model=c].ratio", "toy | rows[*].ratio", "toy | final.loss", "toy | final[0]",
                "toy | rows[a]", "nothing | final.acc", "toy", "toy | rows[ratio>9].model"):
        with pytest.raises((KeyError, ValueError, FileNotFoundError)):
            report.value(bad)

    page = tmp_path / "page.md"
    page.write_text("accuracy <!-- value: toy | final.acc | {pct:.1f} % --><!-- /value -->.\n")
    monkeypatch.setattr(report, "pages", lambda: [page])
    monkeypatch.setattr(report, "ROOT", tmp_path)
    assert report.stale() == ["page.md: '' where 'toy | final.acc | {pct:.1f} %' now reads '90.8 %'"]
    assert report.main([]) == 0
    assert "accuracy <!-- value: toy | final.acc | {pct:.1f} % -->90.8 %<!-- /value -->." in page.read_text()
    record["final"]["acc"] = 0.5
    (tmp_path / "toy.json").write_text(json.dumps(record))
    assert report.main(["--check"]) == 1
    assert report.main([]) == 0 and "-->50.0 %<!--" in page.read_text() and report.stale() == []


def test_the_runtimes_guide_tabulates_the_ratios_its_results_file_records():
    """The guide's pivot of benchmarks/results/runtimes.json: one row per model and batch, each cell that
    contender's recorded ratio to its base, the fastest fp32 vitlab runtime in bold."""
    import json

    report = _report()
    rows = json.loads((ROOT / "benchmarks" / "results" / "runtimes.json").read_text())["rows"]
    table = report.runtime_ratios("runtimes").splitlines()
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    line = next(row for row in table if row.startswith("| vit_small_patch16_224, 32 |"))
    cells = dict(zip(header[1:], [cell.strip() for cell in line.strip("|").split("|")][1:]))
    here = [row for row in rows if row["model"] == "vit_small_patch16_224" and row["batch"] == 32]
    for row in here:
        if row["label"] != "timm eager":
            assert cells[row["label"]].strip("*") == f"{row['ratio_to_base']:.2f}"
    fastest = max((row for row in here if row["label"].startswith("vitlab")
                   and not row["label"].endswith(("bf16", "int8"))),
                  key=lambda row: row["ratio_to_base"])
    assert cells[fastest["label"]].startswith("**") and sum(cell.startswith("**") for cell in cells.values()) == 1
