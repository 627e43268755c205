"""Every results file records its provenance: the command that made it, the commit, the machine with its ISA
(`cpu_capability`) and what else ran beside it (`beside`), at the top or for each run it keeps; a file measured
before that rule says so in a "provenance" block naming the commit that added it (git log), nothing made up.
Every benchmark script that writes into benchmarks/results takes --beside and writes through the harness, which
stamps the record."""

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
READERS = {"report.py": "renders the pages' tables from the results files, writes none"}


def _where(record: dict, beside_from: dict | None = None) -> list[str]:
    """What `record` lacks of command, commit, beside (or `beside_from`'s) and machine.cpu_capability."""
    missing = [key for key in ("command", "commit") if not record.get(key)]
    if "beside" not in record and "beside" not in (beside_from or {}):
        missing.append("beside")
    machine = record.get("machine")
    if not isinstance(machine, dict) or not machine.get("cpu_capability"):
        missing.append("machine.cpu_capability")
    return missing


def _per_run(record: dict) -> list[str] | None:
    """None where `record` keeps no runs; else what its runs lack: each run in "results" (and each pretraining)
    records its own provenance, inline (denoising_detection: the pair's, or each of its two runs') or as a
    "provenance" block (setr_pretraining)."""
    runs = {f"results.{key}": run for key, run in (record.get("results") or {}).items()} if isinstance(
        record.get("results"), dict) else {}
    if not runs or not all(isinstance(run, dict) for run in runs.values()):
        return None
    runs |= {f"pretraining.{key}": run for key, run in (record.get("pretraining") or {}).items()}
    problems = []
    for name, run in runs.items():
        lacks = _where(run["provenance"]) if "provenance" in run else _where(run, record)
        halves = [part for part in run.values() if isinstance(part, dict) and "curve" in part]
        if lacks and halves:  # a pair whose runs may span sessions: each of its runs records its own
            lacks = sorted({item for part in halves for item in _where(part, record)})
        problems += [f"{name} lacks {', '.join(lacks)}"] if lacks else []
    return problems


def _git(*args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def _history() -> bool:
    """Whether git's history is here to check committed_in against (not in a shallow clone or an sdist)."""
    return _git("rev-parse", "--is-shallow-repository") == "false"


def _legacy(name: str, block: object, history: bool) -> list[str]:
    if not isinstance(block, dict) or block.get("recorded_at_measurement") is not False:
        return [f"{name}: no command/commit/beside/machine.cpu_capability, and no legacy provenance block"]
    problems = [f"{name}: provenance lacks {key}" for key in ("committed_in", "command", "beside", "note")
                if key not in block]
    if history and "committed_in" in block:
        added = (_git("log", "--diff-filter=A", "--format=%H", "--", f"benchmarks/results/{name}") or "").split()
        if not added:
            problems.append(f"{name}: git log names no commit that added it")
        elif not added[-1].startswith(str(block["committed_in"])):
            problems.append(f"{name}: committed_in {block['committed_in']}, but git log says {added[-1][:9]} "
                            "added it first")
    return problems


def test_every_results_file_records_its_provenance_or_says_it_was_measured_before_the_rule():
    files = sorted(RESULTS.glob("*.json"))
    assert files, "no results files"
    history = _history()
    problems = []
    for path in files:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            problems.append(f"{path.name}: a {type(record).__name__}, not an object with its provenance")
            continue
        if not _where(record):
            continue
        per_run = _per_run(record)
        if per_run == []:
            continue
        if "provenance" in record:
            problems += _legacy(path.name, record["provenance"], history)
        else:
            problems.append(f"{path.name} lacks {', '.join(_where(record))}"
                            + (f" ({'; '.join(per_run)})" if per_run else ""))
    assert not problems, "\n".join(problems)


def test_a_legacy_block_names_the_commit_that_added_its_file():
    """The check above against git's history, on one file, so that a skipped comparison shows."""
    if not _history():
        pytest.skip("no git history here (shallow clone or no repository): committed_in is not checked")
    legacy = {path.name: record["provenance"] for path in sorted(RESULTS.glob("*.json"))
              if isinstance(record := json.loads(path.read_text()), dict)
              and isinstance(record.get("provenance"), dict)
              and record["provenance"].get("recorded_at_measurement") is False}
    if not legacy:
        pytest.skip("every results file was measured with its provenance: no legacy block left to check")
    name, block = next(iter(legacy.items()))
    assert _legacy(name, block, True) == []
    assert _legacy(name, {**block, "committed_in": "0000000"}, True) != []


def _writers() -> dict[str, str]:
    """benchmarks/*.py that write into the results folder, with their source."""
    scripts = {}
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        source = path.read_text()
        if path.name not in READERS and ("RESULTS" in source or '"results"' in source):
            scripts[path.name] = source
    return scripts


def _calls(source: str) -> set[str]:
    return {node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)}


def test_every_script_that_writes_results_takes_beside_and_writes_through_the_harness():
    scripts = _writers()
    assert {"speed.py", "ipt_speed.py", "setr_pretraining.py", "denoising_detection.py"} <= set(scripts)
    problems = []
    for name, source in scripts.items():
        calls = _calls(source)
        if "add_beside_option" not in calls:
            problems.append(f"{name}: no --beside (add_beside_option(parser))")
        if not calls & {"write_results", "write_json"}:
            problems.append(f"{name}: writes its results file without write_results / write_json")
    assert not problems, "\n".join(problems)


