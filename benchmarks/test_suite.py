"""What the test suite costs: seconds of pytest, and each folder's test-seconds beside its budget.

    python benchmarks/test_suite.py                          # the whole suite, as CI runs it (~20 min on 2 cores)
    python benchmarks/test_suite.py --tag test_suite_quick -- -m "not slow"    # the quick tier
    python benchmarks/test_suite.py --junit FILE             # a finished run's JUnit XML (pytest --junitxml)

Runs `bash scripts/test.sh` (two pytest workers, `CI` set: a test that would skip fails) with a JUnit XML report,
then reads it: the run's own duration (what the budget of 720 s is held to), the sum of the tests' setup, call and
teardown per folder beside tests/budget.toml (1,440 test-seconds is 720 s on two workers), and the 25 slowest tests.
Writes benchmarks/results/TAG.{json,md}. Run nothing else meanwhile: two jobs on 2 cores slow each other 5-10x.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ and tests/ importable
from benchmarks.harness import add_beside_option, provenance, write_results
from tests.budget import read_budget

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"


def folder_of(classname: str) -> str:
    """JUnit's classname of a test -> its folder: "tests.runtime.test_parity" -> "tests/runtime", and
    "tests.cli.test_x.TestY" -> "tests/cli" (the module is the first part named test_*)."""
    parts = classname.split(".")
    module = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    return "/".join(parts[:module]) or "."


def read_junit(path: str | Path) -> dict:
    """The run's figures from pytest's JUnit XML: counts, the run's seconds, and each test's seconds."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    tests = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
        classname = case.get("classname")
        tests.append({"test": f"{classname}::{case.get('name')}", "folder": folder_of(classname),
                      "seconds": float(case.get("time", 0)), "outcome": outcome})
    counts = defaultdict(int)
    for test in tests:
        counts[test["outcome"]] += 1
    return {"pytest_s": float(suite.get("time", 0)), "tests": len(tests), **{k: counts[k] for k in
            ("passed", "failed", "error", "skipped")}, "per_test": tests}


def summarise(run: dict, budget: dict[str, float], slowest: int = 25) -> dict:
    per_folder: dict[str, list[float]] = defaultdict(list)
    for test in run["per_test"]:
        per_folder[test["folder"]].append(test["seconds"])
    folders = [{"folder": folder, "tests": len(times), "seconds": round(sum(times), 2), "budget": budget.get(folder)}
               for folder, times in sorted(per_folder.items(), key=lambda kv: -sum(kv[1]))]
    ranked = sorted(run["per_test"], key=lambda t: -t["seconds"])[:slowest]
    return {key: run[key] for key in ("pytest_s", "tests", "passed", "failed", "error", "skipped")} | {
        "test_seconds": round(sum(t["seconds"] for t in run["per_test"]), 2),
        "budget_test_seconds": sum(budget.values()), "folders": folders,
        "slowest": [{"test": t["test"], "seconds": t["seconds"]} for t in ranked]}


def table_of(record: dict) -> str:
    lines = [f"{record['tests']} tests ({record['passed']} passed, {record['failed']} failed, {record['error']} "
             f"errors, {record['skipped']} skipped): **{record['pytest_s']:.0f} s of pytest**, "
             f"{record['test_seconds']:.0f} test-seconds (budget {record['budget_test_seconds']:.0f}).", "",
             "| folder | tests | test-seconds | budget |", "| --- | ---: | ---: | ---: |"]
    for row in record["folders"]:
        budget = "—" if row["budget"] is None else f"{row['budget']:.0f}"
        lines.append(f"| {row['folder']} | {row['tests']} | {row['seconds']:.0f} | {budget} |")
    lines += ["", "| slowest tests | seconds |", "| --- | ---: |"]
    lines += [f"| {t['test']} | {t['seconds']:.1f} |" for t in record["slowest"]]
    m = record["machine"]
    lines.append(f"\n`{record['command']}` at {record['commit']}, {m['cpu']} ({m['cpu_capability']}), "
                 f"{m['cpus']} cores")
    return "\n".join(lines)


def run_suite(pytest_args: list[str], junit: Path) -> int:
    env = {**os.environ, "CI": os.environ.get("CI", "true")}
    return subprocess.run(["bash", "scripts/test.sh", f"--junitxml={junit}", *pytest_args], cwd=ROOT, env=env,
                          check=False).returncode


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--junit", help="read this JUnit XML of a finished run instead of running the suite")
    parser.add_argument("--tag", default="test_suite", help="name of the result files")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (-m 'not slow')")
    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.junit:
        junit = Path(args.junit)
    else:
        junit = Path(tempfile.mkdtemp()) / "junit.xml"
        code = run_suite(args.pytest_args, junit)
        if not junit.is_file():
            raise SystemExit(f"pytest wrote no report (exit status {code})")
    record = summarise(read_junit(junit), read_budget()[0]) | {"pytest_args": args.pytest_args}
    out = {**provenance(beside=args.beside), **record}
    write_results(Path(args.out), args.tag, out, table_of(out) + "\n", beside=args.beside)
    return out


if __name__ == "__main__":
    main()
