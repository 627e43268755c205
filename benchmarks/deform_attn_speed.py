"""vitlab's multi-scale deformable attention core against transformers' pure-PyTorch one (`grid_sample` per
level, the path it takes without its custom kernels), interleaved in one process, on the same inputs.

    python benchmarks/deform_attn_speed.py              # encoder and decoder shapes, 15 rounds
    python benchmarks/deform_attn_speed.py --quick      # a smoke run

The shapes are the paper's (8 heads of 32 channels, 4 levels at strides 8–64, 4 points) on a smaller image for
2 cores: 2 images of 384 × 384, so the levels are 48², 24², 12² and 6² pixels (S = 3,060). `encoder`: every
pixel is a query (Q = S); `decoder`: 300 object queries. Modes: forward, and forward + backward (gradients for
the values, the sampling locations and the attention weights, as training needs). Each round times both,
alternating which goes first; the table gives the median of the per-round ratios and their spread. Writes
benchmarks/results/deform_attn_speed.json and .md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
HEADS, HEAD_DIM, POINTS = 8, 32, 4


def inputs(batch: int, size: int, queries: int | None, seed: int = 0):
    """value, shapes, locations, weights for `batch` images of size × size; queries None: one per pixel."""
    generator = torch.Generator().manual_seed(seed)
    shapes = torch.tensor([[size // s, size // s] for s in (8, 16, 32, 64)])
    length = int(shapes.prod(-1).sum())
    queries = queries or length
    value = torch.randn(batch, length, HEADS, HEAD_DIM, generator=generator)
    locations = torch.rand(batch, queries, HEADS, len(shapes), POINTS, 2, generator=generator)
    weights = torch.rand(batch, queries, HEADS, len(shapes), POINTS, generator=generator).softmax(-1)
    return value, shapes, locations, weights


def compare(name: str, batch: int, size: int, queries: int | None, rounds: int, calls: int) -> list[dict]:
    from transformers.models.deformable_detr.modeling_deformable_detr import MultiScaleDeformableAttention

    from benchmarks.harness import interleaved
    from vitlab.layers.deform_attn import level_start_index, multi_scale_deformable_attention

    value, shapes, locations, weights = inputs(batch, size, queries)
    shape_list = [tuple(s) for s in shapes.tolist()]
    starts = level_start_index(shapes)
    reference = MultiScaleDeformableAttention()
    torch.testing.assert_close(multi_scale_deformable_attention(value, shapes, locations, weights),
                               reference(value, shapes, shape_list, starts, locations, weights, 64),
                               atol=1e-4, rtol=1e-4)  # the same numbers, or the timing means nothing
    leaves = [t.clone().requires_grad_() for t in (value, locations, weights)]

    def ours(backward: bool):
        out = multi_scale_deformable_attention(leaves[0], shapes, leaves[1], leaves[2])
        if backward:
            out.sum().backward()

    def theirs(backward: bool):
        out = reference(leaves[0], shapes, shape_list, starts, leaves[1], leaves[2], 64)
        if backward:
            out.sum().backward()

    rows = []
    for mode, backward in (("forward", False), ("forward + backward", True)):
        with torch.set_grad_enabled(backward):
            timing = interleaved(functools.partial(ours, backward), functools.partial(theirs, backward), rounds,
                                 calls)
        rows.append({"shape": name, "mode": mode, "batch": batch, "queries": locations.shape[1],
                     "values": value.shape[1], "vitlab_ms": 1000 * timing["mine_s"],
                     "hf_ms": 1000 * timing["theirs_s"], "speedup_median": timing["speedup_median"],
                     "speedup_min": timing["speedup_min"], "speedup_max": timing["speedup_max"], "rounds": rounds})
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | queries × values | mode | vitlab ms | transformers ms | transformers time / vitlab time "
             "(median, min–max) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['batch']} × {r['queries']:,} × {r['values']:,} | {r['mode']} | "
                     f"{r['vitlab_ms']:.1f} | {r['hf_ms']:.1f} | {r['speedup_median']:.2f}× "
                     f"({r['speedup_min']:.2f}–{r['speedup_max']:.2f}) |")
    return "\n".join(lines)


def table_of(record: dict) -> str:
    """benchmarks/results/<tag>.md from what the results file records (benchmarks/report.py renders it the same
    way): the table and the machine with its ISA."""
    from benchmarks.harness import cpu_and_isa

    host = record["machine"]
    return (markdown(record["rows"]) + f"\n\n{cpu_and_isa(host)}, "
            f"{host['threads']} threads, torch {host['torch']}, transformers {host.get('transformers', '—')}, fp32\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=["encoder", "decoder"], default=["encoder", "decoder"])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=384, help="image side in pixels (levels at strides 8–64)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=3, help="calls per timing (its median is taken)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a 128-pixel image, 2 rounds of 1 call")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="deform_attn_speed")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    size, rounds, calls = (128, 2, 1) if args.quick else (args.size, args.rounds, args.calls)
    rows = []
    for name in args.shapes:
        rows += compare(name, args.batch, size, None if name == "encoder" else 300, rounds, calls)
    record = {"machine": machine(), "rows": rows}
    write_results(Path(args.out), args.tag, record, table_of(record), beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
