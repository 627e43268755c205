"""`vitlab attention RUN_DIR IMAGE... --out DIR` and `vitlab inspect RUN_DIR --out DIR`: pictures of what a
trained ViT looks at, and of what it learned (position embeddings, patch filters)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..commands import command
from ..engine.flags import SELECTED_WEIGHTS, add_weights_flag


@command("attention", order=40)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "attention", help="attention rollout and per-head maps of images",
        description="For each image a PNG strip: the input, the attention rollout over it, then the class-token "
                    "attention of each head of one layer; every panel is the input's resolution times a whole "
                    "factor (small images are enlarged to at least 224 pixels).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run folder from `vitlab train` (or a vitlab .safetensors)")
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
    q.add_argument("run_dir", metavar="RUN_DIR", help="run folder from `vitlab train` (or a vitlab .safetensors)")
    q.add_argument("--out", required=True, help="folder for the PNG files (default: none, required)")
    add_weights_flag(q, None, SELECTED_WEIGHTS)
    q.set_defaults(run=run_inspect)


def _model_and_data(run_dir: str, weights: str | None):
    from ..interop import load_model
    from ..tasks import load_run

    source = Path(run_dir)
    if source.is_file():
        model = load_model(source).eval()
        c = model.config
        size = c.img_size if isinstance(c.img_size, int) else c.img_size[0]
        return model, {"img_size": size, "channels": c.in_chans, "mean": [0.5] * c.in_chans,
                       "std": [0.5] * c.in_chans}
    model, info = load_run(run_dir, weights)
    return model, info["data"]


def run_attention(args: argparse.Namespace) -> int:
    from ..data.images import INPUT_HINT, read_image
    from ..viz.attention import image_attention
    from ..viz.render import attention_strip, save_png

    model, data = _model_and_data(args.run_dir, args.weights)
    if not -len(model.blocks) <= args.layer < len(model.blocks):
        raise ValueError(f"--layer must be in {-len(model.blocks)}..{len(model.blocks) - 1}, got {args.layer}")
    out = Path(args.out)
    for path in args.images:
        shown, rollout, heads, probs = image_attention(model, read_image(path, data["channels"], hint=INPUT_HINT), data,
                                                       args.head_fusion, args.discard_ratio, args.layer)
        written = save_png(attention_strip(shown, rollout, heads), out / f"{Path(path).stem}_attention.png")
        print(f"{written}: predicted class {int(probs.argmax())} ({float(probs.max()):.3f}); panels: input, "
              f"rollout ({args.head_fusion}), layer {args.layer} heads 0..{heads.shape[0] - 1}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from ..viz.inspect import plot_filter_components, plot_position_similarity

    model, _ = _model_and_data(args.run_dir, args.weights)
    out = Path(args.out)
    if model.pos_embed is not None:
        print(f"wrote {plot_position_similarity(model, out / 'position_similarity.png')}")
    else:
        print("no position embeddings in this model (pos_embed='none'): skipped their similarity")
    print(f"wrote {plot_filter_components(model, out / 'patch_filters_pca.png')}")
    return 0
