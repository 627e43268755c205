"""The machine a result was measured on: CPU, cores, threads, torch and the reference libraries' versions."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path


def machine(device: str = "cpu") -> dict:
    import torch  # here, not at the top: a script's --beside (add_beside_option) costs no torch in probe processes

    from vitlab.engine.speed import bf16_supported

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "platform": platform.platform(),
            "python": platform.python_version(), "device": device,
            "bf16_native": bf16_supported(device)}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    for lib, module in (("timm", "timm"), ("transformers", "transformers")):
        with contextlib.suppress(ImportError):
            info[lib] = __import__(module).__version__
    return info


def cpu_and_isa(machine: dict) -> str:
    """'AMD EPYC (AVX512)': a recorded machine's CPU and its ISA, as the results tables print it."""
    return f"{machine['cpu']} ({machine.get('cpu_capability') or 'ISA not recorded'})"


def machine_of_run(run: dict, fallback: dict | str) -> str:
    """'AMD EPYC (AVX2), 2 threads, torch 2.14.1': the machine one run of a results file with several runs recorded
    (its own provenance, else the file's `fallback`), or what its measurers wrote where the run predates provenance."""
    machine = run.get("provenance", {}).get("machine", fallback)
    if isinstance(machine, str):
        return machine
    return f"{cpu_and_isa(machine)}, {machine['threads']} threads, torch {machine['torch']}"


def machine_lines(runs: dict[str, dict], fallback: dict | str, names: dict[str, str] | None = None) -> list[str]:
    """The lines a table of runs filled one at a time ends with: their machine where they share one, else each run's
    with the warning that times compare only between runs measured on one machine (each run's own provenance,
    `machine_of_run`; `names` label the runs where their keys are not what the table calls them)."""
    machines = {key: machine_of_run(run, fallback) for key, run in runs.items()}
    if len(set(machines.values())) <= 1:
        return [next(iter(machines.values()))] if machines else []
    return ["Each run's machine: minutes and images/s compare between runs measured on one machine only.", ""] + [
        f"- {(names or {}).get(key, key)}: {where}" for key, where in machines.items()]


def with_machines(table: str, record: dict, names: dict[str, str] | None = None) -> str:
    """A results file's markdown: `table`, then `machine_lines` of the record's runs (record["results"])."""
    return "\n".join([table, "", *machine_lines(record["results"], record["machine"], names)]) + "\n"


def _code_state() -> tuple[str, str, str]:
    """(commit, command, edits): the commit checked out (with "+changes" where the working tree differs from it),
    the command line of this process, and a digest of the working tree's differences from the commit."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    # results files written by earlier runs are not a change to the code that measures
    code = ("--", ".", ":(exclude)benchmarks/results")
    edits = git("diff", "HEAD", *code)  # staged and unstaged changes to tracked files alike
    if edits:
        commit += "+changes"
    command = "python " + shlex.join([os.path.relpath(sys.argv[0], root), *sys.argv[1:]])
    return commit, command, hashlib.sha1(edits.encode()).hexdigest()[:12]


_AT_START: dict[str, tuple[str, str, str]] = {}


def note_start() -> None:
    """Takes the commit and command as the run starts (add_beside_option calls it): what is edited while a long
    benchmark runs is not the code that measured. The first call of a process counts."""
    _AT_START.setdefault("state", _code_state())


def provenance(device: str = "cpu", beside: str | None = "nothing") -> dict:
    """What a results file records beside its numbers: the command that made it, the commit it ran (with
    "+changes" where the working tree differed), the machine with its ISA (`cpu_capability`), and what else ran on
    the machine meanwhile (`beside`, the script's --beside: add_beside_option). The commit is the one at the start
    (note_start), where the script noted it; `commit_at_save` is added when the code changed meanwhile (another
    commit, or other edits to the working tree)."""
    now = _code_state()
    commit, command, edits = _AT_START.get("state", now)
    record = {"command": command, "commit": commit, "machine": machine(device), "beside": beside}
    if (now[0], now[2]) != (commit, edits):
        record["commit_at_save"] = now[0] if now[0] != commit else f"{now[0]}, the working tree edited meanwhile"
    return record


BESIDE_HELP = "what else ran on the machine meanwhile, recorded in the results file"


def add_beside_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--beside: what else ran on the machine while the benchmark did (default "nothing"), for provenance()."""
    parser.add_argument("--beside", default="nothing", help=BESIDE_HELP)
    note_start()
    return parser
