"""`vitlab convert SRC DST`: a timm, Hugging Face, JAX .npz, official DETR (or vitlab) checkpoint in, vitlab
safetensors out."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("convert", help="convert a checkpoint to vitlab safetensors (weights + config)")
    p.add_argument("src", help="a .safetensors/.pth/.bin state dict (timm, official DETR), a Hugging Face model "
                   "folder or file (ViT, DeiT, DETR), or a Google .npz")
    p.add_argument("dst", help="the .safetensors file to write")
    p.add_argument("--model", help="registered model the checkpoint is (default: worked out from the checkpoint)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..interop import convert, load_model
    from ..models.vit import count_parameters

    path = convert(args.src, args.dst, args.model)
    model = load_model(path)
    c = model.config
    if c.family in ("detr", "deformable_detr"):
        name = "DETR" if c.family == "detr" else "Deformable DETR"
        print(f"wrote {path}: {name} with a {c.backbone} backbone, {c.enc_layers} + {c.dec_layers} layers "
              f"{c.dim} wide, {c.num_heads} heads, {c.num_queries} queries, {c.num_classes} classes, "
              f"{count_parameters(model):,} parameters")
    else:
        print(f"wrote {path}: ViT {c.dim} wide, {c.depth} deep, {c.num_heads} heads, patch {c.patch_size}, "
              f"image {c.img_size}, {c.num_classes} classes, {count_parameters(model):,} parameters")
    return 0
