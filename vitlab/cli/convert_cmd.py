"""`vitlab convert SRC DST`: a checkpoint of any format vitlab reads (timm, Hugging Face, a Google .npz, the
official DETR, Deformable DETR, SETR and IPT releases, taming's and diffusers' VQGANs, or vitlab's own) in, vitlab
safetensors out."""

from __future__ import annotations

import argparse

from ..commands import command


@command("convert", order=60)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("convert", help="convert a checkpoint to vitlab safetensors (weights + config)")
    p.add_argument("src", help="a .safetensors/.pth/.bin/.ckpt state dict, a Hugging Face model folder, or a Google "
                   ".npz, of any family vitlab reads; or a release tag (vitlab models --pretrained) or "
                   "hf-hub:org/name[@revision], downloaded into the Hugging Face cache first")
    p.add_argument("dst", help="the .safetensors file to write")
    p.add_argument("--model", help="registered model the checkpoint is (default: worked out from the checkpoint)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..interop import convert, load_model
    from ..models.vit import count_parameters

    path = convert(args.src, args.dst, args.model)
    model = load_model(path)
    print(f"wrote {path}: {model.config.describe()}, {count_parameters(model):,} parameters")
    return 0
