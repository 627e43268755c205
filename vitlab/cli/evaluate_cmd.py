"""`vitlab eval RUN_DIR`: accuracy, per-class accuracy and confusion matrix of a trained run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="evaluate a trained run on its test data (or other data)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train`")
    p.add_argument("--data", help="'fashion-mnist' or an image folder (default: the run's own data)")
    p.add_argument("--data-dir", help="where Fashion-MNIST's files are (default: the run's, then the usual places)")
    p.add_argument("--weights", choices=["last", "best"], default="last", help="which checkpoint (default: last)")
    p.add_argument("--batch-size", type=int, default=256, help="evaluation batch size (default: 256)")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast; refused where the device has no native bf16 (there it is many times "
                   "slower) (default: off, fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (pays on large test sets) "
                   "(default: off)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="do not write confusion.png (default: write)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..engine.evaluate import evaluate
    from ..engine.reports import confusion_text, plot_confusion
    from ..engine.session import eval_loader_for_run, load_run
    from ..engine.speed import check_bf16, maybe_compile

    if args.bf16:
        check_bf16("cpu")
    model, info = load_run(args.run_dir, args.weights)
    loader, classes = eval_loader_for_run(info, args.data, args.data_dir, args.batch_size)
    result = evaluate(maybe_compile(model, args.compile), loader, bf16=args.bf16, num_classes=len(classes))
    result["classes"] = classes
    result["run_dir"] = str(args.run_dir)
    if args.plot:
        name = "confusion.png" if args.data is None else "confusion-other-data.png"  # keep the run's own picture
        png = plot_confusion(result["confusion"], classes, Path(args.run_dir) / name)
        result["confusion_png"] = str(png)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"accuracy: {result['accuracy']:.4f} on {result['num_images']} images ({args.run_dir}, {args.weights})")
    print("per-class accuracy:")
    for name, acc in zip(classes, result["per_class_accuracy"]):
        print(f"  {name:<20} {acc:.4f}")
    print("confusion matrix (rows: true class, columns: predicted):")
    print(confusion_text(result["confusion"], classes))
    return 0
