"""`vitlab predict RUN_DIR INPUT...`: what a trained run makes of each input, by the run's task: the top-k classes
of image files (classification), the output tokens of source sequences (seq2seq)."""

from __future__ import annotations

import argparse
import json

from .runtime_flags import add_runtime_flags, on_runtime


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="predict with a trained run (classify image files, translate "
                              "sequences)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train`")
    p.add_argument("inputs", metavar="INPUT", nargs="+", help="image files (any format Pillow reads), or for a "
                   "seq2seq run source sequences such as \"3 1 4\"")
    p.add_argument("--top-k", type=int, default=3, help="how many classes to show per image (default: 3)")
    p.add_argument("--beam-size", type=int, default=1, help="seq2seq: 1 greedy, more: beam search (default: 1)")
    p.add_argument("--weights", choices=["last", "best", "ema"], default="last",
                   help="which checkpoint (default: last)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    add_runtime_flags(p)
    detection = p.add_argument_group("detection and segmentation")
    detection.add_argument("--out", metavar="DIR", help="detection: write each image with its boxes drawn here, as "
                           "NAME.png; segmentation: its class mask (NAME_mask.png, a palette PNG of class indices) and "
                           "an overlay (NAME_overlay.png) (default: write nothing)")
    detection.add_argument("--threshold", type=float, default=0.5, help="show detections scoring above this "
                           "(default: 0.5)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..engine.run import RunDir
    from ..tasks import load_task

    if args.top_k < 1 or args.beam_size < 1:
        raise ValueError(f"--top-k and --beam-size must be at least 1, got {args.top_k} and {args.beam_size}")
    task, saved = load_task(args.run_dir)
    model = RunDir(args.run_dir).load_model(args.weights)
    if task.name != "seq2seq":
        model = on_runtime(model, args, args.run_dir, args.weights)
    elif args.runtime != "torch":
        raise ValueError("a seq2seq run decodes in a Python loop: it runs on --runtime torch only")
    results = task.predict(model, saved, args.inputs, top_k=args.top_k, beam_size=args.beam_size, out=args.out,
                           threshold=args.threshold)
    print(json.dumps(results) if args.json else "\n".join(task.format_prediction(item) for item in results))
    return 0
