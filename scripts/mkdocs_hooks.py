"""MkDocs hooks of the documentation site (mkdocs.yml names this file).

- The benchmarks' pictures (benchmarks/results/*.png) are published under `results/`, so a page shows the
  picture the benchmark wrote, not a copy that could go stale.
- `reference/cli.md` is generated from the command line's parser (vitlab/cli/reference.py), which is itself
  generated from the option dataclasses.
- A page's `<!-- generated: task NAME -->` becomes that task's option tables, generated the same way, and
  `<!-- generated: releases PATTERN -->` the table of the releases whose tags match (`vitlab models --pretrained
  PATTERN --markdown`).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
TASK_MARKER = re.compile(r"<!-- generated: task (\w+) -->")
RELEASES_MARKER = re.compile(r"<!-- generated: releases (\S+) -->")


def on_files(files, config):
    from vitlab.cli.main import build_parser
    from vitlab.cli.reference import markdown_reference

    for picture in sorted((ROOT / "benchmarks" / "results").glob("*.png")):
        files.append(File(f"results/{picture.name}", src_dir=str(ROOT / "benchmarks"), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    text = ("# Command-line reference\n\nGenerated from the options' declarations: what `vitlab COMMAND --help` "
            "prints, as tables.\n\n" + markdown_reference(build_parser()))
    files.append(File.generated(config, "reference/cli.md", content=text))
    return files


def on_page_markdown(markdown, page, config, files):
    from vitlab.cli.models_cmd import releases_markdown
    from vitlab.cli.reference import task_reference

    markdown = RELEASES_MARKER.sub(lambda match: releases_markdown(match.group(1)), markdown)
    return TASK_MARKER.sub(lambda match: task_reference(match.group(1)), markdown)
