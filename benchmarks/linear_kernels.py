"""Why vitlab's `compile` runtime keeps the batch free: the two fp32 matmul libraries inside torch, on a ViT's
linear layers.

    python benchmarks/linear_kernels.py             # ViT-S/16 and ViT-B/16 layers at batch 32 (~1 min on 2 cores)
    python benchmarks/linear_kernels.py --quick     # one small layer, one round

`torch.nn.functional.linear` runs fp32 on MKL (what timm and eager PyTorch use: "MKL"). Inductor, compiling with
frozen weights, packs each linear weight once: for MKL when it knows the row count, a fixed batch
(`torch.ops.mkl._mkl_linear`: "packed MKL"), for oneDNN when the batch is free
(`torch.ops.mkldnn._linear_pointwise`: "oneDNN"). The three are timed here on the same tensors, interleaved in
rotated rounds; a row's GFLOP/s is the median over rounds, and `oneDNN / MKL`, `oneDNN / packed MKL` the median
per-round ratios.

Writes benchmarks/results/<tag>.json and .md (default tag: linear_kernels). One benchmark at a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"

# (model, layer, tokens per image, in features, out features)
LAYERS = [(model, layer, 197, d_in, d_out)
          for model, dim in (("vit_small_patch16_224", 384), ("vit_base_patch16_224", 768))
          for layer, d_in, d_out in (("qkv", dim, 3 * dim), ("proj", dim, dim), ("fc1", dim, 4 * dim),
                                     ("fc2", 4 * dim, dim))]
QUICK = [("tiny", "fc1", 50, 64, 256)]


def linear_kernels(x, weight, bias) -> dict:
    """The three ways torch runs x (rows, in) @ weightᵀ + bias in fp32, each a call without arguments."""
    import torch
    import torch.nn.functional as F

    rows = x.shape[0]
    mkl_packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
    onednn_packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
    return {"MKL": lambda: F.linear(x, weight, bias),
            "packed MKL": lambda: torch.ops.mkl._mkl_linear(x, mkl_packed, weight, bias, rows),
            "oneDNN": lambda: torch.ops.mkldnn._linear_pointwise(x, onednn_packed, bias, "none", [], "")}


def measure(batch: int, layers: list[tuple], rounds: int, calls: int) -> list[dict]:
    import torch

    rows = []
    for model, layer, tokens, d_in, d_out in layers:
        torch.manual_seed(0)
        x = torch.randn(batch * tokens, d_in)  # (B·N, D_in): a linear layer sees the tokens as rows
        weight, bias = torch.randn(d_out, d_in) / d_in ** 0.5, torch.randn(d_out)
        kernels = linear_kernels(x, weight, bias)
        reference = kernels["MKL"]()
        difference = max(float((kernels[name]() - reference).abs().max()) for name in ("packed MKL", "oneDNN"))
        samples: dict[str, list[float]] = {name: [] for name in kernels}
        names = list(kernels)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                kernels[name]()  # warm the caches for this kernel
                start = time.perf_counter()
                for _ in range(calls):
                    kernels[name]()
                samples[name].append((time.perf_counter() - start) / calls)
        gflop = 2 * x.shape[0] * d_in * d_out / 1e9
        rows.append({"model": model, "layer": layer, "rows": x.shape[0], "in": d_in, "out": d_out,
                     "mkl_gflops": gflop / statistics.median(samples["MKL"]),
                     "packed_mkl_gflops": gflop / statistics.median(samples["packed MKL"]),
                     "onednn_gflops": gflop / statistics.median(samples["oneDNN"]),
                     "onednn_over_mkl": statistics.median(m / o for m, o in zip(samples["MKL"], samples["oneDNN"])),
                     "onednn_over_packed_mkl": statistics.median(
                         m / o for m, o in zip(samples["packed MKL"], samples["oneDNN"])),
                     "max_abs_diff": difference})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | layer | rows × in → out | MKL GFLOP/s | packed MKL GFLOP/s | oneDNN GFLOP/s | oneDNN / MKL "
             "| oneDNN / packed MKL | max \\|Δ\\| |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['layer']} | {r['rows']} × {r['in']} → {r['out']} | {r['mkl_gflops']:.0f} | "
              f"{r['packed_mkl_gflops']:.0f} | {r['onednn_gflops']:.0f} | {r['onednn_over_mkl']:.2f} | "
              f"{r['onednn_over_packed_mkl']:.2f} | {r['max_abs_diff']:.1e} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one small layer, one round")
    parser.add_argument("--batch", type=int, default=32, help="images per batch (default: 32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    parser.add_argument("--calls", type=int, default=3, help="timed calls per kernel per round (default: 3)")
    parser.add_argument("--tag", default="linear_kernels", help="name of the result files")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness.host import add_beside_option, cpu_and_isa, machine

    add_beside_option(parser)
    args = parser.parse_args(argv)
    import torch

    from benchmarks.harness.reporting import write_results
    from vitlab.engine.speed import tune_process
    from vitlab.runtime.backends import usable_cores

    tune_process()
    torch.set_num_threads(usable_cores())
    rounds, calls = (1, 1) if args.quick else (args.rounds, args.calls)
    rows = measure(args.batch, QUICK if args.quick else LAYERS, rounds, calls)
    host = machine()
    result = {"machine": host, "batch": args.batch, "rounds": rounds, "calls": calls, "rows": rows}
    title = f"# fp32 linear layers: MKL, packed MKL and oneDNN ({cpu_and_isa(host)}, {host['threads']} threads)"
    markdown = "\n".join([title, "",
                          f"`python benchmarks/linear_kernels.py{' --quick' if args.quick else ''}`: batch "
                          f"{args.batch}, {rounds} rotated rounds × {calls} calls; torch {host['torch']}.", "",
                          table(rows), ""])
    write_results(args.out, args.tag, result, markdown, beside=args.beside)
    return result


if __name__ == "__main__":
    main()
