"""`vitlab reconstruct RUN IMAGE... --out DIR`: images through a VQGAN run's autoencoder (or a prior run's VQGAN)."""

from __future__ import annotations

import argparse
import json

from ...commands import command
from ...engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag


@command("reconstruct", order=170)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    r = subparsers.add_parser("reconstruct", help="encode images to codes and decode them with a trained VQGAN run")
    add_source_arguments(r, task=False)  # a vqgan run (a prior run: its VQGAN), or a VQGAN by name
    r.add_argument("images", metavar="IMAGE", nargs="+", help="image files (any format Pillow reads), resized to the "
                   "run's images")
    r.add_argument("--out", metavar="DIR", required=True, help="write NAME_reconstruction.png (input | output) here")
    add_weights_flag(r, None, SELECTED_WEIGHTS)
    r.add_argument("--json", action="store_true", help="print the results as JSON (with the code grid) "
                   "(default: text)")
    r.set_defaults(run=run_reconstruct)


def run_reconstruct(args: argparse.Namespace) -> int:
    from ..sources import open_source
    from .inference import format_reconstruction, reconstruct_files

    source = open_source(args.run_dir, weights=args.weights, command="reconstruct")
    results = reconstruct_files(source.task, source.model, source.saved, args.images, args.out)
    print(json.dumps(results) if args.json else "\n".join(format_reconstruction(item) for item in results))
    return 0
