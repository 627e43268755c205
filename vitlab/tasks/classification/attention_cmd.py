"""`vitlab attention RUN_DIR IMAGE... --out DIR` and `vitlab inspect RUN_DIR --out DIR`: pictures of what a
trained ViT looks at, and of what it learned (position embeddings, patch filters)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...commands import command
from ...engine.flags import SELECTED_WEIGHTS, add_source_arguments, add_weights_flag


@command("attention", order=40)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "attention", help="attention rollout and per-head maps of images",
        description="For each image a PNG strip: the input, the attention rollout over it, then the class-token "
                    "attention of each head of one layer; every panel is the input's resolution times a whole "
                    "factor (small images are enlarged to at least 224 pixels).",
    )
    add_source_arguments(p, task=False)
    p.add_argument("images", metavar="IMAGE", nargs="+", help="image files")
    p.add_argument("--out", required=True, help="folder for the PNG files (default: none, required)")
    p.add_argument("--layer", type=int, default=-1, help="layer of the per-head maps, negative from the end "
                   "(default: -1, the last)")
    p.add_argument("--head-fusion", choices=["mean", "max", "min"], default="mean",
                   help="how rollout combines the heads of a layer (default: mean)")
    p.add_argument("--discard-ratio", type=float, default=0.0,
                   help="share of the lowest attentions zeroed in each row before rollout (default: 0.0)")
    add_weights_flag(p, None, SELECTED_WEIGHTS)
    p.set_defaults(run=run_attention)


@command("inspect", order=45)
def add_inspect_parser(subparsers: argparse._SubParsersAction) -> None:
    q = subparsers.add_parser("inspect", help="position-embedding similarity and patch-filter components")
    add_source_arguments(q, task=False)
    q.add_argument("--out", required=True, help="folder for the PNG files (default: none, required)")
    add_weights_flag(q, None, SELECTED_WEIGHTS)
    q.set_defaults(run=run_inspect)


def _open(run_dir: str, weights: str | None, command: str):
    from ..sources import open_source

    return open_source(run_dir, weights=weights, command=command)


def run_attention(args: argparse.Namespace) -> int:
    from ...atomic import output_files
    from ...data.images import INPUT_HINT, read_image
    from ...viz.attention import image_attention
    from ...viz.render import attention_strip, save_png
    from ..base import class_names
    from .inference import preprocessing_of

    source = _open(args.run_dir, args.weights, "attention")
    model, preprocessing = source.model, preprocessing_of(source.saved["data"])
    if not hasattr(model, "blocks"):
        raise ValueError(f"{args.run_dir} is not a Vision Transformer (it has no attention blocks): `vitlab attention` "
                         f"draws a ViT's or a DeiT's attention")
    if not -len(model.blocks) <= args.layer < len(model.blocks):
        raise ValueError(f"--layer must be in {-len(model.blocks)}..{len(model.blocks) - 1}, got {args.layer}")
    labels = class_names(model, source.saved)
    for path, (target,) in zip(args.images, output_files(args.images, args.out, "_attention")):
        image = read_image(path, preprocessing.channels, hint=INPUT_HINT)
        shown, rollout, heads, probs = image_attention(model, image, preprocessing, args.head_fusion,
                                                       args.discard_ratio, args.layer)
        written = save_png(attention_strip(shown, rollout, heads), target)
        print(f"{written}: predicted {labels[int(probs.argmax())]} ({float(probs.max()):.3f}); panels: input, "
              f"rollout ({args.head_fusion}), layer {args.layer} heads 0..{heads.shape[0] - 1}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from ...viz.inspect import plot_filter_components, plot_position_similarity

    model = _open(args.run_dir, args.weights, "inspect").model
    out = Path(args.out)
    if model.pos_embed is not None:
        print(f"wrote {plot_position_similarity(model, out / 'position_similarity.png')}")
    else:
        print("no position embeddings in this model (pos_embed='none'): skipped their similarity")
    print(f"wrote {plot_filter_components(model, out / 'patch_filters_pca.png')}")
    return 0
