"""`vitlab bench`: a thin command over the repository's benchmark harness, which is not in the installed package."""

import json

import pytest
import torch

from vitlab.cli import bench_cmd
from vitlab.cli.main import main

pytest.importorskip("timm")
pytest.importorskip("transformers")


def test_bench_runs_the_harness_of_the_clone_and_prints_its_tables(tmp_path, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the harness is checked here, not the speed
    try:
        assert main(["bench", "vit_mini_patch7_28", "--batch", "2", "--repeats", "1", "--rounds", "1", "--no-memory",
                     "--json", str(tmp_path / "r.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "| vitlab/timm | vitlab/HF |" in out and "torch.mm peak" in out
    result = json.loads((tmp_path / "r.json").read_text())
    assert [r["label"] for r in result["rows"]] == ["vitlab", "timm", "hf"]
    assert bench_cmd.load_harness().__file__.startswith(str(bench_cmd.REPO / "benchmarks"))


def test_without_the_benchmarks_folder_bench_says_to_run_it_from_a_clone(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_cmd, "REPO", tmp_path)  # as installed from a wheel: no benchmarks/ beside vitlab/
    assert main(["bench", "vit_mini_patch7_28", "--no-memory"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err and "from a clone" in err and str(tmp_path) in err
