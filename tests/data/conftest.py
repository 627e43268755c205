"""Shared fixtures for the vitlab.data tests: the Fashion-MNIST mini fixture, an isolated environment, a local
HTTP server."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

import vitlab.data.fashion_mnist as fm
from tests.data.helpers import FILE_NAMES, MINI_DIR, md5_hex


@pytest.fixture(scope="session")
def mini_md5s() -> dict[str, str]:
    return {name: md5_hex(MINI_DIR / name) for name in FILE_NAMES}


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No environment overrides, an empty 'system' folder and a cache under tmp_path; returns the cache folder."""
    for var in (fm.DATA_ENV, fm.CACHE_ENV, fm.URL_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(fm, "SYSTEM_DIR", tmp_path / "system-empty")
    monkeypatch.setenv(fm.CACHE_ENV, str(tmp_path / "cache-root"))
    # urllib honours http_proxy; the test server on 127.0.0.1 must be reached directly.
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return tmp_path / "cache-root" / "fashion-mnist"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Path], str]]:
    """``serve(folder)`` starts an HTTP server for ``folder`` on 127.0.0.1 (free port); returns its base URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(folder: Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(folder)))
        # A short poll interval keeps shutdown() fast (the default waits up to 0.5 s).
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
