"""`vitlab train-seq2seq` and `vitlab translate`: the original Transformer on toy sequence tasks."""

from __future__ import annotations

import argparse
import dataclasses

from ..data.sequences import TASKS, TEST_SPLITS


def _defaults():
    from ..engine.seq2seq import Seq2SeqTrainOptions

    return {f.name: f.default for f in dataclasses.fields(Seq2SeqTrainOptions)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    d = _defaults()
    p = subparsers.add_parser(
        "train-seq2seq", help="train the original encoder-decoder Transformer on a toy sequence task",
        description="Train an encoder-decoder Transformer (Vaswani et al. 2017) on sequences a task generator "
                    "draws, and report exact-sequence accuracy on held-out sequences.",
    )
    p.add_argument("--task", choices=TASKS, default=d["task"], help=f"what to learn (default: {d['task']})")
    p.add_argument("--out", help="run folder to write (default: runs/seq2seq-TASK-TIMESTAMP)")
    p.add_argument("--num-symbols", type=int, default=d["num_symbols"],
                   help=f"vocabulary: symbols 0 … N-1; for add, the base (default: {d['num_symbols']})")
    p.add_argument("--min-len", type=int, help="shortest source; for add, digits per operand (default: 1)")
    p.add_argument("--max-len", type=int, help="longest source; for add, digits per operand "
                   "(default: 10; add: 5)")
    p.add_argument("--test-split", choices=TEST_SPLITS, default=d["test_split"],
                   help="held-out sequences: 'unseen' (same lengths, never trained on) or 'longer' "
                   f"(max-len+1 … max-len+4) (default: {d['test_split']})")
    p.add_argument("--test-size", type=int, default=d["test_size"], help=f"held-out pairs (default: {d['test_size']})")
    p.add_argument("--dim", type=int, default=d["dim"], help=f"d_model (default: {d['dim']})")
    p.add_argument("--depth", type=int, default=d["depth"],
                   help=f"encoder and decoder blocks each (default: {d['depth']})")
    p.add_argument("--num-heads", type=int, default=d["num_heads"], help=f"(default: {d['num_heads']})")
    p.add_argument("--mlp-ratio", type=float, default=d["mlp_ratio"],
                   help=f"d_ff / d_model (default: {d['mlp_ratio']})")
    p.add_argument("--dropout", type=float, default=d["dropout"], help=f"(default: {d['dropout']})")
    p.add_argument("--norm", choices=["post", "pre"], default=d["norm"],
                   help=f"post-norm as in the paper, or pre-norm (default: {d['norm']})")
    p.add_argument("--pos-embed", choices=["sincos", "learn"], default=d["pos_embed"],
                   help=f"fixed sinusoidal encoding or a learned table (default: {d['pos_embed']})")
    p.add_argument("--untied", dest="tie_embeddings", action="store_false",
                   help="separate source, target and output tables (default: one shared table)")
    p.add_argument("--steps", type=int, help=f"optimizer steps (default: {d['steps']}; resumed runs: as before)")
    p.add_argument("--batch-size", type=int, default=d["batch_size"], help=f"(default: {d['batch_size']})")
    p.add_argument("--schedule", choices=["inverse_sqrt", "cosine"], default=d["schedule"],
                   help="the paper's Adam with warm-up then 1/√step, or AdamW with warm-up then cosine "
                   f"(default: {d['schedule']})")
    p.add_argument("--lr", type=float, default=d["lr"],
                   help=f"peak learning rate, at the end of the warm-up (default: {d['lr']})")
    p.add_argument("--warmup-steps", type=int, default=d["warmup_steps"], help=f"(default: {d['warmup_steps']})")
    p.add_argument("--weight-decay", type=float, default=d["weight_decay"],
                   help=f"AdamW weight decay, cosine schedule only (default: {d['weight_decay']})")
    p.add_argument("--label-smoothing", type=float, default=d["label_smoothing"],
                   help=f"(default: {d['label_smoothing']})")
    p.add_argument("--clip-grad", type=float, default=d["clip_grad"], help=f"max gradient norm, 0 = off "
                   f"(default: {d['clip_grad']})")
    p.add_argument("--eval-every", type=int, default=d["eval_every"],
                   help=f"steps between held-out evaluations and checkpoints (default: {d['eval_every']})")
    p.add_argument("--seed", type=int, default=d["seed"], help=f"(default: {d['seed']})")
    p.add_argument("--threads", type=int, help=f"torch CPU threads; 0: torch's choice (default: {d['threads']}, "
                   "fastest for models this small)")
    p.add_argument("--overwrite", action="store_true", help="start over in an --out folder that holds a run")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its last checkpoint; only "
                   "--steps and --threads may change")
    p.set_defaults(run=run_train)

    t = subparsers.add_parser("translate", help="decode one input with a trained seq2seq run",
                              description="Decode one input with a run of `vitlab train-seq2seq`; the output "
                                          "tokens are printed, separated by spaces, on the last line.")
    t.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train-seq2seq`")
    t.add_argument("text", metavar="INPUT", help='source tokens separated by spaces, e.g. "3 1 4 1 5"')
    t.add_argument("--beam-size", type=int, default=1, help="1: greedy; more: beam search (default: 1)")
    t.set_defaults(run=run_translate)


def run_train(args: argparse.Namespace) -> int:
    from ..engine.seq2seq import Seq2SeqTrainOptions, resume_options, train_seq2seq

    if args.resume:
        options = resume_options(args.resume, steps=args.steps, threads=args.threads)
    else:
        fields = {f.name for f in dataclasses.fields(Seq2SeqTrainOptions)}
        options = Seq2SeqTrainOptions(**{k: v for k, v in vars(args).items()
                                         if k in fields and k != "resume" and v is not None})
    result = train_seq2seq(options)
    print(f"run folder: {result['run_dir']}")
    if "test_exact_acc" in result:
        print(f"held-out exact-sequence accuracy: {result['test_exact_acc']:.4f} after {result['step']} steps, "
              f"{result['elapsed_s'] / 60:.1f} min of training and evaluation")
    return 0


def run_translate(args: argparse.Namespace) -> int:
    from ..engine.seq2seq import load_seq2seq_run, translate

    if args.beam_size < 1:
        raise ValueError(f"--beam-size must be at least 1, got {args.beam_size}")
    model, task = load_seq2seq_run(args.run_dir)
    print(" ".join(translate(model, task, args.text, beam_size=args.beam_size)))
    return 0
