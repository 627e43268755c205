"""The suite's time budget (tests/budget.py): every test folder has one, and the report adds up what it is given."""

from pathlib import Path

from .budget import BUDGET_FILE, budget_table, folder_of, read_budget, unmarked_slow

TESTS = Path(__file__).parent


def test_every_test_folder_has_a_budget():
    budget, limit = read_budget()
    folders = {str(p.parent.relative_to(TESTS.parent)) for p in TESTS.rglob("test_*.py")}
    assert folders - budget.keys() == set(), f"give these folders a budget in {BUDGET_FILE.name}"
    assert budget.keys() - folders == set(), "a budget for a folder without tests"
    assert all(seconds > 0 for seconds in budget.values()) and limit == 20


def test_the_table_sums_each_folders_tests_and_names_the_unmarked_slow_ones():
    seconds = {"tests/a/test_x.py::test_one": 3.0, "tests/a/test_x.py::test_two[1]": 30.5,
               "tests/b/test_y.py::test_three": 25.0, "tests/test_z.py::test_four": 0.5}
    lines = budget_table(seconds, {"tests/a": 20, "tests/b": 40})
    assert lines[2:] == ["| tests/a | 2 | 34 | 20 | over |", "| tests/b | 1 | 25 | 40 |  |",
                         "| tests | 1 | 0 | — | no budget: add one |", "| all | 4 | 59 | 60 |  |"]
    slow = {"tests/a/test_x.py::test_two[1]": False, "tests/b/test_y.py::test_three": True}
    assert unmarked_slow(seconds, slow, 20) == ["  30.5 s  tests/a/test_x.py::test_two[1]"]
    assert folder_of("tests/runtime/test_fast.py::test_x[a/b]") == "tests/runtime"
