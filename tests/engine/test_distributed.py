"""Data-parallel training with torchrun on 2 CPU processes (gloo, 127.0.0.1 only), against one process.

R processes with batch b each take the optimizer steps of one process with batch R·b (DDP averages the
gradients), and one process accumulating 2 batches of b takes the steps of one batch of 2b: the weights agree to
float rounding. Flips are off in these runs because each process draws its augmentations for its own images.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vitlab.interop import read_state_dict
from vitlab.tasks import train

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
COMMON = ["--data-dir", str(MINI), "--allow-partial-data", "--model", "vit_mini_patch7_28", "--no-hflip",
          "--threads", "1", "--lr", "1e-3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def torchrun_scratch_in_tmp_path(tmp_path, monkeypatch):
    # torchrun makes a torchelastic_* folder in TMPDIR; a killed run cannot remove its own, so keep them in tmp_path
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
            f"--master_port={free_port()}", "-m", "vitlab", "train", *args]


def one_process(out: Path, **kw) -> None:
    options = dict(data="fashion-mnist", data_dir=str(MINI), allow_partial_data=True, model="vit_mini_patch7_28",
                   hflip=False, threads=1, lr=1e-3, out=str(out))
    train(**{**options, **kw})


def assert_same_weights(a: Path, b: Path, atol: float) -> None:
    """Every weight equal to `atol`, but for the key bias of attention, which is left out: adding a constant
    vector to every key adds the same q·b_k to a whole row of scores, which the softmax cancels, so its true
    gradient is 0 and what it receives is float rounding noise, which AdamW normalises to steps of size ~lr.
    Summing the batch in another order (2 processes, 2 accumulated batches) draws other noise."""
    wa, wb = read_state_dict(a / "last.safetensors")[0], read_state_dict(b / "last.safetensors")[0]
    assert wa.keys() == wb.keys()
    for key in wa:
        x, y = wa[key], wb[key]
        if key.endswith("attn.qkv.bias"):
            D = x.shape[0] // 3
            x, y = torch.cat([x[:D], x[2 * D :]]), torch.cat([y[:D], y[2 * D :]])  # [q; k; v] without k
        torch.testing.assert_close(y, x, atol=atol, rtol=0, msg=key)


@pytest.mark.whole_machine  # two processes, one per core
@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_combined_batch(tmp_path):
    two = tmp_path / "two"
    done = subprocess.run(torchrun(*COMMON, "--batch-size", "8", "--epochs", "2", "--drop-path", "0",
                                   "--out", str(two)), check=False, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "processes: 2" in done.stdout and done.stdout.count("test accuracy") == 1  # rank 0 alone prints
    one = tmp_path / "one"
    one_process(one, batch_size=16, epochs=2, drop_path=0.0)
    assert_same_weights(one, two, atol=1e-5)
    # the metrics cover all the data: the accuracies of 2 shards equal those of the whole validation and test sets
    import json

    rows = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    rows_one = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    assert [r["val_acc"] for r in rows[:-1]] == pytest.approx([r["val_acc"] for r in rows_one[:-1]], abs=1e-9)
    assert rows[-1]["test_acc"] == pytest.approx(rows_one[-1]["test_acc"], abs=1e-9)


def test_gradient_accumulation_equals_the_double_batch(tmp_path):
    one_process(tmp_path / "accum", batch_size=8, accum_steps=2, epochs=2, drop_path=0.0)
    one_process(tmp_path / "double", batch_size=16, epochs=2, drop_path=0.0)
    assert_same_weights(tmp_path / "double", tmp_path / "accum", atol=1e-5)


def test_fp16_on_a_cpu_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        one_process(tmp_path / "a", epochs=1, fp16=True, device="cpu")


KILLED_RUN = [*COMMON, "--batch-size", "8", "--epochs", "3", "--drop-path", "0.1", "--seed", "3",
              "--checkpoint-every-steps", "3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The two-process run the killed ones must end as, bit for bit (drop path on: each rank's own random stream)."""
    straight = tmp_path_factory.mktemp("straight") / "run"
    done = subprocess.run(torchrun(*KILLED_RUN, "--out", str(straight)), check=False, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return straight


def first_inside_checkpoint(folder: Path) -> None:
    deadline = time.time() + 240
    while not (folder / "state.pt").exists() and time.time() < deadline:
        time.sleep(0.01)


@pytest.mark.whole_machine  # two processes, one per core
@pytest.mark.slow
def test_a_two_process_run_killed_mid_epoch_resumes_by_the_same_command_to_the_same_weights(tmp_path, uninterrupted):
    """torchrun and both workers SIGKILLed in the middle of an epoch, after a checkpoint inside it (every 3 steps);
    the same `--resume auto` command, run again (as a requeued job runs it), continues each rank's own random stream
    (drop path is on) and place in the data, and ends on the weights of an uninterrupted run, bit for bit."""
    killed = tmp_path / "killed"
    again = [*KILLED_RUN, "--resume", "auto", "--out", str(killed)]
    proc = subprocess.Popen(torchrun(*again), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    first_inside_checkpoint(killed)
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers at once
    proc.wait()
    steps_done = torch.load(killed / "state.pt", weights_only=True)["step"]
    done = subprocess.run(torchrun(*again), check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    assert steps_done < json.loads((killed / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert_same_weights(uninterrupted, killed, atol=0)


@pytest.mark.whole_machine
@pytest.mark.slow
def test_torchrun_restarts_a_run_whose_worker_died_and_it_ends_as_if_never_stopped(tmp_path, uninterrupted):
    """`torchrun --max-restarts 2 ... --resume auto`: one of the two workers SIGKILLed after the first checkpoint
    inside an epoch; torchrun stops the other, starts both again, they resume from that checkpoint (a process group
    of their own attempt: engine/distributed.py) and the job ends by itself on the uninterrupted run's weights."""
    restarted = tmp_path / "restarted"
    command = torchrun(*KILLED_RUN, "--resume", "auto", "--out", str(restarted))
    command.insert(command.index("-m", 3), "--max-restarts=2")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_inside_checkpoint(restarted)
    import psutil

    workers = [child for child in psutil.Process(proc.pid).children() if "vitlab" in " ".join(child.cmdline())]
    assert len(workers) == 2
    workers[1].kill()  # one rank's machine gone
    _, errors = proc.communicate(timeout=300)
    assert proc.returncode == 0, errors[-3000:]
    assert "connectFullMesh failed" not in errors  # came back at the first restart
    assert_same_weights(uninterrupted, restarted, atol=0)


@pytest.mark.slow
def test_compiled_training_saves_plain_keys_and_reloads(tmp_path):
    from vitlab.tasks import load_run

    one_process(tmp_path / "c", batch_size=50, epochs=1, drop_path=0.0, compile=True, model_overrides={"depth": 1})
    weights = read_state_dict(tmp_path / "c" / "last.safetensors")[0]
    assert weights and not any(key.startswith("_orig_mod.") for key in weights)
    model, _ = load_run(tmp_path / "c")
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
