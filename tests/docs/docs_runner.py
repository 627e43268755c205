"""Run the Python blocks of a markdown file top to bottom in one namespace: `python tests/docs/docs_runner.py FILE.md`.

The walkthrough in docs/ is executed this way by the test suite (tests/docs/test_annotated_vit.py), so it cannot
go stale.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(markdown: str) -> list[tuple[int, str]]:
    """(line number where the block's code starts, code) for every ```python block."""
    return [(markdown.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(markdown)]


def fashion_mnist_installed() -> bool:
    """Whether the walkthroughs that read Fashion-MNIST can run here (scripts/setup.sh installs it)."""
    from vitlab.data import find_fashion_mnist

    try:
        find_fashion_mnist(download=False)
        return True
    except FileNotFoundError:
        return False


def run_markdown(path: str | Path, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    path = Path(path)
    namespace = {"__name__": "__docs__"} if namespace is None else namespace
    for line, code in python_blocks(path.read_text()):
        # pad with blank lines so tracebacks point at the line of the markdown file
        exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)
    return namespace


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/docs/docs_runner.py FILE.md")
    run_markdown(sys.argv[1])
