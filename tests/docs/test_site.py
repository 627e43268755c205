"""The documentation site builds with `mkdocs build --strict` (no broken link, no page left out of the
navigation, no reference that does not resolve), with a page for every system and every task, and the generated
pages hold what the code declares now. The site is built once per test run (tests/conftest.py: `site`)."""

SYSTEMS = ("transformer", "vit", "deit", "detr", "deformable_detr", "setr", "ipt", "vqgan")


def test_every_system_and_task_has_a_page(site):
    from vitlab.tasks import TASKS

    for system in SYSTEMS:
        page = site / "systems" / system / "index.html"
        assert page.is_file(), f"no page for {system}"
        html = page.read_text()
        for section in ("The idea", "Code map", "Reproduce", "References"):
            assert section in html, f"the {system} page has no {section!r} section"
    # a system's releases are generated from its family's list
    assert "detr_resnet50.coco" in (site / "systems" / "detr" / "index.html").read_text()
    for task in TASKS:
        page = site / "tasks" / task / "index.html"
        assert page.is_file(), f"no page for the {task} task: add docs/tasks/{task}.md and list it in mkdocs.yml"
        html = page.read_text()
        assert "generated: task" not in html and "Training options" in html and "vitlab eval" in html


def test_the_command_line_reference_is_generated_from_the_parser(site):
    from vitlab.cli.main import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    subparsers = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for command in subparsers.choices:
        assert f'id="vitlab-{command}"' in html, f"vitlab {command} has no section in the reference"
    assert "--dn-groups" in html and "--mask-ratio" in html  # options of two tasks, straight from their dataclasses


def test_the_benchmark_pictures_and_the_walkthrough_are_published(site):
    assert (site / "results" / "fashion_mnist_recipe.png").is_file()
    assert (site / "annotated_vit" / "index.html").is_file()
    assert (site / "reference" / "api" / "index.html").read_text().count("doc-function") >= 5
