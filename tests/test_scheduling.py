"""The suite's scheduling rules hold under pytest-xdist (tests/conftest.py): tests in one `xdist_group` are sent to
one worker. The scheduler groups by a suffix `@group` of each test's id, which pytest-xdist adds at collection; a
pytest that ids tests otherwise (9.2) silently dropped every group, so that the whole_machine tests ran beside each
other and module fixtures were made on both workers."""

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import WORKER, shared_dir

GROUP = "scheduling-check"


def _check_grouped(request, tmp_path_factory) -> None:
    if WORKER is None:  # the groups are xdist's: this file again, on two workers
        done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", __file__],
                              cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-3000:]
        return
    assert request.node.nodeid.endswith(f"@{GROUP}"), (
        f"pytest-xdist did not put this test in its group (its id is {request.node.nodeid!r}): --dist loadgroup "
        f"sends each test anywhere; see the pytest pin in pyproject.toml")
    seen = shared_dir(tmp_path_factory) / GROUP
    seen.mkdir(exist_ok=True)
    (seen / request.node.name).write_text(WORKER)
    workers = {path.read_text() for path in seen.iterdir()}
    assert workers == {WORKER}, f"the tests of one group ran on {sorted(workers)}"


@pytest.mark.xdist_group(GROUP)
def test_a_group_runs_on_one_worker(request, tmp_path_factory):
    _check_grouped(request, tmp_path_factory)


@pytest.mark.xdist_group(GROUP)
def test_a_group_runs_on_one_worker_too(request, tmp_path_factory):
    _check_grouped(request, tmp_path_factory)

