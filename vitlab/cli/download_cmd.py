"""`vitlab download NAME... [--to DIR]`: fetch released weights ahead of time, into the Hugging Face cache (and a
plain copy in DIR), for a machine that will run offline."""

from __future__ import annotations

import argparse

from ..commands import command


@command("download", order=100)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("download", help="fetch released weights into the cache ahead of time")
    p.add_argument("names", nargs="+", metavar="NAME",
                   help="a release tag (vitlab models --pretrained) or hf-hub:org/name[@revision]")
    p.add_argument("--to", metavar="DIR", help="also copy each into DIR/<name>/ (its weights and config.json), a "
                   "folder to carry to the offline machine and give to --weights")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..interop.hub import cache_dir, download

    for name, path in zip(args.names, download(args.names, args.to), strict=True):
        print(f"{name}: {path}")
    if args.to is None:
        print(f"(in the Hugging Face cache, {cache_dir()}: every run on this machine finds them there, offline too)")
    return 0
