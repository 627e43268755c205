"""Every results table the README quotes between `<!-- results: benchmarks/results/NAME.md -->` and
`<!-- /results -->` is that file as the benchmark wrote it: a number in the README comes from a results file."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- results: (\S+) -->\n(.*?)\n<!-- /results -->", re.S)


def test_every_quoted_results_table_is_its_file_as_written():
    blocks = BLOCK.findall((ROOT / "README.md").read_text())
    assert blocks, "the README quotes no results file between <!-- results: PATH --> markers"
    for path, quoted in blocks:
        source = ROOT / path
        assert source.is_file(), f"the README quotes {path}, which does not exist"
        assert source.with_suffix(".json").is_file(), f"{path} has no .json beside it (the measurement it renders)"
        assert quoted.strip() == source.read_text().strip(), (
            f"the README's copy of {path} differs from the file: paste the file's text between its markers")
