"""`vitlab make-scenes --out DIR`: the scenes detection/segmentation set, made of real Fashion-MNIST items."""

from __future__ import annotations

import argparse

from ..commands import command


def _range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a range such as 1-6 or a single number, got {text!r}") from None


def _classes(text: str) -> tuple[int, ...]:
    from .fashion_mnist import FASHION_MNIST_CLASSES

    names = {name.lower(): i for i, name in enumerate(FASHION_MNIST_CLASSES)}
    try:
        return tuple(int(part) if part.strip().isdigit() else names[part.strip().lower()] for part in text.split(","))
    except KeyError as error:
        raise argparse.ArgumentTypeError(f"{error.args[0]!r} is not a Fashion-MNIST class; they are "
                                         f"{', '.join(FASHION_MNIST_CLASSES)} (or 0-9)") from None


@command("make-scenes", order=130)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from .scenes import SceneOptions

    d = SceneOptions()
    p = subparsers.add_parser(
        "make-scenes", help="make a COCO-format detection set (and semantic masks) from Fashion-MNIST items",
        description="Paste Fashion-MNIST items (train items into train scenes, test items into val and test scenes, "
                    "no item in both), rescaled and lightly overlapping, onto canvases; write PNG scenes, COCO "
                    "instances (boxes, RLE masks) and semantic masks. The same options give the same bytes.")
    p.add_argument("--out", required=True, help="folder to write (images/, masks/, annotations/)")
    p.add_argument("--train", type=int, default=d.train, help=f"train scenes (default: {d.train})")
    p.add_argument("--val", type=int, default=d.val,
                   help=f"val scenes, which select a model's best checkpoint (default: {d.val})")
    p.add_argument("--test", type=int, default=d.test, help=f"test scenes, scored once at the end (default: {d.test})")
    p.add_argument("--size", type=int, default=d.size, help=f"canvas side in pixels (default: {d.size})")
    p.add_argument("--objects", type=_range, default=d.objects, metavar="MIN-MAX",
                   help=f"items per scene (default: {d.objects[0]}-{d.objects[1]})")
    p.add_argument("--scale", type=_range, default=d.scale, metavar="MIN-MAX",
                   help=f"an item's side after rescaling, pixels (default: {d.scale[0]}-{d.scale[1]})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"(default: {d.seed})")
    p.add_argument("--classes", type=_classes, default=d.classes, metavar="LIST",
                   help="the Fashion-MNIST classes to draw, by number or name, comma-separated (e.g. 0,1,2,3,4 or "
                        "T-shirt/top,Trouser); category ids follow their order (default: all ten)")
    p.add_argument("--data-dir", help="where Fashion-MNIST's files are (default: the usual places, then download)")
    p.add_argument("--allow-partial-data", action="store_true",
                   help="accept a Fashion-MNIST copy with fewer images than the official counts (default: off)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .scenes import SceneOptions, make_scenes

    options = SceneOptions(train=args.train, val=args.val, test=args.test, size=args.size, objects=args.objects,
                           scale=args.scale, seed=args.seed, classes=args.classes)
    counts = make_scenes(args.out, options, args.data_dir, args.allow_partial_data)
    print(f"scenes in {args.out}: " + ", ".join(f"{counts[split]} {split} ({counts[f'{split}_objects']} items)"
                                                 for split in ("train", "val", "test") if split in counts))
    return 0
