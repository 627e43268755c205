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


# ---- every package's arrows ------------------------------------------------------------------------------------
# what each part of vitlab may import of the others (DESIGN.md: cli/serve -> tasks/engine/runtime -> interop/viz ->
# models -> layers/data; atomic.py and reading.py, writing and reading files, and registry.py and commands.py,
# beneath them all); a part not named here (cli, the package's __init__) may import anything
MAY_IMPORT = {
    "commands": {"registry"},
    "layers": {"registry"},
    "data": {"atomic", "reading", "registry", "commands"},
    "models": {"layers", "registry"},
    "checkpoint": {"models", "layers", "atomic", "reading", "registry"},
    "viz": {"data", "models", "layers", "atomic"},
    "interop": {"models", "layers", "checkpoint", "data", "atomic", "reading", "registry"},
    "engine": {"models", "layers", "checkpoint", "data", "atomic", "reading", "registry"},
    "runtime": {"engine", "models", "layers", "checkpoint", "data", "atomic", "reading", "registry"},
    "tasks": {"engine", "interop", "viz", "models", "layers", "checkpoint", "data", "atomic", "reading", "registry",
              "runtime", "commands"},
    "serve": {"tasks", "engine", "runtime", "interop", "viz", "models", "layers", "checkpoint", "data", "atomic",
              "reading", "registry", "__version__"},
}


def part_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def parts_imported(path: Path) -> set[str]:
    own = part_of(path)
    return {m.split(".")[1] for m in imported_modules(path.read_text(), package_of(path))
            if m.startswith("vitlab.") and m.split(".")[1] != own}


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if part_of(p) in MAY_IMPORT),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_part_imports_only_below_it(path):
    bad = sorted(parts_imported(path) - MAY_IMPORT[part_of(path)])
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports vitlab.{', vitlab.'.join(bad)}"


def test_the_arrows_check_sees_a_forbidden_import(tmp_path):
    assert parts_imported(PACKAGE / "engine" / "run.py") <= MAY_IMPORT["engine"]
    assert "tasks" in parts_imported(PACKAGE / "serve" / "runs.py")  # the check reads imports inside functions
    assert "tasks" not in MAY_IMPORT["engine"] and "runtime" not in MAY_IMPORT["interop"]
    assert "interop" not in MAY_IMPORT["runtime"] and {"interop", "viz"}.isdisjoint(MAY_IMPORT["engine"])


# ---- names: a family or a task is named only in its own files -----------------------------------------------------
def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a source but its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def family_files(family: str) -> set[Path]:
    """A family's own files: its model file and its converters (DETR's post-processing and criterion files are the
    DETR family's, shared with Deformable DETR, whose model file builds on DETR's)."""
    from vitlab.models.registry import config_type

    own: set[Path] = set()
    for cls in config_type(family).__mro__:  # a DeiT is read by its parent ViT's converters
        if getattr(cls, "family", None):
            module = Path(sys.modules[cls.__module__].__file__)
            own |= {module, PACKAGE / "interop" / f"{module.stem}_formats.py"}
            own |= set((PACKAGE / "models").glob(f"{module.stem}_*.py"))
    return own


def task_files(task: str) -> set[Path]:
    """A task's own files: its package; and the model files, where each family says which tasks train it."""
    from vitlab.tasks import TASKS

    package = Path(sys.modules[TASKS[task].__module__].__file__).parent
    return set(package.rglob("*.py")) | set((PACKAGE / "models").glob("*.py"))


DEFAULT_TASK = {PACKAGE / "cli" / "train_cmd.py", PACKAGE / "tasks" / "launch.py"}  # `vitlab train` without --task
OTHER_MEANING = {(PACKAGE / "data" / "scenes.py", "segmentation"),  # a COCO annotation's field
                 (PACKAGE / "interop" / "set_prediction_keys.py", "resnet")}  # transformers' model_type of a backbone


def test_no_family_or_task_is_named_outside_its_own_files():
    from vitlab.models.registry import list_families
    from vitlab.tasks import TASKS

    families = {cls.family for cls in list_families()}
    allowed = {name: family_files(name) for name in families}
    for name in TASKS:
        allowed[name] = allowed.get(name, set()) | task_files(name) | (DEFAULT_TASK if name == "classification"
                                                                         else set())
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {text!r}" for path in sorted(PACKAGE.rglob("*.py"))
             for line, text in string_literals(path)
             if text in allowed and path not in allowed[text] and (path, text) not in OTHER_MEANING]
    assert not found, "named outside its own files:\n" + "\n".join(found)


def test_the_name_check_would_see_a_family_named_in_the_cli():
    assert (1, "detr") in string_literals_of('KINDS = {"detr": 1}\n'"'''a docstring'''")
    assert PACKAGE / "cli" / "evaluate_cmd.py" not in family_files("detr")


def string_literals_of(source: str) -> list[tuple[int, str]]:
    path = Path(__file__).parent / "fixtures" / "_literals_probe.py"
    path.write_text(source)
    try:
        return string_literals(path)
    finally:
        path.unlink()


# ---- no import circles --------------------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def runtime_imports(source: str, package: str) -> set[str]:
    """imported_modules without what `if TYPE_CHECKING:` imports (names for annotations: no arrow when it runs)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    return imported_modules(ast.unparse(tree), package)


def import_graph() -> dict[str, set[str]]:
    """vitlab's modules, each -> the vitlab modules it imports (a package is its __init__)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {m for m in runtime_imports(path.read_text(), package_of(path)) if m in paths and m != name}
            for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module: modules that import each other, in a ring."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in order:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(frozenset(group))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    found = [sorted(group) for group in circles(import_graph())]
    assert not found, "import circles: " + "; ".join(" <-> ".join(group) for group in found)


def test_the_circle_check_finds_rings_and_ignores_type_only_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import Runtime\n"
              "from .graphs import pack\n")
    assert runtime_imports(source, "vitlab.runtime") == {"typing", "typing.TYPE_CHECKING", "vitlab.runtime.graphs",
                                                          "vitlab.runtime.graphs.pack"}
    assert "vitlab.interop.detr_formats" not in import_graph()["vitlab.interop.deformable_detr_formats"]
