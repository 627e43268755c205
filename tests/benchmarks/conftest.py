import sys
from pathlib import Path

import pytest
import torch

# benchmarks/ is a folder of the repository, not of the installed package: its root makes `benchmarks.harness` import
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def one_thread():
    """These tests check the harness, not the speed: one thread keeps them quick on a busy machine, where
    OpenMP threads waiting for each other at every op make tiny models many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
