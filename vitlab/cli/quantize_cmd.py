"""`vitlab quantize RUN_DIR --backend onnxruntime|openvino`: a trained run's graphs in int8, calibrated on its
validation data, with what int8 costs its answers measured there (tasks/int8.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..commands import command
from ..engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag


@command("quantize", order=80)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..runtime.quantize import DEFAULT_SAMPLES

    p = subparsers.add_parser("quantize", help="int8 graphs of a trained run for onnxruntime or openvino, with the "
                              "answers they keep measured on its validation data")
    add_source_arguments(p, task=False)
    p.add_argument("--backend", choices=["onnxruntime", "openvino"], default="onnxruntime",
                   help="the runtime the graphs are for: onnxruntime (its static quantization, QDQ) or openvino "
                        "(NNCF's post-training quantization) (default: onnxruntime)")
    p.add_argument("--calibration", metavar="DATA", help="calibrate on this data, in the run's format (what `vitlab "
                   "eval --data` takes) (default: the run's validation data; a model by name needs it, and is "
                   "measured on it)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="calibration inputs per graph: images, or "
                   f"a restorer's tiles (default: {DEFAULT_SAMPLES})")
    p.add_argument("--out", metavar="DIR", help="where the int8 graphs and the report go (default: RUN_DIR/runtime, "
                   "where --precision int8 finds them)")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.add_argument("--keep-fp32", action="append", metavar="PATTERN", help="a module path kept in fp32 beside the "
                   "family's own choice, e.g. head or 'blocks.11.*' (repeatable)")
    p.add_argument("--dynamic", action="store_true", help="onnxruntime: no calibration, activations scaled on each "
                   "call (matrix products only)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (default: text)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tasks.int8 import format_report, quantize_run

    if args.dynamic and args.backend != "onnxruntime":
        raise ValueError("--dynamic: only onnxruntime quantizes without calibration; drop it for openvino")
    if args.out and args.calibration:
        from ..engine.run import refuse_overlap

        refuse_overlap(Path(args.out), [("calibration", Path(args.calibration))])
    report = quantize_run(args.run_dir, args.backend, args.calibration, args.samples, args.out, args.weights,
                          args.keep_fp32, args.dynamic)
    print(json.dumps(report) if args.json else format_report(report))
    return 0
