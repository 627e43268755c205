"""What a forward pass costs: FLOPs per image, the matmul peak they are compared with, and peak memory, each
library alone in a fresh process (resident set on CPU, max_memory_allocated on CUDA)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from vitlab.engine.speed import tune_process
from vitlab.models.registry import get_config

from .clock import timed
from .workloads import build, image_shape, train_step

# the repository root: the fresh process of `peak_memory` imports vitlab and this harness from here
ROOT = Path(__file__).resolve().parents[2]


def flops_per_image(model: nn.Module, images: torch.Tensor) -> float:
    """Forward FLOPs per image as torch.utils.flop_counter counts them (matmuls, convolutions, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(images)
    return counter.get_total_flops() / images.shape[0]


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """GFLOP/s of a large fp32 torch.mm: the practical peak that model GFLOP/s are compared with."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    seconds = timed(lambda: torch.mm(a, b), repeats, device=device)
    return 2 * n**3 / seconds / 1e9


def achieved_share(row: dict, peak_gflops: float) -> dict[str, float]:
    """GFLOP/s reached as a fraction of the matmul peak; training counted as 3 × the forward FLOPs."""
    if "gflops_per_image" not in row:
        return {}
    big = f"infer_b{row['infer_batch']}_img_s"
    return {"infer_gflop_s": row[big] * row["gflops_per_image"],
            "infer_share_of_peak": row[big] * row["gflops_per_image"] / peak_gflops,
            "train_share_of_peak": row["train_img_s"] * 3 * row["gflops_per_image"] / peak_gflops}


def peak_rss_reset() -> None:
    """Reset the kernel's peak-RSS counter of this process (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _status_mib(key: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident memory of this process since the last reset."""
    return _status_mib("VmHWM")


def rss_mib() -> float:
    return _status_mib("VmRSS")


_MEMORY_PROBE = """
import json, sys, torch
from benchmarks.harness.costs import memory_probe
print(json.dumps(memory_probe(*json.loads(sys.argv[1]))))
"""


def peak_memory(library: str, name: str, infer_batch: int, train_batch: int, device: str = "cpu",
                tuned: bool = False) -> dict:
    """Peak memory of inference and of training steps, measured in a fresh Python process that imports only
    this library, so the other libraries' models and allocations do not pollute it. MiB."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = json.dumps([library, name, infer_batch, train_batch, device, torch.get_num_threads(), tuned])
    done = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, args], check=False, capture_output=True, text=True,
                          env=env, timeout=900)
    if done.returncode != 0:
        return {"memory_error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_probe(library: str, name: str, infer_batch: int, train_batch: int, device: str, threads: int,
                  tuned: bool = False) -> dict:
    """Runs inside the fresh process of `peak_memory`, with the parent's number of threads and process settings."""
    torch.set_num_threads(threads)
    if tuned:
        tune_process()
    if library == "timm":
        import timm  # noqa: F401  (imports count towards the baseline, not the model)
    elif library == "hf":
        import transformers  # noqa: F401
    cuda = torch.device(device).type == "cuda"
    baseline = rss_mib()
    torch.manual_seed(0)
    model = build(library, name).to(device)
    shape = image_shape(name)
    out = {"rss_baseline_mib": baseline, "rss_model_mib": rss_mib() - baseline}
    x = torch.randn(infer_batch, *shape, device=device)
    model.eval()
    peak_rss_reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        model(x)
    out["infer_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    x = torch.randn(train_batch, *shape, device=device)
    y = torch.randint(0, get_config(name).num_classes, (train_batch,), device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peak_rss_reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):  # the second step holds the optimizer state as well
        train_step(model, optimizer, x, y)
    out["train_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    out["memory_kind"] = "cuda max_memory_allocated" if cuda else "peak RSS of the whole process"
    return out
