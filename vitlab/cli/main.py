"""`vitlab <command>`: the command-line front door. Each command lives in its own `*_cmd.py` module (here for the
generic commands, in data/ and in the task packages for their own), registered in `vitlab.commands.COMMANDS` with
its parser and its `run(args)`; this file only wires them together."""

from __future__ import annotations

import argparse
import os
import sys

from ..commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="vitlab", description="Vision Transformers, from their parts.")
    parser.add_argument("--version", action="version", version=f"vitlab {__version__}")
    parser.add_argument("--offline", action="store_true", help=OFFLINE_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(subparsers)
    for command_parser in subparsers.choices.values():  # `vitlab train ... --offline` reads as well as before
        command_parser.add_argument("--offline", action="store_true", default=argparse.SUPPRESS, help=OFFLINE_HELP)
    return parser


OFFLINE_HELP = ("released weights from the Hugging Face cache only, never the network (as HF_HUB_OFFLINE=1); "
                "`vitlab download` fetches them ahead of time (default: off, or HF_HUB_OFFLINE)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from ..data.download import DownloadError
    from ..engine.speed import tune_process

    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"  # read where it matters (interop/hub.py), and by huggingface_hub's children
    tune_process()
    from ..engine.run import COMMAND_LINE

    token = COMMAND_LINE.set(["vitlab", *(sys.argv[1:] if argv is None else argv)])  # what a run records
    try:
        return int(args.run(args) or 0)
    except Exception as error:
        if not _said_to_the_user(error, DownloadError):
            raise
        # errors a user can cause carry a message that says what to do; no traceback needed. Library errors name
        # the parameter (`ema_decay`); here the user sees the flag (`--ema-decay`)
        message = error.as_flag() if hasattr(error, "as_flag") else os_error_text(error) or str(error)
        print(f"vitlab {args.command}: error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = " (a training run continues with --resume RUN_DIR)" if args.command == "train" else ""
        print(f"vitlab {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    finally:
        COMMAND_LINE.reset(token)


def _said_to_the_user(error: Exception, *more: type) -> bool:
    """Errors a user can cause, whose message says what to do; the hub's (a repo or file not found, offline) too,
    the operating system's (a path that cannot be read or written: os_error_text) and the file formats' (a
    damaged file that reached no reader of vitlab's, which would have said so: reading.py)."""
    user_errors = (ValueError, TypeError, OSError, ArithmeticError, EOFError, *more)
    return (isinstance(error, user_errors) or type(error).__module__.startswith("huggingface_hub")
            or type(error).__name__ in FORMAT_ERRORS)


# what the readers of the formats vitlab reads raise on a damaged file: safetensors', protobuf's (ONNX)
FORMAT_ERRORS = ("SafetensorError", "DecodeError")

# what to do about an operating system's error on a path, by its type
OS_ADVICE = {
    NotADirectoryError: "a part of this path is a file, not a folder; give a path inside a folder",
    IsADirectoryError: "this is a folder, where a file is wanted; give a file's path",
    PermissionError: "permission denied; give a path this user may read (or write), or change its permissions",
    FileExistsError: "a file is there where a folder is wanted, or the other way round; give another path",
    FileNotFoundError: "no such file or folder; check the path",
}


def os_error_text(error: Exception) -> str | None:
    """One line for an operating system's error on a path: the path, what went wrong, what to do; None for an error
    vitlab raised with its own message (no errno) or one that is not the operating system's."""
    if not isinstance(error, OSError) or error.errno is None:
        return None
    import errno

    advice = next((text for kind, text in OS_ADVICE.items() if isinstance(error, kind)), None)
    if error.errno == errno.ENOSPC:
        advice = "the disk is full; free some space and run the command again"
    elif error.errno == errno.EROFS:
        advice = "the file system is read-only; give a path on a writable one"
    paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
    what = error.strerror or type(error).__name__
    return f"{paths + ': ' if paths else ''}{what}" + (f" ({advice})" if advice else "")


if __name__ == "__main__":
    sys.exit(main())
