"""Every random stream a run draws from, saved with each checkpoint so a resumed run draws what it would have."""

from __future__ import annotations

import random
from typing import Any

import torch


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def as_tuple(value: Any) -> Any:
    """Lists back to tuples (a Python RNG state comes back from torch.load as lists)."""
    return tuple(as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
