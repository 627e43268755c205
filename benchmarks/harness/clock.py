"""Clocks: wall time of a call, synchronised with the device, median of repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], repeats: int, warmup: int = 1, device: str = "cpu") -> float:
    """Median seconds of `repeats` calls, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
