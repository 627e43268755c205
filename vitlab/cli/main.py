"""`vitlab <command>`: the command-line front door. Each command lives in its own module with
`add_parser(subparsers)` and `run(args)`; this file only wires them together."""

from __future__ import annotations

import argparse
import sys

from . import (
    attention_cmd,
    bench_cmd,
    check_data_cmd,
    convert_cmd,
    demo,
    evaluate_cmd,
    export_cmd,
    generate_cmd,
    models_cmd,
    photos_cmd,
    predict,
    restore_cmd,
    scenes_cmd,
    seq2seq_cmd,
    serve_cmd,
    train,
)

COMMANDS = [train, evaluate_cmd, predict, attention_cmd, check_data_cmd, convert_cmd, export_cmd, bench_cmd, models_cmd,
            demo, seq2seq_cmd, scenes_cmd, photos_cmd, restore_cmd, generate_cmd, serve_cmd]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="vitlab", description="Vision Transformers, from their parts.")
    parser.add_argument("--version", action="version", version=f"vitlab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from ..data.download import DownloadError
    from ..engine.speed import tune_process

    if args.command != "bench":  # the benchmark sets these itself (--cpu-settings), the same for every library
        tune_process()
    try:
        return int(args.run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, DownloadError, ArithmeticError) as error:
        # errors a user can cause carry a message that says what to do; no traceback needed. Library errors name
        # the parameter (`ema_decay`); here the user sees the flag (`--ema-decay`)
        message = error.as_flag() if hasattr(error, "as_flag") else str(error)
        print(f"vitlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = " (a training run continues with --resume RUN_DIR)" if args.command == "train" else ""
        print(f"vitlab {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
