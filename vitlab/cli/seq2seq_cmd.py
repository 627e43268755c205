"""`vitlab train-seq2seq` (the old name of `vitlab train --task seq2seq`, where --task names the problem) and
`vitlab translate`: the original Transformer on toy sequence problems."""

from __future__ import annotations

import argparse

from ..engine.config import LoopConfig
from .options import SELECTED_WEIGHTS, add_config_options, given


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..tasks.seq2seq import Seq2SeqConfig, Seq2SeqTask
    from .train import add_run_options, loop_default_texts

    p = subparsers.add_parser(
        "train-seq2seq", help="train the original encoder-decoder Transformer on a toy sequence problem (= vitlab "
        "train --task seq2seq; here --task names the problem)",
        description="Train an encoder-decoder Transformer (Vaswani et al. 2017) on sequences a problem generator "
                    "draws, and report exact-sequence accuracy on held-out sequences. The same as `vitlab train "
                    "--task seq2seq --problem P`.",
    )
    add_run_options(p)
    add_config_options(p.add_argument_group("the problem and the model"), Seq2SeqConfig, rename={"problem": "--task"})
    add_config_options(p.add_argument_group("training"), LoopConfig, default_texts=loop_default_texts([Seq2SeqTask]))
    p.set_defaults(run=run_train)

    t = subparsers.add_parser("translate", help="decode one input with a trained seq2seq run",
                              description="Decode one input with a run of `vitlab train --task seq2seq`; the output "
                                          "tokens are printed, separated by spaces, on the last line.")
    t.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train --task seq2seq`")
    t.add_argument("text", metavar="INPUT", help='source tokens separated by spaces, e.g. "3 1 4 1 5"')
    t.add_argument("--beam-size", type=int, default=1, help="1: greedy; more: beam search (default: 1)")
    t.add_argument("--weights", choices=["last", "best"], help=f"which checkpoint (default: {SELECTED_WEIGHTS})")
    t.set_defaults(run=run_translate)


def run_train(args: argparse.Namespace) -> int:
    from ..tasks.seq2seq import Seq2SeqTask
    from .train import train_and_report

    return train_and_report(Seq2SeqTask.name, given(args))


def run_translate(args: argparse.Namespace) -> int:
    from ..tasks.seq2seq import load_seq2seq_run, translate

    if args.beam_size < 1:
        raise ValueError(f"--beam-size must be at least 1, got {args.beam_size}")
    model, problem = load_seq2seq_run(args.run_dir, args.weights)
    print(" ".join(translate(model, problem, args.text, beam_size=args.beam_size)))
    return 0
