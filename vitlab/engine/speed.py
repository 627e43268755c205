"""Speed switches shared by training, evaluation and the benchmark: bf16 detection, autocast, torch.compile, and
two process-wide CPU settings that `vitlab` commands turn on (`tune_process`): glibc keeping freed memory, and
flushing denormal floats to zero.

bf16 autocast is only worth it where the hardware multiplies bf16 natively: CUDA GPUs of compute capability 8.0
or later, and CPUs with AVX512-BF16 or AMX. Elsewhere PyTorch emulates it, and on an AVX2 CPU a bf16 matmul was
measured 8–400× slower than fp32, so bf16 is never a default and `bf16_supported` says when it pays.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import warnings

import torch
from torch import nn

from .options import OptionError


def bf16_supported(device: str | torch.device = "cpu") -> bool:
    """True where bf16 matmuls run natively on `device` (so autocast to bf16 is faster, not emulated)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported", "_is_arm_sve_bf16_supported")
        return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
    return False  # other devices not measured here: say no rather than guess


def bf16_unsupported_reason(device: str | torch.device = "cpu") -> str:
    """Why `bf16_supported(device)` is False, for messages and benchmark tables ('' when it is supported)."""
    device = torch.device(device)
    if bf16_supported(device):
        return ""
    if device.type == "cpu":
        return "no native bf16 on this CPU (needs AVX512-BF16 or AMX); emulated bf16 is many times slower than fp32"
    return f"no native bf16 on {device}"


def autocast(device: str | torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast to `dtype` (bf16 or fp16) on `device`, or a no-op context for None (fp32).

    The one switch for training, evaluation and the benchmarks, so that they cannot drift apart."""
    return torch.autocast(torch.device(device).type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def check_bf16(device: str | torch.device) -> None:
    """Raise a ValueError that says what to do when bf16 was asked for on a device that would emulate it."""
    reason = bf16_unsupported_reason(device)
    if reason:
        raise OptionError("bf16", f"was asked for, but {reason}; run without it (fp32) on this machine")


def maybe_compile(model: nn.Module, enabled: bool, **options) -> nn.Module:
    """`torch.compile(model, **options)` when enabled, else the model itself.

    The compiled module shares parameters with `model` (save and load through the original, whose state-dict
    keys have no `_orig_mod.` prefix). Compilation happens lazily on the first call and again for each new input
    shape or train/eval mode; on 2 CPU cores it took ~30 s for a ViT-S. Falls back to eager with a warning where
    torch.compile is unavailable (e.g. no C++ compiler).
    """
    if not enabled:
        return model
    if not hasattr(torch, "compile"):
        warnings.warn("torch.compile is not available in this torch; running eagerly", stacklevel=2)
        return model
    return torch.compile(model, **options)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
KEEP_FREED_MEMORY_ENV = "VITLAB_MALLOC"  # "default" leaves the allocator as glibc sets it


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse instead of handing it back to the kernel. Returns whether it
    was applied (Linux with glibc, and VITLAB_MALLOC is not "default").

    By default glibc serves every allocation above 32 MB with a fresh mmap and returns it on free, and gives back
    the top of the heap beyond a threshold. A ViT's activations are exactly such tensors, freed and requested
    again at every step, so each one is paid for in page faults and zeroed pages: a 77 MB tensor (ViT-B's MLP at
    batch 32) took 28 ms to allocate and fill with the defaults and 2.6 ms with this, and whole models ran up to
    ~15 % faster (benchmarks/process_settings.py). The price: the process keeps its peak heap mapped until it exits.
    Process-wide, so it speeds up every library in the process; `vitlab` commands call it at start.
    """
    if os.environ.get(KEEP_FREED_MEMORY_ENV, "").lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to tune
        return False
    # serve large blocks from the heap (no mmap per tensor) and never trim its top
    applied = bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))
    _allocator["kept"] = _allocator["kept"] or applied
    return applied


_allocator = {"kept": False}  # whether keep_freed_memory changed this process


def freed_memory_kept() -> bool:
    """Whether `keep_freed_memory` has changed this process's allocator (it cannot be undone)."""
    return _allocator["kept"]


FLUSH_DENORMALS_ENV = "VITLAB_DENORMALS"  # "keep" leaves IEEE gradual underflow on


def flush_denormals(enabled: bool = True) -> bool:
    """Flush denormal floats (|x| < 1.2e-38 in fp32) to zero on the CPU, as TensorFlow does by default. Returns
    whether flushing is now on.

    Training produces them (GELU's backward far in its tails, softmax of very negative scores, AdamW's second
    moments of tiny gradients), and arithmetic on them can be slower on some CPUs. On the 2-core AMD machine here
    the gain was not shown: one same-process A/B of vit_mini training suggested ~8 %, the fresh-process runs of
    benchmarks/process_settings.py moved within their noise, and 2 epochs of the default recipe took the same time
    with and without it. The values lost are below anything fp32 training can feel. Process-wide; `enabled=False`
    restores gradual underflow.
    """
    if enabled and os.environ.get(FLUSH_DENORMALS_ENV, "").lower() == "keep":
        enabled = False
    return torch.set_flush_denormal(enabled) and enabled


def tune_process() -> dict[str, bool]:
    """The process settings `vitlab` commands run with: `keep_freed_memory()` and `flush_denormals()`. Returns
    which applied. Environment switches: VITLAB_MALLOC=default, VITLAB_DENORMALS=keep."""
    return {"keep_freed_memory": keep_freed_memory(), "flush_denormals": flush_denormals()}


__all__ = ["FLUSH_DENORMALS_ENV", "KEEP_FREED_MEMORY_ENV", "autocast", "bf16_supported", "bf16_unsupported_reason",
           "check_bf16", "flush_denormals", "freed_memory_kept", "keep_freed_memory", "maybe_compile", "tune_process"]


def machine_record(device: str | torch.device = "cpu") -> dict[str, object]:
    """What a run was trained on, as its config.json and model card say it: the CPU's model name, its ISA as torch
    sees it (AVX2, AVX512, ...), cores, threads, torch, and the GPU where it ran on one."""
    import platform

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    record: dict[str, object] = {"cpu": cpu, "isa": torch.backends.cpu.get_cpu_capability(),
                                 "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
                                 "torch": torch.__version__, "device": str(device)}
    if torch.device(device).type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return record
