"""`vitlab sample RUN --out grid.png`: class-conditional samples of a prior run, as one picture."""

from __future__ import annotations

import argparse
import json

from ...commands import command
from ...engine.flags import SELECTED_WEIGHTS, add_weights_flag


@command("sample", order=160)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sample", help="draw images from a trained prior run (VQGAN stage 2)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train --task prior`")
    p.add_argument("--class", dest="class_index", type=int, metavar="C", help="draw this class only (its index) "
                   "(default: every class, one row each)")
    p.add_argument("--n", type=int, default=16, help="samples (of each class without --class) (default: 16)")
    p.add_argument("--temperature", type=float, default=1.0, help="softmax temperature; 0 takes the most likely "
                   "code (default: 1.0)")
    p.add_argument("--top-k", type=int, help="sample among the k most likely codes (default: all)")
    p.add_argument("--top-p", type=float, help="sample among the most likely codes that make up probability p "
                   "(default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default: 0)")
    p.add_argument("--no-cache", dest="use_cache", action="store_false", help="recompute the whole prefix at every "
                   "step instead of keeping keys and values (the same samples, slower) (default: cache)")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.add_argument("--out", metavar="PNG", required=True, help="the picture to write")
    p.add_argument("--json", action="store_true", help="print the result as JSON (default: text)")
    p.set_defaults(run=run_sample)


def run_sample(args: argparse.Namespace) -> int:
    from ..launch import load_for_command
    from .inference import sample_grid

    if args.n < 1:
        raise ValueError(f"--n must be at least 1, got {args.n}")
    task, model, saved = load_for_command(args.run_dir, args.weights, "sample")
    result = sample_grid(task, model, saved, args.out, args.class_index, args.n, args.temperature, args.top_k,
                         args.top_p, args.seed, args.use_cache)
    print(json.dumps(result) if args.json else f"{result['samples']} samples of {', '.join(result['classes'])} "
          f"-> {result['out']}")
    return 0
