"""What bf16 and int8 inference cost in answers: a trained Fashion-MNIST run's 10,000 test images through each
runtime in fp32, bf16 and int8, the top-1 agreement of each with torch fp32, the largest logit difference, accuracy
and images/s.

    python benchmarks/bf16_agreement.py runs/fashion-mnist          # after `vitlab train --out runs/fashion-mnist`
    python benchmarks/bf16_agreement.py runs/fashion-mnist --int8   # + `vitlab quantize`'s graphs, both backends

Writes benchmarks/results/bf16_agreement.{json,md} (with --int8: int8_agreement.{json,md}). bf16 rows are left out
where the CPU has no native bf16. The int8 graphs are calibrated on the run's validation data, as `vitlab quantize`
does by default, whose own report (the same figures on the validation data) is recorded beside; the test images
are read once, here, for the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a classification run on Fashion-MNIST")
    parser.add_argument("--weights", default="best", choices=("last", "best", "ema"),
                        help="the run's weights (default: best on validation, as `vitlab eval`)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--int8", action="store_true", help="also int8 on onnxruntime and openvino, quantized here "
                        "(`vitlab quantize RUN --backend ...`, calibrated on the validation data)")
    parser.add_argument("--samples", type=int, help="calibration images per graph (default: vitlab quantize's)")
    parser.add_argument("--tag", help="results file name (default: bf16_agreement, with --int8 int8_agreement)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness.host import add_beside_option, machine

    add_beside_option(parser)
    args = parser.parse_args(argv)
    import torch

    from benchmarks.harness.reporting import write_results
    from vitlab import runtime
    from vitlab.engine.run import RunDir
    from vitlab.engine.speed import bf16_supported, tune_process
    from vitlab.tasks import load_task
    from vitlab.tasks.classification.inference import eval_loader_for_run

    tune_process()
    task, saved = load_task(args.run)
    weights = RunDir(args.run).kept_weights(args.weights)
    model = RunDir(args.run).load_model(weights)
    loader, classes, _ = eval_loader_for_run(task, saved, batch_size=args.batch_size)
    batches = [(x, y) for x, y in loader]
    labels = torch.cat([y for _, y in batches])
    precisions = ["fp32", "bf16"] if bf16_supported("cpu") else ["fp32"]
    quantized = {}
    if args.int8:
        from vitlab.tasks.int8 import DEFAULT_SAMPLES, quantize_run

        for backend in ("onnxruntime", "openvino"):
            quantized[backend] = quantize_run(args.run, backend, samples=args.samples or DEFAULT_SAMPLES,
                                              weights=weights)
        precisions.append("int8")
    rows, reference = [], None
    for backend in ("torch", "openvino", "onnxruntime"):
        for precision in precisions:
            if (backend, precision) in (("onnxruntime", "bf16"), ("torch", "int8")):
                continue  # onnxruntime runs fp32 and int8, torch fp32 and bf16 (runtime/backends.py)
            # the run's own graphs: the fp32 graph the int8 one was quantized from, exported once
            engine = runtime.load(args.run, backend, weights=weights, precision=precision)
            engine(batches[0][0])  # export and compile outside the clock
            start = time.perf_counter()
            logits = torch.cat([torch.as_tensor(engine(x)).float() for x, _ in batches])
            seconds = time.perf_counter() - start
            if reference is None:
                reference = logits
            top1 = logits.argmax(1)
            # counted in whole images, so the figures are exact fractions of the same test set
            correct, same = int((top1 == labels).sum()), int((top1 == reference.argmax(1)).sum())
            rows.append({"runtime": backend, "precision": precision,
                         "accuracy": correct / len(labels),
                         "top1_agreement_with_torch_fp32": same / len(labels),
                         "disagreeing_images": len(labels) - same,
                         "max_abs_logit_diff": float((logits - reference).abs().max()),
                         "images_per_s": len(labels) / seconds})
            print(rows[-1], flush=True)
    host = machine()
    lines = [f"# {' and '.join(p for p in precisions if p != 'fp32') or 'each runtime'} against fp32 on the test set "
             f"({len(labels)} images)", "",
             f"`python benchmarks/bf16_agreement.py RUN{' --int8' if args.int8 else ''}`, "
             f"{saved['config'].get('model', model.config)} ({weights} weights); {host['cpu']} "
             f"({host['cpu_capability']}), {host['threads']} threads, native bf16: {host['bf16_native']}", "",
             "| runtime | precision | accuracy | top-1 agreement with torch fp32 | images that differ | "
             "max \\|Δ logit\\| | images/s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['runtime']} | {r['precision']} | {r['accuracy']:.4f} | "
                     f"{r['top1_agreement_with_torch_fp32']:.4f} | {r['disagreeing_images']} | "
                     f"{r['max_abs_logit_diff']:.2e} | {r['images_per_s']:.0f} |")
    for backend, report in quantized.items():
        kept = sorted({pattern for graph in report["graphs"] for pattern in graph["fp32"]})
        lines.append(f"\n{backend} int8 on the validation data (`vitlab quantize`'s report): top-1 agreement "
                     f"{report['agreement']:.4f}, accuracy {report['fp32']['accuracy']:.4f} fp32 and "
                     f"{report['int8']['accuracy']:.4f} int8; kept in fp32: {', '.join(kept) or 'nothing more'}")
    result = {"machine": host, "run": str(args.run), "weights": weights, "rows": rows,
              "quantize_reports": quantized}
    tag = args.tag or ("int8_agreement" if args.int8 else "bf16_agreement")
    write_results(args.out, tag, result, "\n".join(lines) + "\n", beside=args.beside)
    return result


if __name__ == "__main__":
    main()
