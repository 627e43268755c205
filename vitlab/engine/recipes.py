"""Default training recipes: what `vitlab train` does when given only the data.

The Fashion-MNIST recipe was sized by measurement on 2 CPU cores to reach ≥ 90 % test accuracy within 15
minutes of training (benchmarks/fashion_mnist_recipe.py; the README has the table).
"""

from __future__ import annotations

from typing import Any

RECIPES: dict[str, dict[str, Any]] = {
    # Measured: in a 15-minute budget the model underfits (train ≈ test accuracy), so augmentation beyond flips
    # only slows learning (1 epoch: 80.0 % without shifts vs 71.5 % with 2-pixel shifts), and fewer, wider
    # tokens buy more accuracy per second than many narrow ones.
    "fashion-mnist": {
        "model": "vit_mini_convstem_28",
        "epochs": 8,
        "batch_size": 128,
        "lr": 2e-3,
        "weight_decay": 0.05,
        "warmup_epochs": 1.0,
        "label_smoothing": 0.1,
        "clip_grad": 1.0,
        "drop_path": 0.0,
        "crop_padding": 0,
        "hflip": True,
        "img_size": 28,
    },
    # your own images: a small ViT at a CPU-friendly resolution; override --model/--img-size for more
    "folder": {
        "model": "vit_tiny_patch16_224",
        "epochs": 20,
        "batch_size": 64,
        "lr": 1e-3,
        "weight_decay": 0.05,
        "warmup_epochs": 2.0,
        "label_smoothing": 0.1,
        "clip_grad": 1.0,
        "drop_path": 0.1,
        "crop_padding": None,
        "hflip": True,
        "img_size": 224,
    },
}


def recipe_for(data: str) -> dict[str, Any]:
    from ..data.registry import FASHION_MNIST_NAMES

    return dict(RECIPES["fashion-mnist" if data.lower() in FASHION_MNIST_NAMES else "folder"])
