"""`vitlab translate RUN "3 1 4 1 5"`: one input decoded by a seq2seq run (the original Transformer on a toy sequence
problem; `vitlab train --task seq2seq --problem P` trains one)."""

from __future__ import annotations

import argparse

from ...commands import command
from ...engine.flags import SELECTED_WEIGHTS


@command("translate", order=120)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    t = subparsers.add_parser("translate", help="decode one input with a trained seq2seq run",
                              description="Decode one input with a run of `vitlab train --task seq2seq`; the output "
                                          "tokens are printed, separated by spaces, on the last line.")
    t.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train --task seq2seq`")
    t.add_argument("text", metavar="INPUT", help='source tokens separated by spaces, e.g. "3 1 4 1 5"')
    t.add_argument("--beam-size", type=int, default=1, help="1: greedy; more: beam search (default: 1)")
    t.add_argument("--weights", choices=["last", "best"], help=f"which checkpoint (default: {SELECTED_WEIGHTS})")
    t.set_defaults(run=run_translate)


def run_translate(args: argparse.Namespace) -> int:
    from . import load_seq2seq_run, translate

    if args.beam_size < 1:
        raise ValueError(f"--beam-size must be at least 1, got {args.beam_size}")
    model, problem = load_seq2seq_run(args.run_dir, args.weights)
    print(" ".join(translate(model, problem, args.text, beam_size=args.beam_size)))
    return 0
