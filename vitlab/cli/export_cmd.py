"""`vitlab export RUN_DIR --format onnx|exported-program`: a trained model for deployment, batch size free."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained run (or a vitlab .safetensors file)")
    p.add_argument("source", metavar="RUN_DIR", help="run folder from `vitlab train`, or a vitlab .safetensors file")
    p.add_argument("--format", choices=["onnx", "exported-program"], default="onnx", help="(default: onnx)")
    p.add_argument("--out", help="file to write (default: RUN_DIR/model.onnx or RUN_DIR/model.pt2)")
    p.add_argument("--weights", choices=["last", "best"], default="last",
                   help="which checkpoint of a run folder (default: last)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..interop import load_model
    from ..interop.export import FORMATS, export_model

    source = Path(args.source)
    weights = source / f"{args.weights}.safetensors" if source.is_dir() else source
    if not weights.is_file():
        raise FileNotFoundError(f"no weights at {weights}: give a run folder from `vitlab train` or a .safetensors")
    folder = source if source.is_dir() else source.parent
    out = Path(args.out) if args.out else folder / f"model{FORMATS[args.format]}"
    path = export_model(load_model(weights), out, args.format)
    print(f"wrote {path} ({args.format}, input 'images' with a dynamic batch axis, output 'logits')")
    return 0
