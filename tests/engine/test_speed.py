"""engine/speed: bf16 detection and refusal, the one autocast switch, torch.compile off, and the two CPU process
settings (glibc keeping freed memory, denormals flushed to zero)."""

import json
from pathlib import Path

import pytest
import torch

from vitlab.engine.speed import autocast, bf16_supported, bf16_unsupported_reason, check_bf16, maybe_compile

ROOT = Path(__file__).resolve().parents[2]


def test_bf16_is_detected_and_refused_where_it_would_be_emulated():
    supported = bf16_supported("cpu")
    assert isinstance(supported, bool)
    assert (bf16_unsupported_reason("cpu") == "") == supported
    if not supported:
        with pytest.raises(ValueError, match="bf16"):
            check_bf16("cpu")


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_autocast_runs_matmuls_in_the_dtype_asked_for(dtype):
    # the one switch the trainer, eval and the benchmarks share; None is plain fp32
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("cpu", dtype):
        product = a @ b
    assert product.dtype == (dtype or torch.float32)
    torch.testing.assert_close(product.float(), a @ b, atol=0.1, rtol=0.05)


def test_maybe_compile_is_the_model_itself_when_off():
    model = torch.nn.Linear(2, 2)
    assert maybe_compile(model, False) is model


def test_eval_refuses_bf16_where_it_would_be_emulated(tmp_path, capsys, monkeypatch):
    import vitlab.engine.speed as speed
    from vitlab.cli.main import main

    if bf16_supported("cpu"):  # a CPU with native bf16 would accept it: stand in for one without
        monkeypatch.setattr(speed, "bf16_supported", lambda device="cpu": False)

    assert main(["eval", str(tmp_path), "--bf16"]) == 2
    assert "bf16" in capsys.readouterr().err


_MMAPPED_BYTES = """
import ctypes, json, os, sys
import torch
from vitlab.engine.speed import freed_memory_kept, keep_freed_memory


class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2: hblkhd = bytes held in separate mmaps
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
t = torch.ones(64 * 2**20 // 4)  # a 64 MB tensor, as large as a ViT-B activation at batch 32
print(json.dumps({"applied": applied, "kept": freed_memory_kept(), "mmapped": libc.mallinfo2().hblkhd}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="glibc allocator check: Linux only")
@pytest.mark.parametrize("mode", ["default", "keep", "keep-but-env-default"])
def test_keep_freed_memory_moves_large_tensors_from_mmap_to_the_heap(mode):
    """glibc's own accounting (mallinfo2) in a fresh process: with its defaults a 64 MB tensor is a separate mmap
    (returned to the kernel when freed); after keep_freed_memory() it comes from the heap; VITLAB_MALLOC=default
    leaves the defaults."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VITLAB_MALLOC", None)
    if mode == "keep-but-env-default":
        env["VITLAB_MALLOC"] = "default"
    done = subprocess.run([sys.executable, "-c", _MMAPPED_BYTES, mode.split("-")[0]], capture_output=True,
                          text=True, env=env, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "keep":
        assert out["applied"] and out["kept"]
        assert out["mmapped"] < 64 * 2**20
    else:
        assert not out["applied"] and not out["kept"]
        assert out["mmapped"] >= 64 * 2**20


def test_flush_denormals_turns_underflow_to_zero_and_back(monkeypatch):
    from vitlab.engine.speed import flush_denormals, tune_process

    try:
        assert flush_denormals(False) is False
        tiny = torch.tensor([1e-39])  # a denormal fp32 (made after flushing is off: making it under flushing gives 0)
        assert (tiny * 1.0).item() != 0.0  # gradual underflow: the denormal survives
        if not flush_denormals(True):
            pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal needs SSE3)")
        assert (tiny * 1.0).item() == 0.0
        monkeypatch.setenv("VITLAB_DENORMALS", "keep")
        assert flush_denormals(True) is False and (tiny * 1.0).item() != 0.0
        monkeypatch.setenv("VITLAB_MALLOC", "default")
        assert tune_process() == {"keep_freed_memory": False, "flush_denormals": False}
    finally:
        torch.set_flush_denormal(False)
