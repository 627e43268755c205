"""The documentation site, built once per test run (`mkdocs build --strict`) and read by the tests of the site and
of the browser, whichever worker gets there first building it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import made_once

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    with made_once(tmp_path_factory, "site") as (out, made):
        if not made:
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
            done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                                  cwd=ROOT, capture_output=True, text=True, env=env, timeout=300, check=False)
            assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out
