"""Speed switches shared by training, evaluation and the benchmark: bf16 detection, autocast, torch.compile.

bf16 autocast is only worth it where the hardware multiplies bf16 natively: CUDA GPUs of compute capability 8.0
or later, and CPUs with AVX512-BF16 or AMX. Elsewhere PyTorch emulates it, and on an AVX2 CPU a bf16 matmul was
measured 8–400× slower than fp32, so bf16 is never a default and `bf16_supported` says when it pays.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn


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


def autocast(device: str | torch.device, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when `bf16` is True, else a no-op context."""
    device = torch.device(device)
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def check_bf16(device: str | torch.device) -> None:
    """Raise a ValueError that says what to do when bf16 was asked for on a device that would emulate it."""
    reason = bf16_unsupported_reason(device)
    if reason:
        raise ValueError(f"--bf16 asked for, but {reason}; run without --bf16 (fp32) on this machine")


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


__all__ = ["autocast", "bf16_supported", "bf16_unsupported_reason", "check_bf16", "maybe_compile"]
