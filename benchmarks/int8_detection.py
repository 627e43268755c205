"""What int8 costs a detector's answers: a detection run on the scenes scored on its test split in torch fp32 and,
after `vitlab quantize` (calibrated on the run's validation scenes), in int8 on ONNX Runtime and OpenVINO, with
the fp32 graphs of both runtimes beside them.

    python benchmarks/int8_detection.py                       # trains deformable_detr_small 2 epochs (~20 min)
    python benchmarks/int8_detection.py --run runs/ddetr      # a run already trained on the scenes
    python benchmarks/int8_detection.py --quick               # a smoke run: a tiny set, one epoch

The bar (Deformable DETR's deployment issue): AP50 in int8 within 0.01 of fp32 on the test split, with the
sampling offsets, attention weights, reference points and box heads kept in fp32 (the family's `int8_fp32`, each
with its reason), the products around them in int8. Everything is done through the command line a user has
(`vitlab train`, `vitlab quantize RUN --backend B`, `vitlab eval RUN --runtime B --precision P --json`); the
training reuses detr_scenes.py's recipe for the scenes (batch 4, lr 2e-4, no dropout). Writes
benchmarks/results/int8_detection.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
FIGURES = ("map", "map_50", "map_75", "mar_100")


def cli_json(*args: str) -> dict:
    """`vitlab ARGS --json`'s answer."""
    from vitlab.cli.main import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main([*args, "--json"])
    if status != 0:
        raise RuntimeError(f"vitlab {' '.join(args)} exited with {status}")
    return json.loads(printed.getvalue())


def measure(run: Path, backends: list[str], batch_size: int) -> list[dict]:
    import time

    rows = []
    contenders = [("torch", "fp32")] + [(backend, precision) for backend in backends
                                        for precision in ("fp32", "int8")]
    reports = {}
    for backend in backends:
        start = time.perf_counter()
        reports[backend] = cli_json("quantize", str(run), "--backend", backend)
        reports[backend]["quantize_s"] = time.perf_counter() - start
    for backend, precision in contenders:
        start = time.perf_counter()
        answer = cli_json("eval", str(run), "--runtime", backend, "--precision", precision, "--batch-size",
                          str(batch_size))
        seconds = time.perf_counter() - start
        figures = {name: answer.get(name, answer.get(f"test_{name}")) for name in FIGURES}
        rows.append({"runtime": backend, "precision": precision, **figures, "eval_s": seconds,
                     **({"kept_fp32": sorted(reports[backend].get("graphs", [{}])[0].get("fp32", {})),
                         "quantize_s": reports[backend]["quantize_s"]} if precision == "int8" else {})})
        print(json.dumps(rows[-1]), flush=True)
    fp32 = rows[0]
    for row in rows:
        row["map_50_minus_fp32"] = row["map_50"] - fp32["map_50"]
    return rows


def table_of(record: dict) -> str:
    from benchmarks.harness import cpu_and_isa

    lines = [f"{record['model']} on the scenes' test split ({record['run']})", "",
             "| runtime | precision | AP | AP50 | AP75 | AR@100 | AP50 − torch fp32 | eval s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in record["rows"]:
        lines.append(f"| {r['runtime']} | {r['precision']} | {r['map']:.4f} | {r['map_50']:.4f} | "
                     f"{r['map_75']:.4f} | {r['mar_100']:.4f} | {r['map_50_minus_fp32']:+.4f} | {r['eval_s']:.0f} |")
    kept = next((r["kept_fp32"] for r in record["rows"] if r.get("kept_fp32")), [])
    verdict = record["bar"]
    lines += ["", f"Kept in fp32 by the family: {', '.join(kept) or 'nothing'}.", "",
              f"Bar (int8 AP50 within 0.01 of fp32): {'met' if verdict['met'] else 'missed'}, worst "
              f"{verdict['worst']:+.4f}."]
    host = record["machine"]
    return "\n".join(lines) + f"\n\n{cpu_and_isa(host)}, {host['threads']} threads, torch {host['torch']}\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a detection run trained on the scenes (default: train one)")
    parser.add_argument("--model", default="deformable_detr_small")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--backends", nargs="+", default=["onnxruntime", "openvino"])
    parser.add_argument("--batch-size", type=int, default=8, help="evaluation batch")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch, onnxruntime")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="int8_detection")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vitlab-int8-detection-") as work:
        run = Path(args.run) if args.run else Path(work) / "run"
        if not args.run:
            from benchmarks.detr_scenes import ensure_scenes, run_detr

            data = ensure_scenes(Path(work) / "scenes" if args.quick else Path(args.data), args.quick)
            options = {"batch_size": 4, "lr": 2e-4, "backbone_lr": 2e-4, "dropout": 0.0}
            if args.quick:
                options.update(eval_batch_size=8, num_queries=8)
            run_detr(data, 1 if args.quick else args.epochs, options, str(run), model=args.model)
        backends = args.backends[:1] if args.quick else args.backends
        rows = measure(run, backends, args.batch_size)
    worst = min(row["map_50_minus_fp32"] for row in rows if row["precision"] == "int8")
    record = {"machine": machine(), "model": args.model, "run": args.run or f"trained here, {args.epochs} epochs",
              "rows": rows, "bar": {"max_ap50_drop": 0.01, "worst": worst, "met": worst >= -0.01}}
    write_results(Path(args.out), args.tag + ("_quick" if args.quick else ""), record, table_of(record),
                  beside=args.beside)
    return record


if __name__ == "__main__":
    main()
