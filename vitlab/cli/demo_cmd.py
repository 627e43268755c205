"""`vitlab demo`: one image through a ViT, printing the shape at every step of the paper's equations."""

from __future__ import annotations

import argparse

import torch

from ..commands import command


@command("demo", order=110)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run one image through a ViT and print every shape",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="vit_tiny_patch4_28", help="registered model name")
    parser.add_argument("--seed", type=int, default=0, help="seed for the random weights")
    parser.set_defaults(run=run)


def load_example_image(in_chans: int, size: tuple[int, int]) -> tuple[torch.Tensor, str]:
    """A real Fashion-MNIST test image when the dataset is installed, else random pixels. (1, C, H, W)."""
    try:
        from ..data.fashion_mnist import load_fashion_mnist

        images, labels = load_fashion_mnist("test", download=False)
        image = images[:1, None].float() / 255.0  # (1, 1, 28, 28)
        source = f"Fashion-MNIST test image 0 (label {int(labels[0])})"
    except (FileNotFoundError, ValueError, OSError):  # no dataset here: the demo is about shapes
        image = torch.rand(1, 1, 28, 28)
        source = "random pixels (Fashion-MNIST not found)"
    image = torch.nn.functional.interpolate(image, size=size, mode="bilinear", align_corners=False)
    return image.expand(1, in_chans, *size).contiguous(), source


def run(args: argparse.Namespace) -> int:
    from ..layers.patch_embed import patchify
    from ..models import create_model
    from ..models.vit import count_parameters

    torch.manual_seed(args.seed)
    model = create_model(args.model).eval()
    c = model.config
    size = model.patch_embed.img_size
    image, source = load_example_image(c.in_chans, size)
    print(f"model {args.model}: {count_parameters(model):,} parameters (random weights), input: {source}")
    with torch.no_grad():
        rows = [("image (B, C, H, W)", image)]
        rows.append(("patches, flattened (B, N, C·ph·pw)", patchify(image, model.patch_embed.patch_size)))
        tokens = model.patch_embed(image)
        rows.append(("patch tokens (B, N, D)", tokens))
        x = model.embed(image)
        rows.append(("+ class token, + positions (B, 1+N, D)", x))
        for i, block in enumerate(model.blocks):
            x = block(x)
            rows.append((f"encoder block {i} (B, 1+N, D)", x))
        x = model.norm(x)
        rows.append(("final LayerNorm (B, 1+N, D)", x))
        rows.append(("pooled class token (B, D)", model.forward_head(x, pre_logits=True)))
        logits = model.forward_head(x)
        rows.append(("logits (B, classes)", logits))
    for label, tensor in rows:
        print(f"  {label:<42} {tuple(tensor.shape)}")
    probs = logits.softmax(-1)[0]
    print(f"  top class {int(probs.argmax())} with probability {float(probs.max()):.3f} (untrained: near 1/classes)")
    return 0
