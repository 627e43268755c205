"""`vitlab fetch-photos --out DIR`: the restoration photographs, from Debian's wallpaper packages."""

from __future__ import annotations

import argparse

from ..commands import command


@command("fetch-photos", order=140)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fetch-photos", help="get the 49 photographs (39 train, 10 test) that restoration trains and tests on",
        description="Download five Debian wallpaper packages with `apt-get download` (about 195 MB, no root needed, "
                    "nothing installed), keep only the 49 camera photographs listed in vitlab/data/photos.json "
                    "(about 49 MB), each checked against its SHA-256. Photographs already there are kept.")
    p.add_argument("--out", default="data/photos", help="folder to write, one subfolder per package")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .photos import fetch_photos, manifest

    paths = fetch_photos(args.out)
    counts = {split: sum(1 for p in manifest() if p.split == split) for split in ("train", "test")}
    print(f"{len(paths)} photographs in {args.out}: {counts['train']} train, {counts['test']} test")
    return 0
