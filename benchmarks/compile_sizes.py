"""`--runtime compile` across image sizes: how many graphs torch.compile makes, what each new size costs, and that
every answer is torch's.

A detector served or evaluated with photos of many sizes calls its compiled graph at each. The runtime marks the
graph's free axes (the batch, the image's height and width) from the first call, so that one graph serves many
sizes; torch's own guards (a convolution's choice of kernel by size) still split sizes into a few classes, each
compiled once. Each size is called twice: the first call's seconds include any compiling, the second is the call.

    python benchmarks/compile_sizes.py                                   # deformable_detr_small, ten sizes
    python benchmarks/compile_sizes.py --model detr_small --tag compile_sizes-detr

Writes benchmarks/results/<tag>.json and <tag>.md and prints the markdown. One benchmark at a time on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
SIZES = [(96, 128), (128, 96), (96, 160), (160, 96), (112, 112), (120, 200), (200, 120), (64, 96), (96, 64),
         (144, 128)]


def measure(model_name: str, sizes: list[tuple[int, int]], batch: int) -> list[dict]:
    import torch
    from torch._dynamo.utils import counters

    import vitlab
    from vitlab import runtime

    torch.manual_seed(0)
    model = vitlab.create_model(model_name).eval()
    engine = runtime.load(model, backend="compile")
    rows = []
    for height, width in sizes:
        x = torch.randn(batch, 3, height, width)
        graphs_before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        out = engine.named(x)
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        engine.named(x)
        call_s = time.perf_counter() - start
        with torch.inference_mode():
            expected = model(x)
        rows.append({"size": [height, width], "batch": batch, "first_call_s": first_s, "call_s": call_s,
                     "new_graphs": counters["stats"]["unique_graphs"] - graphs_before,
                     "graphs": counters["stats"]["unique_graphs"],
                     "max_abs_diff": float((out["logits"] - expected.logits).abs().max())})
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="deformable_detr_small")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", help="height width pairs (default: ten sizes, 64-200)")
    parser.add_argument("--tag", default="compile_sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness import add_beside_option

    add_beside_option(parser)
    args = parser.parse_args(argv)
    sizes = SIZES if not args.sizes else list(zip(args.sizes[::2], args.sizes[1::2]))
    rows = measure(args.model, sizes, args.batch)
    from benchmarks.harness import machine, write_results

    m = machine()
    compiling = sum(r["first_call_s"] - r["call_s"] for r in rows if r["new_graphs"])
    lines = [f"Machine: {m['cpu']}, {m['cpus']} cores ({m['cpu_capability']}), torch {m['torch']}; {m['threads']} "
             f"threads; {args.model}, batch {args.batch}, `vitlab.runtime.load(model, backend=\"compile\")`, "
             f"sizes in the order called. {rows[-1]['graphs']} graphs for {len(rows)} sizes, "
             f"{compiling:.0f} s of compiling in all.", "",
             "| image (H×W) | new graphs | first call s | call s | max \\|Δ logits\\| vs torch |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['size'][0]}×{r['size'][1]} | {r['new_graphs']} | {r['first_call_s']:.2f} | {r['call_s']:.3f} | "
              f"{r['max_abs_diff']:.1e} |" for r in rows]
    text = "\n".join(lines) + "\n"
    write_results(args.out, args.tag, {"machine": m, "model": args.model, "batch": args.batch, "compiling_s": compiling,
                                       "rows": rows}, text, beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
