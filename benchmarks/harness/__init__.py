"""Speed of vitlab against timm and Hugging Face, measured in one process, interleaved, median of repeats.

Each library builds the same ViT (same width, depth, heads, patch, image size, classes) with random weights and
every contender is measured with identical settings: the same inputs, the same AdamW, the same repeats. Rows:

- inference images/s at batch 1 and a larger batch (fp32, and bf16 autocast where the device has native bf16),
- training images/s (forward, backward, AdamW step),
- peak memory, each library alone in a fresh subprocess (resident set on CPU, max_memory_allocated on CUDA),
- FLOPs per image (torch.utils.flop_counter) and the achieved share of a torch.mm peak measured in the same run.

Rounds are interleaved and rotated (each contender goes first once), and each round's ratio vitlab/timm pairs
measurements taken seconds apart, so the ratios hold on a shared, noisy machine even when absolute numbers move.
`scaling` times one model against image size with the attention core timed alone. `benchmarks/speed.py` is the
front door (from a clone: the harness is not part of the installed package, as timm's benchmark script is not).

One concern per module: workloads (what is measured, the same model in each library), clock (timing a call),
costs (FLOPs, matmul peak, peak memory), attention (scaling with tokens, fused against explicit attention),
rounds (the interleaved rounds: `measure`, `run_speed`), host (the machine it ran on), reporting (markdown and
result files). The package imports each module on first use of one of its names (`add_beside_option` costs no
torch: a benchmark's fresh measuring processes stay as they were).
"""

from __future__ import annotations

import importlib

_MODULES = {
    "attention": ["attention_paths", "scaling"],
    "clock": ["interleaved", "synchronize", "timed"],
    "costs": ["achieved_share", "flops_per_image", "matmul_peak_gflops", "peak_memory", "peak_rss_mib", "rss_mib"],
    "host": ["add_beside_option", "cpu_and_isa", "machine", "machine_lines", "machine_of_run", "provenance",
             "with_machines"],
    "reporting": ["attention_table", "cost_table", "report", "scaling_table", "speed_table", "stamped", "write_json",
                  "write_results", "write_table"],
    "rounds": ["measure", "run_speed", "summarise"],
    "workloads": ["CPU_SETTINGS", "LIBRARIES", "Contender", "HFLogits", "Settings", "Workload", "build", "comparable",
                  "contenders", "image_shape", "train_step"],
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    """`from benchmarks.harness import NAME` imports NAME's module then (PEP 562)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "CPU_SETTINGS",
    "LIBRARIES",
    "Contender",
    "HFLogits",
    "Settings",
    "Workload",
    "achieved_share",
    "add_beside_option",
    "attention_paths",
    "attention_table",
    "build",
    "comparable",
    "contenders",
    "cost_table",
    "cpu_and_isa",
    "flops_per_image",
    "image_shape",
    "interleaved",
    "machine",
    "machine_lines",
    "machine_of_run",
    "matmul_peak_gflops",
    "measure",
    "peak_memory",
    "peak_rss_mib",
    "provenance",
    "report",
    "rss_mib",
    "run_speed",
    "scaling",
    "scaling_table",
    "speed_table",
    "stamped",
    "summarise",
    "synchronize",
    "timed",
    "train_step",
    "with_machines",
    "write_json",
    "write_results",
    "write_table",
]
