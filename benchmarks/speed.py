"""vitlab against timm and Hugging Face: inference and training images/s, peak memory, FLOPs.

    python benchmarks/speed.py                                  # the four models of the speed issue
    python benchmarks/speed.py --models vit_tiny_patch16_224 --repeats 3 --rounds 2

Writes benchmarks/results/speed.json and prints a markdown table with the ratios vitlab/timm and vitlab/HF.
One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch

from vitlab.bench import LIBRARIES, Workload, achieved_share, matmul_peak_gflops, measure

RESULTS = Path(__file__).parent / "results"
DEFAULT = [Workload("vit_tiny_patch16_224"), Workload("vit_small_patch16_224"),
           Workload("vit_base_patch16_224", infer_batch=32, train_batch=8),
           Workload("vit_mini_patch7_28", infer_batch=256, train_batch=128)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", help="registered names (default: the four of the speed issue)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the libraries")
    parser.add_argument("--tag", default="speed")
    args = parser.parse_args()
    known = {w.name: w for w in DEFAULT}
    workloads = [known.get(m, Workload(m)) for m in args.models] if args.models else DEFAULT
    peak = matmul_peak_gflops()
    rows = []
    for workload in workloads:
        for row in measure(workload, LIBRARIES, args.repeats, args.rounds):
            row.update(achieved_share(row, peak))
            rows.append(row)
    out = {"machine": {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                       "platform": platform.platform(), "matmul_peak_gflops": peak}, "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.tag}.json").write_text(json.dumps(out, indent=2))
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, measured matmul peak {peak:.0f} GFLOP/s\n")
    keys = [k for k in rows[0] if k.endswith("_img_s")]
    print("| model | metric | vitlab | timm | hf | vitlab/timm | vitlab/hf |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model in dict.fromkeys(r["model"] for r in rows):
        by_lib = {r["library"]: r for r in rows if r["model"] == model}
        for key in [*keys, "train_extra_rss_mib", "gflops_per_image", "infer_share_of_peak", "train_share_of_peak"]:
            v, t, h = (by_lib[lib][key] for lib in LIBRARIES)
            ratio_t = f"{v / t:.2f}" if t else "n/a"
            ratio_h = f"{v / h:.2f}" if h else "n/a"
            print(f"| {model} | {key} | {v:.3g} | {t:.3g} | {h:.3g} | {ratio_t} | {ratio_h} |")


if __name__ == "__main__":
    main()
