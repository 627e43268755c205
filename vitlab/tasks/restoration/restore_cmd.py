"""`vitlab restore RUN IMAGE... --degradation NAME --out DIR`: a restoration run's model applied to image files of
any size (tiled inference), the results written as PNG."""

from __future__ import annotations

import argparse
import json

from ...commands import command
from ...engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag
from ..runtime_flags import add_runtime_flags, on_runtime


@command("restore", order=150)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ...data.degradations import DEGRADATIONS
    from ...layers.tiling import BLENDS

    p = subparsers.add_parser("restore", help="restore images with a trained restoration run (super-resolve, "
                              "denoise, derain)")
    add_source_arguments(p, task=False)
    p.add_argument("images", metavar="IMAGE", nargs="+", help="image files (any format Pillow reads), any size")
    p.add_argument("--degradation", choices=DEGRADATIONS, help="what to undo: one of the run's tasks (default: its "
                   "first)")
    p.add_argument("--out", metavar="DIR", required=True, help="write NAME_DEGRADATION.png here")
    p.add_argument("--reference", metavar="DIR", help="clean images with the same names: print PSNR/SSIM against "
                   "them, and the input's (default: none)")
    p.add_argument("--batch-size", type=int, help="tiles per forward pass: more is faster, less holds less memory "
                   "(default: the run's --eval-batch-size)")
    p.add_argument("--overlap", type=int, help="pixels neighbouring tiles share (default: the run's)")
    p.add_argument("--blend", choices=BLENDS, help="how overlapping tiles combine: window, centre or mean (default: "
                   "the run's)")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    add_runtime_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from ..sources import open_source

    source = open_source(args.run_dir, weights=args.weights, command="restore")
    task, saved = source.task, source.saved
    changes = {key: value for key, value in (("eval_batch_size", args.batch_size), ("overlap", args.overlap),
                                                 ("blend", args.blend))
               if value is not None}
    task.config = dataclasses.replace(task.config, **changes)
    model = on_runtime(source.model, args, source)
    results = task.predict(model, saved, args.images, out=args.out, degradation=args.degradation,
                           reference=args.reference)
    print(json.dumps(results) if args.json else "\n".join(task.format_prediction(item) for item in results))
    return 0
