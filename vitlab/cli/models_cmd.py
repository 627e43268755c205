"""`vitlab models [PATTERN]`: the registered models with their sizes and parameter counts."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models", help="list registered models", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("pattern", nargs="?", default="*", help="shell-style pattern, e.g. 'vit_*_patch16_*'")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..models import create_model, list_models
    from ..models.vit import count_parameters

    names = list_models(args.pattern)
    if not names:
        raise ValueError(f"no registered model matches {args.pattern!r}; try `vitlab models` for all of them")
    print(f"{'model':<32} {'image':>9} {'patch':>7} {'dim':>5} {'depth':>5} {'heads':>5} {'classes':>7} {'params':>13}")
    for name in names:
        with torch.device("meta"):  # count without allocating
            model = create_model(name)
        c = model.config
        if hasattr(c, "encoder_config"):  # SETR: the sizes of its ViT encoder
            encoder = c.encoder_config()
            c = SimpleNamespace(img_size=encoder.img_size, patch_size=encoder.patch_size, dim=encoder.dim,
                                depth=encoder.depth, num_heads=encoder.num_heads, num_classes=c.num_classes)
        elif c.family == "ipt":  # IPT: its body's input side, token patch and width; no classes
            c = SimpleNamespace(img_size=c.patch_size, patch_size=c.patch_dim, dim=c.channels * c.patch_dim ** 2,
                                enc_layers=c.num_layers, dec_layers=c.num_layers, num_heads=c.num_heads,
                                num_classes="—")
        elif c.family == "edsr":  # a convnet: its width and residual blocks
            c = SimpleNamespace(img_size=None, patch_size=None, dim=c.channels, depth=c.num_blocks, num_classes="—")
        elif c.family == "vqgan":  # an autoencoder: its training size, downsampling factor f as the "patch", codes
            c = SimpleNamespace(img_size=c.resolution, patch_size=2 ** (len(c.ch_mult) - 1), dim=c.embed_dim,
                                depth=len(c.ch_mult), num_classes=f"{c.num_codes} codes")
        elif c.family == "gpt_prior":  # a code-sequence model: its code grid as the "image"
            c = SimpleNamespace(img_size=c.grid, patch_size=None, dim=c.dim, depth=c.depth, num_heads=c.num_heads,
                                num_classes=c.num_classes)
        print(f"{name:<32} {_size(c.img_size):>9} {_size(getattr(c, 'patch_size', None)):>7} "
              f"{getattr(c, 'dim', '—')!s:>5} {_depth(c):>5} {getattr(c, 'num_heads', '—')!s:>5} {c.num_classes:>7} "
              f"{count_parameters(model):>13,}")
    return 0


def _size(value) -> str:
    """28, (16, 16) -> "16×16", None (a convnet's patch) -> "—"."""
    if value is None:
        return "—"
    return str(value) if isinstance(value, int) else "×".join(map(str, value))


def _depth(c) -> str:
    """Blocks: a ViT's depth, a DETR's encoder + decoder layers, a ResNet's depth."""
    if hasattr(c, "enc_layers"):
        return f"{c.enc_layers}+{c.dec_layers}"
    return str(getattr(c, "depth", "—"))
