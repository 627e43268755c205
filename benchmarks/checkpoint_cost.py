"""What a checkpoint inside an epoch costs: the training state of a large model written as `vitlab train` writes it
(`RunDir.save_state`: torch.save to a file beside state.pt, fsync, the previous kept as state.prev.pt, renamed into
place), timed, with its size on disk, and the share of training time it takes at the default interval
(`--checkpoint-every 10` minutes).

    python benchmarks/checkpoint_cost.py                  # vit_base_patch16_224, deformable_detr_resnet50, ipt_base
    python benchmarks/checkpoint_cost.py --quick          # a tiny ViT, two saves

The state is what the loop saves: the model's weights, AdamW's two moments for every parameter (after one step, so
they exist), the schedule, the gradient scaler and the random streams. Each save is timed `--repeats` times (the
median; the first write of a file and later ones over it differ, so both happen); the overhead is that time over the
interval, the disk it writes to named in the results with its free space. Writes
benchmarks/results/checkpoint_cost.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
MODELS = ("vit_base_patch16_224", "deformable_detr_resnet50", "ipt_base")
INTERVAL_MIN = 10.0  # LoopConfig.checkpoint_every's default


def training_state(name: str) -> dict:
    """The state.pt a run of `name` would write: weights, AdamW moments, schedule, scaler, RNG."""
    import vitlab
    from vitlab.engine.rng import rng_state

    model = vitlab.create_model(name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for param in model.parameters():  # one step's moments, without a forward pass of the large model
        param.grad = torch.randn_like(param) * 1e-3
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return {"model": model.state_dict(), "optimizers": {"model": optimizer.state_dict()},
            "schedulers": {"model": scheduler.state_dict()}, "scaler": {}, "step": 1, "best": None,
            "best_row": None, "elapsed_s": 0.0, "per_rank": [{"rng": rng_state(), "data": None}],
            "partial": {"sums": {"loss": 1.0}, "batches": 1, "seen": 1, "segment_s": 1.0}}


def measure(name: str, repeats: int, folder: Path) -> dict:
    from vitlab.engine.run import RunDir

    state = training_state(name)
    parameters = sum(t.numel() for t in state["model"].values() if t.is_floating_point())
    run = RunDir(folder / name)
    run.path.mkdir(parents=True)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run.save_state(state)
        times.append(time.perf_counter() - start)
    size = run.file("state.pt").stat().st_size
    seconds = statistics.median(times)
    row = {"model": name, "parameters": parameters, "state_mib": size / 2**20,
           "on_disk_mib": (size + run.file("state.prev.pt").stat().st_size) / 2**20, "save_s": seconds,
           "save_s_all": times, "write_mib_per_s": size / 2**20 / seconds,
           "overhead_at_default": seconds / (60 * INTERVAL_MIN)}
    shutil.rmtree(run.path)
    print(row, flush=True)
    return row


def table_of(record: dict) -> str:
    from benchmarks.harness import cpu_and_isa

    lines = ["| model | parameters | state.pt MiB | on disk, with state.prev.pt, MiB | save s (median) | MiB/s | "
             f"overhead every {INTERVAL_MIN:.0f} min |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in record["rows"]:
        lines.append(f"| {r['model']} | {r['parameters'] / 1e6:.1f} M | {r['state_mib']:.0f} | "
                     f"{r['on_disk_mib']:.0f} | {r['save_s']:.2f} | {r['write_mib_per_s']:.0f} | "
                     f"{100 * r['overhead_at_default']:.2f} % |")
    host, disk = record["machine"], record["disk"]
    return ("\n".join(lines) + f"\n\nWritten to {disk['path']} ({disk['free_gib']:.0f} GiB free); "
            f"{cpu_and_isa(host)}, {host['threads']} threads, torch {host['torch']}\n")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write the checkpoints (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny ViT, two saves")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="checkpoint_cost")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    # two saves at least: the second keeps the first as state.prev.pt, as a run's do
    models, repeats = (["vit_tiny_patch16_224"], 2) if args.quick else (args.models, max(args.repeats, 2))
    with tempfile.TemporaryDirectory(prefix="vitlab-checkpoint-", dir=args.dir) as work:
        rows = [measure(name, repeats, Path(work)) for name in models]
        disk = {"path": str(Path(work).parent), "free_gib": shutil.disk_usage(work).free / 2**30}
    record = {"machine": machine(), "disk": disk, "interval_min": INTERVAL_MIN, "rows": rows}
    write_results(Path(args.out), args.tag + ("_quick" if args.quick else ""), record, table_of(record),
                  beside=args.beside)
    return record


if __name__ == "__main__":
    main()
