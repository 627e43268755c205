"""The ONNX graphs of the parity models (test_parity.FAMILIES), exported once per test run and shared by the
tests that run them on onnxruntime, in fp32 and in int8: each family's model is built from the same seed, so its
graph is the same file. The tests that share one run on one worker, one after the other (`shares_graphs`): the
first exports, the others read what it wrote (the runtime's own cache, as a run's later processes read theirs)."""

from pathlib import Path

import pytest

from ..conftest import shared_dir


@pytest.fixture(scope="session")
def graph_cache(tmp_path_factory):
    """name -> the folder of the family's parity-model graphs, for runtime.load(..., cache_dir=...)."""
    root = shared_dir(tmp_path_factory) / "parity-graphs"

    def folder(name: str) -> Path:
        path = root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    return folder


def shares_graphs(name: str, *values) -> pytest.param:
    """A parameter set of a test that reads the family's shared graphs: on the worker that runs the others."""
    return pytest.param(name, *values, marks=pytest.mark.xdist_group(f"parity-graphs-{name}"))
