"""The suite's time budget: what each test folder may cost, read against what this run measured.

At the end of a run under `CI` (or with `VITLAB_BUDGET=1`), a table of each folder's test seconds (setup, call and
teardown summed over its tests, as the workers measured them) beside its budget in tests/budget.toml, and the
tests over `new_test_limit_s` seconds that are not marked `slow` (a test that long belongs in the slow tier, or in
a benchmark). It never fails a run: timings vary from host to host. The rule it keeps visible: a change pays for
the test time it adds.

tests/conftest.py imports the hooks below, so that pytest runs them.
"""

from __future__ import annotations

import os
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

BUDGET_FILE = Path(__file__).with_name("budget.toml")

_seconds: dict[str, float] = defaultdict(float)  # nodeid -> setup + call + teardown seconds
_slow: dict[str, bool] = {}  # nodeid -> marked slow


def read_budget(path: Path = BUDGET_FILE) -> tuple[dict[str, float], float]:
    """({folder: seconds}, the limit over which a test must be marked slow) from budget.toml."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    return {str(k): float(v) for k, v in data["folders"].items()}, float(data["new_test_limit_s"])


def folder_of(nodeid: str) -> str:
    """The test folder a node id belongs to: "tests/runtime/test_fast.py::test_x" -> "tests/runtime"."""
    path = nodeid.split("::")[0]
    return path.rpartition("/")[0] or "."


def budget_table(seconds: dict[str, float], budget: dict[str, float]) -> list[str]:
    """Markdown rows: each folder's measured test seconds beside its budget, the largest first, and the total."""
    per_folder: dict[str, list[float]] = defaultdict(list)
    for nodeid, spent in seconds.items():
        per_folder[folder_of(nodeid)].append(spent)
    lines = ["| folder | tests | seconds | budget | |", "| --- | ---: | ---: | ---: | --- |"]
    for folder, times in sorted(per_folder.items(), key=lambda kv: -sum(kv[1])):
        allowed = budget.get(folder)
        spent = sum(times)
        verdict = "no budget: add one" if allowed is None else ("over" if spent > allowed else "")
        shown = "—" if allowed is None else f"{allowed:.0f}"
        lines.append(f"| {folder} | {len(times)} | {spent:.0f} | {shown} | {verdict} |")
    total = sum(seconds.values())
    lines.append(f"| all | {len(seconds)} | {total:.0f} | {sum(budget.values()):.0f} | "
                 f"{'over' if total > sum(budget.values()) else ''} |")
    return lines


def unmarked_slow(seconds: dict[str, float], slow: dict[str, bool], limit: float) -> list[str]:
    """The tests that took longer than `limit` seconds without a slow mark, the longest first."""
    return [f"{seconds[n]:6.1f} s  {n}" for n in sorted(seconds, key=lambda n: -seconds[n])
            if seconds[n] > limit and not slow.get(n)]


def reporting() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("VITLAB_BUDGET"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase of every test, on the controller too under xdist (the workers send their reports there)."""
    _seconds[report.nodeid] += report.duration
    if report.when == "call" or report.nodeid not in _slow:
        _slow[report.nodeid] = "slow" in report.keywords


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not reporting() or not _seconds or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    budget, limit = read_budget()
    write = terminalreporter.write_line
    terminalreporter.section("time budget (tests/budget.toml; a change pays for the test time it adds)")
    for line in budget_table(dict(_seconds), budget):
        write(line)
    late = unmarked_slow(dict(_seconds), _slow, limit)
    if late:
        write(f"over {limit:.0f} s without @pytest.mark.slow (mark it slow, make it cheaper, or make it a "
              f"benchmark):")
        for line in late:
            write("  " + line)
