"""What bf16 inference costs in answers: a trained Fashion-MNIST run's 10,000 test images through each runtime in
fp32 and bf16, the top-1 agreement of each with torch fp32, the largest logit difference, accuracy and images/s.

    python benchmarks/bf16_agreement.py runs/fashion-mnist          # after `vitlab train --out runs/fashion-mnist`

Writes benchmarks/results/bf16_agreement.{json,md}. bf16 rows are left out where the CPU has no native bf16.
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
    parser.add_argument("--weights", default="last", choices=("last", "best", "ema"))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--tag", default="bf16_agreement")
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
    model = RunDir(args.run).load_model(args.weights)
    loader, classes, _ = eval_loader_for_run(task, saved, batch_size=args.batch_size)
    batches = [(x, y) for x, y in loader]
    labels = torch.cat([y for _, y in batches])
    precisions = ["fp32", "bf16"] if bf16_supported("cpu") else ["fp32"]
    rows, reference = [], None
    for backend in ("torch", "openvino", "onnxruntime"):
        for precision in precisions:
            if backend == "onnxruntime" and precision == "bf16":
                continue  # fp32 only (runtime/backends.py)
            engine = runtime.load(model, backend=backend, precision=precision)
            engine(batches[0][0])  # export and compile outside the clock
            start = time.perf_counter()
            logits = torch.cat([torch.as_tensor(engine(x)).float() for x, _ in batches])
            seconds = time.perf_counter() - start
            if reference is None:
                reference = logits
            top1 = logits.argmax(1)
            rows.append({"runtime": backend, "precision": precision,
                         "accuracy": float((top1 == labels).float().mean()),
                         "top1_agreement_with_torch_fp32": float((top1 == reference.argmax(1)).float().mean()),
                         "disagreeing_images": int((top1 != reference.argmax(1)).sum()),
                         "max_abs_logit_diff": float((logits - reference).abs().max()),
                         "images_per_s": len(labels) / seconds})
            print(rows[-1], flush=True)
    host = machine()
    lines = [f"# bf16 against fp32 on the Fashion-MNIST test set ({len(labels)} images)", "",
             f"`python benchmarks/bf16_agreement.py RUN`, {saved['config'].get('model', model.config)} "
             f"({args.weights} weights); {host['cpu']}, {host['threads']} threads, native bf16: "
             f"{host['bf16_native']}", "",
             "| runtime | precision | accuracy | top-1 agreement with torch fp32 | images that differ | "
             "max \\|Δ logit\\| | images/s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['runtime']} | {r['precision']} | {r['accuracy']:.4f} | "
                     f"{r['top1_agreement_with_torch_fp32']:.4f} | {r['disagreeing_images']} | "
                     f"{r['max_abs_logit_diff']:.2e} | {r['images_per_s']:.0f} |")
    result = {"machine": host, "run": str(args.run), "weights": args.weights, "rows": rows}
    write_results(args.out, args.tag, result, "\n".join(lines) + "\n", beside=args.beside)
    return result


if __name__ == "__main__":
    main()
