"""Running the app: uvicorn in the foreground for `vitlab serve` (stopping cleanly on SIGINT and SIGTERM), or in a
background thread for tests and benchmarks (`background_server`)."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn


class Server(uvicorn.Server):
    """uvicorn's server, stopping on SIGINT or SIGTERM: it stops taking connections, lets the requests in flight
    finish, shuts the worker pool and returns (uvicorn's own would raise the signal again once stopped). A second
    SIGINT stops at once."""

    stopped_by: str | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame) -> None:
        self.stopped_by = signal.Signals(sig).name
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def background_server(app, host: str = "127.0.0.1", port: int | None = None, timeout: float = 60.0
                      ) -> Iterator[str]:
    """The app served in a thread of this process; yields its base URL and stops it on exit."""
    port = port or free_port(host)
    server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="vitlab-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
