"""A server over the small runs of every image task (tests/conftest.py: `trained`), on a free port of 127.0.0.1."""

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(scope="session")
def served(trained):
    from vitlab.serve.runs import load_runs

    return load_runs(trained.all_of(("cls", "detr", "setr", "ipt", "vqgan", "prior")))  # the other worker may make some


@pytest.fixture(scope="session")
def server(served):
    """The base URL of the API and the page over every run, served from a thread of this process."""
    from vitlab.serve.app import create_app
    from vitlab.serve.pool import WorkerPool
    from vitlab.serve.server import background_server

    with background_server(create_app(served, WorkerPool(workers=2, queue=64))) as url:
        yield url
