"""`vitlab models [PATTERN]`: the registered models with their sizes and parameter counts."""

from __future__ import annotations

import argparse

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
    print(f"{'model':<26} {'image':>9} {'patch':>7} {'dim':>5} {'depth':>5} {'heads':>5} {'classes':>7} {'params':>13}")
    for name in names:
        with torch.device("meta"):  # count without allocating
            model = create_model(name)
        c = model.config
        img = c.img_size if isinstance(c.img_size, int) else "×".join(map(str, c.img_size))
        patch = c.patch_size if isinstance(c.patch_size, int) else "×".join(map(str, c.patch_size))
        print(f"{name:<26} {img!s:>9} {patch!s:>7} {c.dim:>5} {c.depth:>5} {c.num_heads:>5} {c.num_classes:>7} "
              f"{count_parameters(model):>13,}")
    return 0
