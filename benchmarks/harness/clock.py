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


def interleaved(mine: Callable[[], object], theirs: Callable[[], object], rounds: int, calls: int,
                device: str = "cpu") -> dict[str, float]:
    """Time two calls in alternating rounds (each goes first every other round), `calls` timed calls per round:
    the medians of each (seconds) and the median, min and max of the per-round ratio theirs / mine (> 1: mine
    is faster). Pairing measurements seconds apart keeps the ratio honest on a noisy machine."""
    mine(), theirs()  # warm-up: first-call allocations and lazy initialisation
    ratios, my_times, their_times = [], [], []
    for r in range(rounds):
        pair = (mine, theirs) if r % 2 == 0 else (theirs, mine)
        measured = {fn: timed(fn, calls, warmup=0, device=device) for fn in pair}
        my_times.append(measured[mine])
        their_times.append(measured[theirs])
        ratios.append(measured[theirs] / measured[mine])
    return {"mine_s": statistics.median(my_times), "theirs_s": statistics.median(their_times),
            "speedup_median": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios)}
