"""`vitlab predict RUN_DIR IMAGE...`: the top-k classes of each image, with probabilities."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="classify image files with a trained run")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train`")
    p.add_argument("images", metavar="IMAGE", nargs="+", help="image files (any format Pillow reads)")
    p.add_argument("--top-k", type=int, default=3, help="how many classes to show per image (default: 3)")
    p.add_argument("--weights", choices=["last", "best"], default="last", help="which checkpoint (default: last)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..engine.session import load_run, predict_files

    model, info = load_run(args.run_dir, args.weights)
    results = predict_files(model, info, args.images, args.top_k)
    if args.json:
        print(json.dumps(results))
        return 0
    for item in results:
        ranked = ", ".join(f"{p['class']} {p['probability']:.3f}" for p in item["top_k"])
        print(f"{item['image']}: {ranked}")
    return 0
