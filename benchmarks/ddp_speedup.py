"""Training throughput of 1 process against N processes launched by torchrun, on this machine's CPUs.

    python benchmarks/ddp_speedup.py                       # 1 epoch of Fashion-MNIST, 1 vs 2 processes
    python benchmarks/ddp_speedup.py --nproc 2 4 --epochs 1

The same effective batch everywhere (128 = processes × per-process batch), the same total number of CPU
threads (the machine's cores, split evenly between processes), the same model and data. Each run is a real
`vitlab train` (torchrun for N > 1). Writes benchmarks/results/ddp_speedup.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/ddp_speedup.py`: the root makes `benchmarks.harness` import
RESULTS = Path(__file__).parent / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(nproc: int, epochs: int, model: str, batch: int, cores: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"ddp{nproc}-"))
    args = ["train", "--model", model, "--epochs", str(epochs), "--batch-size", str(batch // nproc),
            "--threads", str(max(1, cores // nproc)), "--out", str(out / "run"), "--no-hflip"]
    if nproc == 1:
        command = [sys.executable, "-m", "vitlab", *args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                   "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "vitlab", *args]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    return {"processes": nproc, "per_process_batch": batch // nproc, "threads_per_process": max(1, cores // nproc),
            "train_time_s": round(sum(r.get("train_time_s", 0.0) for r in rows), 1),
            "images_per_s": round(rows[-2]["train_images_per_s"], 1), "wall_s": round(wall, 1),
            "val_acc": rows[-2]["val_acc"], "test_acc": rows[-1]["test_acc"]}


def table_of(record: dict) -> str:
    """The results table, from what ddp_speedup.json records."""
    lines = ["| processes | batch per process | threads per process | images/s | speed-up | train time (s) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in record["results"]:
        launcher = " (torchrun, gloo)" if r["processes"] > 1 else ""
        lines.append(f"| {r['processes']}{launcher} | {r['per_process_batch']} | {r['threads_per_process']} | "
                     f"{r['images_per_s']:.0f} | {r['speedup']:.2f}× | {r['train_time_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, nargs="+", default=[2], help="process counts to compare with 1")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--model", default="vit_mini_patch7_28")
    parser.add_argument("--batch", type=int, default=128, help="effective batch (default: 128)")
    from benchmarks.harness import add_beside_option, write_json

    add_beside_option(parser)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    results = [run(n, args.epochs, args.model, args.batch, cores) for n in [1, *args.nproc]]
    base = results[0]["images_per_s"]
    for r in results:
        r["speedup"] = round(r["images_per_s"] / base, 3)
    machine = {"cpus": cores, "torch": torch.__version__, "platform": platform.platform()}
    write_json(RESULTS / "ddp_speedup.json", {"machine": machine, "model": args.model, "epochs": args.epochs,
                                              "results": results}, beside=args.beside)
    print(table_of(json.loads((RESULTS / "ddp_speedup.json").read_text())))

if __name__ == "__main__":
    main()
