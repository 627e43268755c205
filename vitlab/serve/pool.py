"""A bounded pool of prediction workers shared by the API and the page.

At most `workers` predictions run at once, each in a thread of its own; at most `queue` more wait. A request
beyond that is answered 503 at once rather than piling up memory. Torch's intra-op threads are split between the
workers so that they do not fight over the cores.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from .uploads import BadInput

T = TypeVar("T")


class WorkerPool:
    def __init__(self, workers: int = 2, queue: int = 32) -> None:
        if workers < 1 or queue < 0:
            raise ValueError(f"workers must be at least 1 and queue at least 0, got {workers} and {queue}")
        self.workers, self.queue = workers, queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vitlab-predict")
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._count_lock = threading.Lock()
        self.served = 0

    def describe(self) -> str:
        return (f"{self.workers} prediction worker(s), {torch.get_num_threads()} torch thread(s) each, up to "
                f"{self.queue} request(s) waiting")

    def share_cores(self) -> int:
        """Give each worker its share of the cores as torch intra-op threads (a process-wide setting)."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // self.workers)
        torch.set_num_threads(threads)
        return threads

    def _take_slot(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise BadInput(503, f"the server is busy: {self.workers} predictions are running and {self.queue} "
                                f"waiting; try again in a moment")

    def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            with self._count_lock:
                self.served += 1
            self._slots.release()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on a worker, awaited without blocking the event loop."""
        self._take_slot()
        try:
            future = self._executor.submit(self._run, fn, *args, **kwargs)
        except RuntimeError:  # shut down
            self._slots.release()
            raise BadInput(503, "the server is stopping") from None
        return await asyncio.wrap_future(future)

    def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on a worker, waited for (the page's handlers run in threads of their own)."""
        self._take_slot()
        try:
            future = self._executor.submit(self._run, fn, *args, **kwargs)
        except RuntimeError:
            self._slots.release()
            raise BadInput(503, "the server is stopping") from None
        return future.result()

    def shutdown(self) -> None:
        """Let the running predictions finish; take no new ones."""
        self._executor.shutdown(wait=True, cancel_futures=True)