def test_the_beside_option():
    import argparse

    from benchmarks.harness import add_beside_option

    parser = add_beside_option(argparse.ArgumentParser())
    assert parser.parse_args([]).beside == "nothing"
    assert parser.parse_args(["--beside", "a test run"]).beside == "a test run"


def test_write_results_and_write_json_stamp_the_record(tmp_path):
    from benchmarks.harness import provenance, write_json, write_results

    assert provenance(beside="x")["beside"] == "x" and provenance()["beside"] == "nothing"
    record = write_results(tmp_path / "out", "t", {"rows": [1]}, "| a |\n", beside="unit tests")
    written = json.loads((tmp_path / "out" / "t.json").read_text())
    assert written == record and written["rows"] == [1] and (tmp_path / "out" / "t.md").read_text() == "| a |\n"
    assert written["beside"] == "unit tests" and written["command"].startswith("python ") and written["commit"]
    assert written["machine"]["cpu_capability"]

    # a record's own machine is kept, completed with what it lacks; its own keys win
    own = {"machine": {"cpu": "mine", "cpus": 99}, "command": "python made_by_hand.py", "rows": []}
    written = write_json(tmp_path / "own.json", own, beside="nothing")
    assert written["machine"]["cpu"] == "mine" and written["machine"]["cpus"] == 99
    assert written["machine"]["cpu_capability"] and written["command"] == "python made_by_hand.py"
    assert written["beside"] == "nothing" and written["commit"]
    assert json.loads((tmp_path / "own.json").read_text()) == written

    # a list becomes rows beside the provenance; nothing is left behind but the file
    written = write_json(tmp_path / "list.json", [{"a": 1}], beside="b", indent=1)
    assert written["rows"] == [{"a": 1}] and written["beside"] == "b" and written["machine"]["cpu_capability"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.json", "out", "own.json"]


def test_the_commit_is_the_one_the_run_started_from(monkeypatch):
    """A long benchmark records the code it started with; an edit made while it ran shows as commit_at_save."""
    import argparse

    from benchmarks.harness import host

    states = iter([("abc123", "python bench.py --x", "e0"), ("abc123+changes", "python bench.py --x", "e1")])
    monkeypatch.setattr(host, "_AT_START", {})
    monkeypatch.setattr(host, "_code_state", lambda: next(states))
    host.add_beside_option(argparse.ArgumentParser())  # the script starts: the state is noted once
    record = host.provenance(beside="nothing")
    assert record["commit"] == "abc123" and record["command"] == "python bench.py --x"
    assert record["commit_at_save"] == "abc123+changes"

    monkeypatch.setattr(host, "_AT_START", {})
    monkeypatch.setattr(host, "_code_state", lambda: ("def456", "python other.py", "e0"))
    record = host.provenance()  # no start noted (a library call): the state now, and nothing changed meanwhile
    assert record["commit"] == "def456" and "commit_at_save" not in record

    # started from an edited tree and edited again: the same "+changes", other edits
    states = iter([("def456+changes", "python b.py", "e1"), ("def456+changes", "python b.py", "e2")])
    monkeypatch.setattr(host, "_AT_START", {})
    monkeypatch.setattr(host, "_code_state", lambda: next(states))
    host.note_start()
    assert host.provenance()["commit_at_save"] == "def456+changes, the working tree edited meanwhile"


def test_a_table_of_runs_filled_one_at_a_time_names_each_runs_machine(tmp_path):
    """Runs kept in one file may come from different machines: the table says where, from each run's provenance."""
    from benchmarks.harness import machine_lines, write_table

    epyc = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "threads": 2, "torch": "2.14.1"}
    xeon = {**epyc, "cpu": "Intel(R) Xeon(R) Processor", "cpu_capability": "AVX512"}
    same = {"a": {"provenance": {"machine": epyc}}, "b": {"provenance": {"machine": epyc}}}
    assert machine_lines(same, xeon) == ["AMD EPYC (AVX2), 2 threads, torch 2.14.1"]
    # a run without provenance is the file's (the fallback); a run from before provenance says what was written
    mixed = {"a": {"provenance": {"machine": epyc}}, "b": {},
             "c": {"provenance": {"recorded_at_measurement": False, "machine": "2 cores (Xeon), ISA unknown"}}}
    lines = machine_lines(mixed, xeon, {"a": "model A"})
    assert lines[0].startswith("Each run's machine") and lines[1] == ""
    assert lines[2:] == ["- model A: AMD EPYC (AVX2), 2 threads, torch 2.14.1",
                         "- b: Intel(R) Xeon(R) Processor (AVX512), 2 threads, torch 2.14.1",
                         "- c: 2 cores (Xeon), ISA unknown"]
    assert machine_lines({}, xeon) == []

    write_table(tmp_path / "t.md", "| a |\n")  # atomically: nothing but the file is left
    assert (tmp_path / "t.md").read_text() == "| a |\n" and [p.name for p in tmp_path.iterdir()] == ["t.md"]
