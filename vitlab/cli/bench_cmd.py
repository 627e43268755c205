"""`vitlab bench [MODEL...]`: vitlab's speed against timm and Hugging Face (a thin front door to vitlab.bench)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="images/s of vitlab, timm and Hugging Face on the same ViT")
    p.add_argument("models", nargs="*", default=["vit_tiny_patch16_224"],
                   help="registered model names (default: vit_tiny_patch16_224)")
    p.add_argument("--batch", type=int, default=32, help="inference and training batch (default: 32)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per measurement (default: 5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the libraries (default: 3)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import LIBRARIES, Workload, measure

    try:
        import timm  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        raise ValueError("vitlab bench compares with timm and transformers: pip install timm transformers") from error
    print("| model | library | infer b1 img/s | infer img/s | train img/s | GFLOPs/img |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models:
        rows = measure(Workload(name, args.batch, args.batch), LIBRARIES, args.repeats, args.rounds)
        for row in rows:
            big = row[f"infer_b{args.batch}_img_s"]
            print(f"| {name} | {row['library']} | {row['infer_b1_img_s']:.1f} | {big:.1f} | "
                  f"{row['train_img_s']:.1f} | {row['gflops_per_image']:.3g} |")
    return 0
