"""Tiled ×2 inference speed of IPT: images per second on a 512 × 512 photograph, by `forward_chop`'s batch size,
for ipt_small and ipt_base, with each configuration's peak memory; and a 2048 × 2048 photograph restored with
bounded memory.

    python benchmarks/ipt_speed.py                      # the table below, about 10 minutes on 2 cores
    python benchmarks/ipt_speed.py --quick              # a smoke run

Every configuration runs in a fresh process, so that its peak resident memory (VmHWM, from /proc) is its own;
beside it the process's memory once the model is loaded, before the image. Random weights: speed does not depend
on them. The inputs are centres of the first held-out photograph large enough (`vitlab fetch-photos`), not
halved, as uint8 → [0, 1]; the sr2 task; tiles of 48 pixels overlapping by 12 (stride 36: 14 × 14 = 196 tiles
for 512 pixels).
Writes benchmarks/results/ipt_speed.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
PLAN = [("ipt_small", 512, batch) for batch in (8, 32, 128)] + [("ipt_base", 512, 64), ("ipt_small", 2048, 64)]


def memory_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one(model_name: str, size: int, batch: int, data: str, repeats: int) -> dict:
    """Runs in its own process: the seconds per image (best of `repeats`) and the memory."""
    import torch

    from vitlab.engine.speed import tune_process

    tune_process()  # as the vitlab commands run
    from vitlab.data.restoration import center_crop, load_photos
    from vitlab.models import create_model
    from vitlab.tasks.restoration.task import find_photographs

    torch.manual_seed(0)
    model = create_model(model_name, degradations=("sr2",)).eval()
    from PIL import Image

    big_enough = [p for p in find_photographs(data)[2] or [] if min(Image.open(p).size) >= size]
    if not big_enough:
        raise ValueError(f"no held-out photograph has both sides of {size} pixels")
    image = center_crop(load_photos(big_enough[:1], halve_first=False)[0], size)
    x = image[None].float() / 255
    loaded = memory_mb("VmRSS")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = model.forward_chop(x, "sr2", overlap=12, batch_size=batch)
        times.append(time.perf_counter() - start)
    assert out.shape[-2:] == (2 * size, 2 * size)
    return {"model": model_name, "size": size, "batch_size": batch, "seconds": min(times), "all_seconds": times,
            "images_per_s": 1 / min(times), "tiles": model_tiles(size, 48, 36),
            "tiles_per_s": model_tiles(size, 48, 36) / min(times), "loaded_mb": loaded, "peak_mb": memory_mb("VmHWM"),
            "params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads()}


def model_tiles(size: int, tile: int, stride: int) -> int:
    from vitlab.layers.tiling import window_starts

    return len(window_starts(size, tile, stride)) ** 2


def markdown(rows: list[dict]) -> str:
    lines = ["| model | image | batch | s/image | images/s | tiles/s | memory loaded → peak (MB) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['size']}² → {2 * r['size']}² | {r['batch_size']} | {r['seconds']:.2f} | "
                     f"{r['images_per_s']:.3f} | {r['tiles_per_s']:.1f} | {r['loaded_mb']:.0f} → "
                     f"{r['peak_mb']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/photos")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "SIZE", "BATCH"), help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=2)
    from benchmarks.harness import add_beside_option, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), int(args.one[2]), args.data, args.repeats)))
        return []
    plan = [("ipt_small", 96, 8), ("ipt_small", 96, 64)] if args.quick else PLAN
    rows = []
    for model, size, batch in plan:
        repeats = 1 if (model == "ipt_base" or size > 512) else args.repeats
        done = subprocess.run([sys.executable, __file__, "--one", model, str(size), str(batch), "--data", args.data,
                               "--repeats", str(repeats)], capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    table = markdown(rows)
    name = "ipt_speed_quick" if args.quick else "ipt_speed"
    write_json(args.out / f"{name}.json", {"rows": rows}, beside=args.beside, indent=1)
    write_table(args.out / f"{name}.md", table + "\n")
    print(table)
    return rows


if __name__ == "__main__":
    main()
