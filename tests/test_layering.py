"""Arrows point down (DESIGN.md): models/ and layers/ never import interop/, engine/, tasks/ or cli/.

The sources are parsed, not imported, so an import inside a function (the usual way a cycle is hidden) counts.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitlab"
LOWER = ("models", "layers")
UPPER = ("vitlab.interop", "vitlab.engine", "vitlab.tasks", "vitlab.cli")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an `import` or `from … import` in `source` names, relative ones resolved against `package`
    (the dotted package the file belongs to); `from x import y` counts both x and x.y, since y may be a module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == upper or m.startswith(upper + ".") for upper in UPPER))


def lower_sources() -> list[Path]:
    return sorted(path for folder in LOWER for path in (PACKAGE / folder).rglob("*.py"))


def package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts if path.name == "__init__.py" else parts[:-1]).removesuffix(".__init__")


def test_the_checker_sees_every_spelling_of_an_upward_import():
    source = """
import vitlab.engine.optim
from vitlab import tasks
def f():
    from ..interop import load_weights
    from .. import cli
from .registry import register_model
from ..layers.blocks import EncoderBlock
"""
    assert forbidden(imported_modules(source, "vitlab.models")) == [
        "vitlab.cli", "vitlab.engine.optim", "vitlab.interop", "vitlab.interop.load_weights", "vitlab.tasks",
    ]
    assert package_of(PACKAGE / "models" / "vit.py") == "vitlab.models"
    assert package_of(PACKAGE / "models" / "__init__.py") == "vitlab.models"


@pytest.mark.parametrize("path", lower_sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_models_and_layers_import_nothing_above_them(path):
    bad = forbidden(imported_modules(path.read_text(), package_of(path)))
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {', '.join(bad)}: models/ and layers/ sit below them"


def test_importing_the_models_loads_no_upper_layer():
    code = "import sys, vitlab.models; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert not forbidden(set(loaded))
    assert "vitlab.models.vit" in loaded  # the check looked at a process that did import the models
